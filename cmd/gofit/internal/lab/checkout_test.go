package lab

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheckOutUndo(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	undo, err := checkOut(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("CheckOut did not create %s: %v", dir, err)
	}
	undo()
	if _, err := os.Stat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Errorf("undo left %s behind (%v)", filepath.Join(base, "a"), err)
	}

	// Once results are written, undo keeps them.
	undo, err = checkOut(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	undo()
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err != nil {
		t.Errorf("undo removed results: %v", err)
	}

	// A directory that existed before is never removed.
	undo, err = checkOut(base)
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(base, "a"))
	undo()
	if _, err := os.Stat(base); err != nil {
		t.Errorf("undo removed a directory it did not create: %v", err)
	}

	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkOut(filepath.Join(file, "x")); err == nil {
		t.Error("CheckOut under a file: want an error")
	}
}
