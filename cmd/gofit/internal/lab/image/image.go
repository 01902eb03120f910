// Package image opens an OCI image for the lab (gofit lab --image): it
// reads the image from an OCI layout, an OCI or docker archive or a
// registry (go-containerregistry does the reading), checks that it can run
// on this machine, unpacks its root filesystem into a directory, and says
// how the image runs: its entrypoint and cmd, env, working directory and
// user. The sandbox then starts it in that root (sandbox.Root).
package image

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/gofit-dev/gofit/tools/archive"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image is an unpacked image and how it runs.
type Image struct {
	Ref      string // as given
	Digest   string // the image manifest's digest
	Platform string // os/architecture from its config
	Root     string // the unpacked root filesystem
	// Entrypoint and Cmd as the image's config gives them; the command is
	// Entrypoint followed by Cmd (or by --args, which replaces Cmd).
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE
	WorkingDir string   // "" is /
	User       string   // as the config gives it ("" is root)
	UID, GID   int
}

// Open reads the image ref names, for this machine's platform. ref is
// oci:DIR (an OCI layout), oci-archive:FILE (a tar of one),
// docker-archive:FILE (docker save's format) or a registry reference,
// pulled with the credentials of ~/.docker/config.json.
func Open(ctx context.Context, ref, tmp string) (v1.Image, error) {
	want := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	switch {
	case strings.HasPrefix(ref, "oci:"):
		return fromLayout(strings.TrimPrefix(ref, "oci:"), want)
	case strings.HasPrefix(ref, "oci-archive:"):
		file := strings.TrimPrefix(ref, "oci-archive:")
		dir, err := os.MkdirTemp(tmp, "oci-layout-")
		if err != nil {
			return nil, err
		}
		if err := untarLayout(file, dir); err != nil {
			return nil, err
		}
		return fromLayout(dir, want)
	case strings.HasPrefix(ref, "docker-archive:"):
		file := strings.TrimPrefix(ref, "docker-archive:")
		if _, err := os.Stat(file); err != nil {
			return nil, err
		}
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return img, nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%q is not an image reference (or oci:DIR, oci-archive:FILE, docker-archive:FILE): %w", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithPlatform(want), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", r, err)
	}
	return img, nil
}

// fromLayout finds the image for want in an OCI layout: the first image
// manifest whose platform matches, looking into nested indexes; a layout
// with one image and no platforms gives that image (its config is
// checked later).
func fromLayout(dir string, want v1.Platform) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	var only []v1.Image
	var seen []string
	var walk func(v1.ImageIndex) (v1.Image, error)
	walk = func(idx v1.ImageIndex) (v1.Image, error) {
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range m.Manifests {
			switch {
			case d.MediaType.IsIndex():
				child, err := idx.ImageIndex(d.Digest)
				if err != nil {
					return nil, err
				}
				if img, err := walk(child); img != nil || err != nil {
					return img, err
				}
			case d.MediaType.IsImage():
				if d.Platform != nil {
					seen = append(seen, d.Platform.OS+"/"+d.Platform.Architecture)
					if d.Platform.OS == want.OS && d.Platform.Architecture == want.Architecture {
						return idx.Image(d.Digest)
					}
					continue
				}
				img, err := idx.Image(d.Digest)
				if err != nil {
					return nil, err
				}
				only = append(only, img)
			}
		}
		return nil, nil
	}
	img, err := walk(idx)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if img != nil {
		return img, nil
	}
	if len(only) == 1 {
		return only[0], nil
	}
	if len(seen) > 0 {
		return nil, fmt.Errorf("OCI layout %s has no image for %s/%s (it has %s)", dir, want.OS, want.Architecture, strings.Join(seen, ", "))
	}
	return nil, fmt.Errorf("OCI layout %s: %d images without a platform; want exactly one", dir, len(only))
}

// Load opens ref, checks it runs here, and unpacks it into root (which
// must not exist yet; tmp is for an archive's layout). Nothing is
// unpacked when a check fails.
func Load(ctx context.Context, ref, root, tmp string) (*Image, error) {
	img, err := Open(ctx, ref, tmp)
	if err != nil {
		return nil, fmt.Errorf("--image %s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("--image %s: its config: %w", ref, err)
	}
	dig, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("--image %s: %w", ref, err)
	}
	im := &Image{Ref: ref, Digest: dig.String(), Platform: cf.OS + "/" + cf.Architecture, Root: root,
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, User: cf.Config.User}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		return nil, fmt.Errorf("--image %s is for %s; this machine runs linux/%s", ref, im.Platform, runtime.GOARCH)
	}
	if len(im.Entrypoint) == 0 && len(im.Cmd) == 0 {
		return nil, fmt.Errorf("--image %s has no entrypoint and no cmd: nothing to run (give the command with --args)", ref)
	}
	// Every layer is there before anything is unpacked: a layout or
	// archive missing a blob fails here, naming it.
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("--image %s: its layers: %w", ref, err)
	}
	for i, l := range layers {
		d, _ := l.Digest()
		rc, err := l.Compressed()
		if err != nil {
			return nil, fmt.Errorf("--image %s: layer %d (%s) is missing: %w", ref, i+1, d, err)
		}
		rc.Close()
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := archive.Unpack(rc, root); err != nil {
		return nil, fmt.Errorf("--image %s: unpack: %w", ref, err)
	}
	if im.UID, im.GID, err = lookupUser(root, im.User); err != nil {
		return nil, fmt.Errorf("--image %s: user %q: %w", ref, im.User, err)
	}
	return im, nil
}

