package vmtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVM builds the test binaries of Suites statically, boots a Debian
// kernel under QEMU once with cgroup v2 and once hybrid, runs them inside,
// and fails on any failure in there, on a required test that skipped, and
// on a VM that hung or died.
func TestVM(t *testing.T) {
	k, tools := bootEnv(t)
	ctx := context.Background()
	t.Logf("kernel %s (%s)", k.Version, filepath.Dir(k.VMLinux))

	src := sourceRoot(t)
	start := time.Now()
	bins := buildSuites(t, src)
	t.Logf("built %d test binaries in %v", len(bins), time.Since(start).Round(time.Millisecond))

	for _, layout := range []Layout{V2, Hybrid} {
		t.Run(string(layout), func(t *testing.T) {
			if why := nativeAlready(layout); why != "" {
				t.Skip(why)
			}
			var run []Binary
			for _, b := range bins {
				b.Args = []string{"-test.v", "-test.count=1"}
				for _, s := range Suites() {
					if s.Name() == b.Name && s.Skip[layout] != "" {
						b.Args = append(b.Args, "-test.skip", s.Skip[layout])
					}
				}
				run = append(run, b)
			}
			r := &Run{Kernel: k, Tools: tools, Layout: layout, Source: src, Binaries: run, Console: &lineLogger{t: t}}
			rep := r.Boot(ctx)
			t.Logf("%s: booted in %.1fs; whole run %.1fs", layout, rep.Boot.Seconds(), rep.Wall.Seconds())
			if rep.Err != nil {
				t.Errorf("%s: %v; console ends:\n%s", layout, rep.Err, tail(rep.Console, 40))
			}
			for _, res := range rep.Results {
				for _, s := range Suites() {
					if s.Name() == res.Name {
						checkResult(t, layout, s, res)
					}
				}
			}
		})
	}
}

// nativeAlready says why a layout's boot would repeat what make test has
// just run on this machine: the same suites on the same layout, natively,
// as root (every required test of the hybrid layout passed on this
// project's hybrid CI host in make test's own packages, 2026-12-07). The
// boot cost about 150 s of CI's 90 minutes. GOFIT_VM_LAYOUTS=v2,hybrid
// boots both anyway (make test-v2 does).
func nativeAlready(layout Layout) string {
	if want := os.Getenv("GOFIT_VM_LAYOUTS"); want != "" {
		if !slices.Contains(strings.Split(want, ","), string(layout)) {
			return fmt.Sprintf("skipping the %s boot: GOFIT_VM_LAYOUTS=%s", layout, want)
		}
		return ""
	}
	if host, ok := HostLayout(); ok && host == layout && os.Geteuid() == 0 {
		return fmt.Sprintf("skipping the %s boot: this machine is %s and make test ran the suites on it, as root", layout, host)
	}
	return ""
}

// checkResult fails on a binary that failed or never finished, and on a
// required test that did not pass; it logs what ran and what skipped.
func checkResult(t *testing.T, layout Layout, s Suite, res Result) {
	t.Helper()
	// Subtests too (indented), so MustPass can name one: a parent passes
	// even when all its subtests skip.
	top := regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	var slow []string
	status := map[string]string{}
	var skipped []string
	last := "" // a skip's reason is the line logged just before "--- SKIP"
	sc := bufio.NewScanner(strings.NewReader(res.Output))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := top.FindStringSubmatch(sc.Text()); m != nil {
			status[m[2]] = m[1]
			if secs, _ := strconv.ParseFloat(m[3], 64); secs >= 5 {
				slow = append(slow, fmt.Sprintf("%s %.0fs", m[2], secs))
			}
			if m[1] == "SKIP" {
				skipped = append(skipped, m[2]+" ("+last+")")
			}
		}
		last = strings.TrimSpace(sc.Text())
	}
	count := map[string]int{}
	for _, st := range status {
		count[st]++
	}
	t.Logf("%s: exit %d in %.1fs: %d passed, %d failed, %d skipped", s.Pkg, res.ExitCode, res.Seconds, count["PASS"], count["FAIL"], count["SKIP"])
	if len(slow) > 0 {
		t.Logf("  slowest: %s", strings.Join(slow, ", "))
	}
	for _, sk := range skipped {
		t.Logf("  skipped %s", sk)
	}
	if os.Getenv("GOFIT_VM_VERBOSE") != "" {
		t.Logf("%s output:\n%s", s.Pkg, res.Output)
	}
	switch {
	case res.ExitCode == -1:
		t.Errorf("%s (%s): never finished inside the VM (hung and killed, or the VM died); output ends:\n%s", s.Pkg, layout, tail(res.Output, 60))
	case res.ExitCode != 0:
		t.Errorf("%s (%s): exit %d; output ends:\n%s", s.Pkg, layout, res.ExitCode, failures(res.Output))
	}
	for _, name := range s.MustPass[layout] {
		if status[name] != "PASS" {
			t.Errorf("%s (%s): %s must pass on this kernel, got %q", s.Pkg, layout, name, status[name])
		}
	}
}

// sourceRoot is the repository root: the directory holding go.work.
func sourceRoot(t *testing.T) string {
	t.Helper()
	root, err := SourceRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildSuites builds each suite's test binary, statically (CGO_ENABLED=0:
// the initramfs has no C library), into a temp dir.
func buildSuites(t *testing.T, src string) []Binary {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := t.TempDir()
	var bins []Binary
	for _, s := range Suites() {
		if only := os.Getenv("GOFIT_VM_PKGS"); only != "" && !regexp.MustCompile(only).MatchString(s.Pkg) {
			continue
		}
		out := filepath.Join(dir, s.Name())
		cmd := exec.Command(goTool, "test", "-c", "-o", out, s.Pkg)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go test -c %s: %v\n%s", s.Pkg, err, b)
		}
		bins = append(bins, Binary{Name: s.Name(), Path: out, Dir: s.Dir(), Timeout: s.Timeout})
	}
	return bins
}

// lineLogger passes the guest's own progress lines to the test log.
type lineLogger struct {
	t   *testing.T
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := slices.Index(l.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(l.buf[:i]), "\r")
		l.buf = l.buf[i+1:]
		if strings.HasPrefix(line, "vmtest") {
			l.t.Log(line)
		}
	}
	return len(p), nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// failures picks the output of failing tests out of a verbose test log:
// each test's lines from its "=== RUN" on, where the test ended in FAIL (or
// the binary panicked), else the end of the log.
func failures(out string) string {
	var b strings.Builder
	var block []string
	flush := func(keep bool) {
		if keep {
			fmt.Fprintln(&b, strings.Join(block, "\n"))
		}
		block = block[:0]
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "=== RUN") {
			flush(false)
		}
		block = append(block, l)
		switch t := strings.TrimSpace(l); {
		case strings.HasPrefix(t, "--- FAIL"), strings.HasPrefix(t, "panic:"):
			flush(true)
		case strings.HasPrefix(t, "--- PASS"), strings.HasPrefix(t, "--- SKIP"):
			flush(false)
		}
	}
	flush(strings.Contains(strings.Join(block, "\n"), "panic:"))
	if b.Len() == 0 {
		return tail(out, 60)
	}
	return b.String()
}
