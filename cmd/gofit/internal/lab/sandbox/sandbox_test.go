package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A SIGKILLed lab leaves its temporary directory (the sample's copy, ~11
// MB); the next lab removes it, and never one whose lab still runs.
func TestSweepTemp(t *testing.T) {
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("skipping: cannot run true: %v", err)
	}
	stale := filepath.Join(root, tempPrefix+strconv.Itoa(dead.Process.Pid)+"-123")
	live := filepath.Join(root, tempPrefix+strconv.Itoa(os.Getppid())+"-456")
	own := filepath.Join(root, tempPrefix+strconv.Itoa(os.Getpid())+"-789")
	other := filepath.Join(root, "gofit-lab-notapid")
	for _, d := range []string{stale, live, own, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removed := sweepTemp(root)
	if len(removed) != 1 || removed[0] != stale {
		t.Errorf("removed %v, want only %s", removed, stale)
	}
	for _, d := range []string{live, own, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}

// TestSweepTempRecycledPID: a temp directory named for a live process that
// started after the directory was made (a recycled pid) is swept.
func TestSweepTempRecycledPID(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sleep", "30")
	old := filepath.Join(dir, tempPrefix+"PID-x")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	// The directory is made well before the process starts.
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)
	recycled := filepath.Join(dir, tempPrefix+pid+"-x")
	if err := os.Rename(old, recycled); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(recycled, past, past); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, tempPrefix+pid+"-y") // made after the process started
	if err := os.Mkdir(live, 0o755); err != nil {
		t.Fatal(err)
	}
	got := sweepTemp(dir)
	if len(got) != 1 || got[0] != recycled {
		t.Errorf("swept %v, want only %s", got, recycled)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live lab's directory was swept: %v", err)
	}
}

func TestPlacement(t *testing.T) {
	p := planPlacement([]int{0, 1}, 2, 1)
	if p.Isolated || p.Overlap != 1 || len(p.Target) != 2 || len(p.Generator) != 1 || p.Generator[0] != 1 || !strings.Contains(p.Note, "not isolated") {
		t.Errorf("2 CPUs, target needs 2: %+v", p)
	}
	p = planPlacement([]int{0, 1, 2, 3}, 2, 1)
	if !p.Isolated || p.Overlap != 0 || len(p.Target) != 3 || p.Generator[0] != 3 {
		t.Errorf("4 CPUs, target needs 2: %+v", p)
	}
	p = planPlacement([]int{0, 1, 2, 3}, 4, 1)
	if p.Isolated || len(p.Target) != 4 {
		t.Errorf("4 CPUs, target needs 4: %+v", p)
	}
}

func TestStartWatch(t *testing.T) {
	t0 := time.Unix(0, 0)
	// A slow cold start: faults climb for 6 s while the heap grows.
	w := startWatch{window: 3 * time.Second}
	for i := 0; i <= 120; i++ {
		if w.observe(t0.Add(time.Duration(i)*50*time.Millisecond), uint64(i*10), 0, uint64(i)*256<<10) {
			t.Fatalf("slow cold start called stalled at %v", time.Duration(i)*50*time.Millisecond)
		}
	}
	// Thrashing: faults climb, memory flat.
	w = startWatch{window: 3 * time.Second}
	stalled := false
	for i := 0; i <= 120 && !stalled; i++ {
		stalled = w.observe(t0.Add(time.Duration(i)*50*time.Millisecond), uint64(i*10), uint64(i), 30<<20)
	}
	if !stalled {
		t.Error("a start faulting with flat memory for 6 s is not stalled")
	}
}