// Command is what the image runs: its entrypoint, then args if given
// (--args replaces the image's cmd), else its cmd.
func (im *Image) Command(args []string) []string {
	if args == nil {
		args = im.Cmd
	}
	return append(append([]string{}, im.Entrypoint...), args...)
}

// Resolve finds argv0 in the image as its runtime would: a name without
// a slash is looked up in the image's PATH. It returns the path inside
// the image and on this machine.
func (im *Image) Resolve(argv0 string) (inImage, onHost string, err error) {
	if argv0 == "" {
		return "", "", errors.New("empty command")
	}
	cands := []string{argv0}
	if !strings.Contains(argv0, "/") {
		cands = nil
		pathVar := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		for _, e := range im.Env {
			if v, ok := strings.CutPrefix(e, "PATH="); ok {
				pathVar = v
			}
		}
		for _, d := range filepath.SplitList(pathVar) {
			cands = append(cands, path.Join(d, argv0))
		}
	} else if !path.IsAbs(argv0) {
		cands = []string{path.Join("/", im.WorkingDir, argv0)}
	}
	for _, c := range cands {
		host, err := InRoot(im.Root, c)
		if err != nil {
			continue
		}
		if st, err := os.Stat(host); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return c, host, nil
		}
	}
	return "", "", fmt.Errorf("%s: not an executable file in the image", argv0)
}

// InRoot is p (a path inside the image) on this machine, following
// symbolic links inside root as the image would see them: never out of
// root.
func InRoot(root, p string) (string, error) {
	cur := "/"
	rest := strings.Split(path.Clean("/"+p), "/")
	for hops := 0; len(rest) > 0; {
		part := rest[0]
		rest = rest[1:]
		if part == "" || part == "." {
			continue
		}
		next := path.Join(cur, part)
		st, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if st.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many links", p)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		rest = append(strings.Split(path.Clean(target), "/"), rest...)
		cur = "/"
	}
	return filepath.Join(root, cur), nil
}

// lookupUser turns a config's user (name or number, then optionally
// :group) into numbers, from the image's /etc/passwd and /etc/group.
func lookupUser(root, user string) (uid, gid int, err error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	if n, err := strconv.Atoi(u); err == nil {
		uid, gid = n, n
		// The user's primary group, where the image names one.
		if e, ok := findEntry(root, "/etc/passwd", func(f []string) bool { return len(f) > 3 && f[2] == u }); ok {
			if n, err := strconv.Atoi(e[3]); err == nil {
				gid = n
			}
		}
	} else {
		e, ok := findEntry(root, "/etc/passwd", func(f []string) bool { return len(f) > 3 && f[0] == u })
		if !ok {
			return 0, 0, fmt.Errorf("no user %s in the image's /etc/passwd", u)
		}
		if uid, err = strconv.Atoi(e[2]); err != nil {
			return 0, 0, fmt.Errorf("/etc/passwd: %s: uid %q", u, e[2])
		}
		if gid, err = strconv.Atoi(e[3]); err != nil {
			return 0, 0, fmt.Errorf("/etc/passwd: %s: gid %q", u, e[3])
		}
	}
	if hasGroup {
		if n, err := strconv.Atoi(g); err == nil {
			gid = n
		} else {
			e, ok := findEntry(root, "/etc/group", func(f []string) bool { return len(f) > 2 && f[0] == g })
			if !ok {
				return 0, 0, fmt.Errorf("no group %s in the image's /etc/group", g)
			}
			if gid, err = strconv.Atoi(e[2]); err != nil {
				return 0, 0, fmt.Errorf("/etc/group: %s: gid %q", g, e[2])
			}
		}
	}
	return uid, gid, nil
}

func findEntry(root, file string, match func([]string) bool) ([]string, bool) {
	p, err := InRoot(root, file)
	if err != nil {
		return nil, false
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Split(sc.Text(), ":"); match(fields) {
			return fields, true
		}
	}
	return nil, false
}

// untarLayout unpacks an OCI archive (a tar of an OCI layout) into dir.
func untarLayout(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := archive.Unpack(f, dir); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return fmt.Errorf("%s is not an OCI archive (no index.json)", file)
	}
	return nil
}
