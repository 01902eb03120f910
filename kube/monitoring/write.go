package monitoring

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Write writes Files(p) under dir and removes the generated files (.yaml
// and .json) it would no longer write.
func Write(dir string, p Params) error {
	files, err := Files(p)
	if err != nil {
		return err
	}
	return WriteFiles(dir, files)
}

// WriteChart writes ChartFiles(p) under dir (the chart's
// files/monitoring) the same way.
func WriteChart(dir string, p Params) error {
	files, err := ChartFiles(p)
	if err != nil {
		return err
	}
	return WriteFiles(dir, files)
}

// WriteFiles writes files under dir and removes the .yaml and .json files
// there that files does not name.
func WriteFiles(dir string, files map[string][]byte) error {
	for name, b := range files {
		f := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", f, err)
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f, err)
		}
	}
	stale, err := Stale(dir, files)
	if err != nil {
		return err
	}
	for _, name := range stale {
		if _, ok := files[name]; !ok {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("remove %s: %w", name, err)
			}
		}
	}
	return nil
}

// Stale lists, sorted, the files under dir that differ from files: changed,
// missing, or generated-looking (.yaml, .json) but not in files.
func Stale(dir string, files map[string][]byte) ([]string, error) {
	var out []string
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			out = append(out, name)
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return filepath.SkipDir
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ext := filepath.Ext(rel); (ext == ".yaml" || ext == ".json") && files[rel] == nil {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	sort.Strings(out)
	return out, nil
}
