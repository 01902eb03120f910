package report

import (
	"strings"
	"testing"
)

// TestWriteTextEscapesPaths: a cgroup path is the kernel's to name and may
// hold control characters (an escape sequence would reach the terminal);
// the text output quotes such paths.
func TestWriteTextEscapesPaths(t *testing.T) {
	evil := "/pod\x1b[31mred"
	r := Report{CgroupVersion: 2}
	r.CPU.Cgroup, r.Memory.Cgroup = evil, evil
	r.CPU.LimitSource, r.Memory.MaxSource = &evil, &evil
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "\x1b") {
		t.Errorf("raw escape sequence in the output:\n%q", out)
	}
	if !strings.Contains(out, `"/pod\x1b[31mred"`) {
		t.Errorf("path not shown quoted:\n%s", out)
	}
}
