package manage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gofit-dev/gofit/cgroup"
)

// A CPU request becomes the weight the kubelet writes: shares on v1, their
// cpu.weight conversion on v2 (the values kubelet writes for 250m, 1, 2).
func TestSetCPURequest(t *testing.T) {
	for _, tc := range []struct {
		version int
		cores   float64
		file    string
		want    string
	}{
		{1, 0.25, "cpu.shares", "256"},
		{1, 2, "cpu.shares", "2048"},
		{1, 0.001, "cpu.shares", "2"},
		{1, 0, "cpu.shares", "1024"},
		{2, 0.25, "cpu.weight", "10"},
		{2, 1, "cpu.weight", "39"},
		{2, 0, "cpu.weight", "100"},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, tc.file), []byte("1024\n"), 0o644)
		g := &Group{Cgroups: &cgroup.Cgroups{CPU: &cgroup.Node{Dir: dir, Version: tc.version}}}
		if err := g.SetCPURequest(tc.cores); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, tc.file)); string(b) != tc.want {
			t.Errorf("v%d request %g: %s = %q, want %q", tc.version, tc.cores, tc.file, b, tc.want)
		}
	}
	if err := (&Group{Cgroups: &cgroup.Cgroups{}}).SetCPURequest(1); err == nil {
		t.Error("no cpu cgroup: no error")
	}
}
