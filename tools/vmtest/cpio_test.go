package vmtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The initramfs writer's output unpacks with the cpio tool, where present,
// to the files written.
func TestInitramfsUnpacks(t *testing.T) {
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		t.Skip("skipping: no cpio tool to cross-check with")
	}
	dir := t.TempDir()
	bb := filepath.Join(dir, "busybox")
	ko := filepath.Join(dir, "a.ko")
	os.WriteFile(bb, []byte("#!/bin/sh\necho odd length\n"), 0o755)
	os.WriteFile(ko, []byte("mod"), 0o644)
	img := filepath.Join(dir, "initrd")
	if err := writeInitramfs(img, bb, &Kernel{Modules: []string{ko}}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	f, _ := os.Open(img)
	defer f.Close()
	cmd := exec.Command(cpio, "-idm", "--quiet")
	cmd.Dir, cmd.Stdin = out, f
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v: %s", err, b)
	}
	for name, want := range map[string]string{"bin/busybox": "#!/bin/sh\necho odd length\n", "modules/a.ko": "mod", "modules/order": "a\n", "init": initScript} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, []byte(want)) {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(out, "init")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("init mode: %v, %v", st.Mode(), err)
	}
}
