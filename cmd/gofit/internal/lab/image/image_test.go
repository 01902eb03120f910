package image

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/tools/ociimage"
)

// writeImage writes an OCI archive (also a docker archive) of files for
// the platforms archs, and returns its path.
func writeImage(t *testing.T, img ociimage.Image, archs ...string) string {
	t.Helper()
	for _, a := range archs {
		img.Platforms = append(img.Platforms, ociimage.Platform{Arch: a})
	}
	if img.Ref == "" {
		img.Ref = "example.com/svc:v1"
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ociimage.Write(f, img); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

var svc = ociimage.Image{
	Files: append(ociimage.Base(nil),
		ociimage.File{Path: "/app", Mode: os.ModeDir | 0o755},
		ociimage.File{Path: "/app/server", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		ociimage.File{Path: "/app/data.txt", Mode: 0o644, Data: []byte("x")}),
	Entrypoint: []string{"server"},
	Cmd:        []string{"--port", "{port}"},
	Env:        []string{"PATH=/app:/bin"},
	User:       "nonroot",
	WorkingDir: "/app",
}

// TestLoadForms: one image read from each local form gives the same
// config, the root filesystem and the user's numbers.
func TestLoadForms(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: unpacking an image keeps its owners, which needs root")
	}
	arch := runtime.GOARCH
	tarPath := writeImage(t, svc, arch)
	layoutDir := t.TempDir()
	if err := untarLayout(tarPath, layoutDir); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"oci-archive:" + tarPath, "docker-archive:" + tarPath, "oci:" + layoutDir} {
		tmp := t.TempDir()
		im, err := Load(context.Background(), ref, filepath.Join(tmp, "root"), tmp)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if im.Platform != "linux/"+arch || im.UID != 65532 || im.GID != 65532 || im.WorkingDir != "/app" {
			t.Errorf("%s: %+v", ref, im)
		}
		if got := strings.Join(im.Command(nil), " "); got != "server --port {port}" {
			t.Errorf("%s: command %q", ref, got)
		}
		if got := strings.Join(im.Command([]string{"-x"}), " "); got != "server -x" {
			t.Errorf("%s: --args: command %q", ref, got)
		}
		in, host, err := im.Resolve("server")
		if err != nil || in != "/app/server" || host != filepath.Join(im.Root, "app", "server") {
			t.Errorf("%s: resolve server: %q %q %v", ref, in, host, err)
		}
		if _, _, err := im.Resolve("data.txt"); err == nil {
			t.Errorf("%s: a file that is not executable resolved", ref)
		}
		if st, err := os.Stat(filepath.Join(im.Root, "home", "nonroot")); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: /home/nonroot: %v %v", ref, st, err)
		}
	}
}

// TestLoadErrors: what cannot run here is refused before anything is
// unpacked, with the flag and the reason.
func TestLoadErrors(t *testing.T) {
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	noCmd := svc
	noCmd.Entrypoint, noCmd.Cmd = nil, nil
	badUser := svc
	badUser.User = "nobody-here"
	cases := []struct {
		name, ref, want string
	}{
		{"another architecture", "oci-archive:" + writeImage(t, svc, other), "has no image for linux/" + runtime.GOARCH},
		{"no entrypoint", "oci-archive:" + writeImage(t, noCmd, runtime.GOARCH), "no entrypoint and no cmd"},
		{"no such archive", "oci-archive:/nonexistent.tar", "/nonexistent.tar"},
		{"not a reference", "Not A Ref!", "not an image reference"},
		{"unknown user", "oci-archive:" + writeImage(t, badUser, runtime.GOARCH), `user "nobody-here"`},
	}
	for _, c := range cases {
		tmp := t.TempDir()
		_, err := Load(context.Background(), c.ref, filepath.Join(tmp, "root"), tmp)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--image") {
			t.Errorf("%s: %v, want --image and %q", c.name, err, c.want)
		}
	}
	// A layout missing a layer's blob names the layer.
	layoutDir := t.TempDir()
	if err := untarLayout(writeImage(t, svc, runtime.GOARCH), layoutDir); err != nil {
		t.Fatal(err)
	}
	img, err := Open(context.Background(), "oci:"+layoutDir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := ls[0].Digest()
	if err := os.Remove(filepath.Join(layoutDir, "blobs", d.Algorithm, d.Hex)); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if _, err := Load(context.Background(), "oci:"+layoutDir, filepath.Join(tmp, "root"), tmp); err == nil || !strings.Contains(err.Error(), "layer 1") {
		t.Errorf("missing layer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "root")); err == nil {
		t.Error("the root was created though a layer is missing")
	}
}

// TestInRootStaysInRoot: a link in the image that points at / or above
// it resolves inside the root.
func TestInRootStaysInRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../..", filepath.Join(root, "usr", "bin", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"/usr/bin/up/etc": filepath.Join(root, "etc"), "/bin/up": root} {
		got, err := InRoot(root, p)
		if want == filepath.Join(root, "etc") {
			if err == nil || got != "" {
				t.Errorf("%s: %q %v, want not found inside the root", p, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", p, got, err, want)
		}
	}
}
