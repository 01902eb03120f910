package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/image"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/target"
)

// Opener opens the sandbox runner: New's, for `gofit lab` without --kube.
type Opener struct {
	sb       *sandbox.Sandbox
	dir      string // the temporary directory: the sample's binary and the reference's copy
	progress io.Writer
}

// New is the opener of a study's sandbox runner.
func New() *Opener { return &Opener{} }

var _ trial.Opener = (*Opener)(nil)

// Prepare makes the sandbox and settles the target in it: --image opened
// and unpacked, or the embedded sample copied out of this binary (with
// no target given), and the health trials' reference's own copy.
func (o *Opener) Prepare(ctx context.Context, s *trial.Study) error {
	o.progress = s.Progress
	sb, err := sandbox.New()
	if err != nil {
		if errors.Is(err, iofs.ErrPermission) {
			return fmt.Errorf("%w; the lab needs root on Linux with cgroupfs mounted writable (try: sudo gofit lab)", err)
		}
		return err
	}
	o.sb = sb
	// A temporary directory named for this process, so a later lab sweeps
	// it if this one is killed: the sample's binary and the reference's
	// copy live there.
	dir, err := sandbox.TempDir()
	if err != nil {
		return err
	}
	o.dir = dir
	if s.ImageRef != "" {
		if err := fromImage(ctx, s, dir); err != nil {
			return err
		}
	}
	if s.Target.Path == "" {
		// The embedded sample: this very binary, copied so its page cache
		// can be evicted before each trial without touching the running
		// lab.
		self, err := os.Executable()
		if err != nil {
			return err
		}
		path := filepath.Join(dir, "gofit-sample")
		if err := copyFile(self, path); err != nil {
			return err
		}
		s.Target = sandbox.Target{Path: path, Args: []string{trial.SampleCommand, "127.0.0.1:{port}"}, URL: "http://127.0.0.1:{port}/work"}
		s.Sample = true
	}
	// The health trials' reference runs beside the limited target: from
	// its own copy, so neither is charged for the other's page cache.
	s.RefTarget = s.Target
	s.RefTarget.Path = filepath.Join(dir, "reference-"+filepath.Base(s.Target.Path))
	if s.Target.Root != nil {
		// Inside the image's root, beside the original.
		s.RefTarget.Path = filepath.Join(filepath.Dir(s.Target.Path), ".gofit-reference-"+filepath.Base(s.Target.Path))
	}
	if err := copyFile(s.Target.Path, s.RefTarget.Path); err != nil {
		s.RefTarget = sandbox.Target{}
		s.Warnings = append(s.Warnings, fmt.Sprintf("the health trials' reference shares %s with the limited run (%v): page cache one faults in is charged to the other", s.Target.Path, err))
	}
	return nil
}

// Open checks the target, reads its executable, and places the target
// and the generator on CPUs of their own for the study's largest quota.
func (o *Opener) Open(ctx context.Context, s *trial.Study) (trial.Runner, error) {
	if err := CheckTarget(s.Target); err != nil {
		return nil, err
	}
	r := &runner{cfg: *s, sb: o.sb, progress: s.Progress}
	if st, err := os.Stat(s.Target.Path); err == nil {
		r.info.BinaryBytes = st.Size()
	}
	if b, err := target.Read(s.Target.Path); err == nil {
		r.info.Binary = b
	}
	need := 2 // Go ≥ 1.25 never defaults below 2
	for _, q := range s.Quotas {
		need = max(need, int(math.Ceil(q-1e-9)))
	}
	place, err := o.sb.Isolate(need)
	if err != nil {
		return nil, err
	}
	r.place = place
	r.info.Placement, r.info.NCPU = place, max(len(place.Target), 1)
	if len(place.Target) == 0 {
		r.info.NCPU = runtime.NumCPU()
	}
	return r, nil
}

// Close removes the sandbox and the temporary directory. A trial group
// that would not go away is left behind: Close says so on the progress
// stream, naming it, and the study's results stand.
func (o *Opener) Close() error {
	if o.sb != nil {
		if err := o.sb.Close(); err != nil && o.progress != nil {
			fmt.Fprintf(o.progress, "gofit lab: warning: cleanup: %v\n", err)
		}
	}
	if o.dir != "" {
		os.RemoveAll(o.dir)
	}
	return nil
}

// CheckTarget says what a target lacks to be studied here: a command, and
// a URL or a request mix.
func CheckTarget(t sandbox.Target) error {
	if t.Path == "" || t.URL == "" && len(t.Requests) == 0 {
		return usagef("--cmd with --url or --targets: no target")
	}
	return nil
}

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{trial.ErrUsage}, a...)...)
}

// fromImage opens --image, unpacks it into dir and makes it the target:
// its entrypoint and cmd (or --args), env with PORT={port}, working
// directory and user, run in its root filesystem. Every check is made
// before any trial starts.
func fromImage(ctx context.Context, s *trial.Study, dir string) error {
	im, err := image.Load(ctx, s.ImageRef, filepath.Join(dir, "rootfs"), dir)
	if err != nil {
		return err
	}
	argv := im.Command(s.ImageArgs)
	if len(argv) == 0 {
		return fmt.Errorf("%w: --image %s: --args is empty and the image has no entrypoint: nothing to run", trial.ErrUsage, s.ImageRef)
	}
	_, onHost, err := im.Resolve(argv[0])
	if err != nil {
		return fmt.Errorf("--image %s: its command %q: %w", s.ImageRef, strings.Join(argv, " "), err)
	}
	env, dropped := load.WithoutRuntimeVars(im.Env)
	if len(dropped) > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("the image sets %s: left out, since each trial sets its own (the baseline none)", strings.Join(dropped, ", ")))
	}
	env = append(env, "PORT={port}")
	s.Target.Path, s.Target.Args, s.Target.Env = onHost, argv[1:], env
	s.Target.Root = &sandbox.Root{Dir: im.Root, Cwd: im.WorkingDir, UID: im.UID, GID: im.GID}
	s.Image = fmt.Sprintf("%s (%s, %s)", s.ImageRef, im.Digest, im.Platform)
	return nil
}

// maxCopy bounds the executable copied for the reference.
const maxCopy = 1 << 30

// copyFile copies the executable src to dst, flushed so that dst's page
// cache can be dropped before each trial.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil {
		return err
	} else if !st.Mode().IsRegular() || st.Size() > maxCopy {
		return fmt.Errorf("%s: not a regular file of at most %d bytes", src, maxCopy)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// OnSandbox is a runner of s's trials in sb, a sandbox the caller made
// and closes, without CPUs of its own: for tests that run real trials.
func OnSandbox(s trial.Study, sb *sandbox.Sandbox) trial.Runner {
	return &runner{cfg: s, sb: sb, progress: s.Progress}
}
