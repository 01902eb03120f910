//go:build !nokube

package pods

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/image"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/target"
)

// Opener opens the pod runner: New's, for `gofit lab --kube`.
type Opener struct {
	o Options
	r *podRunner // nil until Open made it
}

// New is the opener of a study's pod runner, as o says.
func New(o Options) *Opener { return &Opener{o: o} }

var _ trial.Opener = (*Opener)(nil)

// Prepare checks --node-selector and names the target: --image as the
// nodes pull it, or the sample the gofit image serves (on each pod's own
// port).
func (op *Opener) Prepare(ctx context.Context, s *trial.Study) error {
	if _, err := parseSelector(op.o.NodeSelector); err != nil {
		return err
	}
	if s.ImageRef == "" {
		s.Sample = true
		s.Target = sandbox.Target{URL: "http://127.0.0.1:{port}/work", ReadyTimeout: s.Target.ReadyTimeout}
	}
	s.Image = s.ImageRef
	return nil
}

// Open connects, makes the run's owner and its load pod, fits the study's
// quotas to the trial nodes and reads the target's binary (this gofit's
// for the sample, else --image's entrypoint).
func (op *Opener) Open(ctx context.Context, s *trial.Study) (trial.Runner, error) {
	r, err := newPodRunner(ctx, *s, op.o, s.Progress)
	if err != nil {
		return nil, err
	}
	op.r = r
	// The study is designed for the nodes' CPUs, not this machine's.
	fitted, err := nodeQuotas(*s, r.nodes.cpus, r.nodes.alloc)
	if err != nil {
		return nil, err
	}
	*s = fitted
	r.cfg = fitted
	if r.nodes.cpus > 0 {
		r.info.NCPU = r.nodes.cpus
	}
	r.info.Binary, r.info.BinaryErr = podBinary(ctx, fitted, s.Progress)
	return r, nil
}

// Close deletes the run's owner, and with it every pod of the run.
func (op *Opener) Close() error {
	if op.r == nil {
		return nil
	}
	return op.r.close()
}

// nodeQuotas fits the study's CPU quotas to the trial nodes: cpus CPUs
// each, alloc cores a pod can still ask for (both 0: unknown, nothing
// changes). The default study's whole-machine row becomes the nodes'
// (their CPUs, or what a pod can ask for there if less); a quota from
// --quotas above that is an error, since its trial pod would never
// schedule.
func nodeQuotas(cfg trial.Study, cpus int, alloc float64) (trial.Study, error) {
	if cpus <= 0 {
		return cfg, nil
	}
	if cfg.QuotasGiven {
		for _, q := range cfg.Quotas {
			if q > alloc+1e-9 {
				return cfg, usagef("--quotas: %g cores is more than a trial node has allocatable (%.2f of %d CPUs, the load pod's request counted where it shares the node): its trial pod would never be scheduled", q, alloc, cpus)
			}
		}
		return cfg, nil
	}
	var qs []float64
	for _, q := range cfg.Quotas {
		// The defaults' only row above 1 is this machine's CPUs.
		if q <= 1 && q <= alloc+1e-9 {
			qs = append(qs, q)
		}
	}
	if top := math.Floor(min(float64(cpus), alloc)*100) / 100; cfg.WholeRow && top > 1 {
		qs = append(qs, top)
	}
	if len(qs) == 0 {
		return cfg, fmt.Errorf("--node-selector: the trial nodes have %.2f cores allocatable, less than the smallest quota %g", alloc, slices.Min(cfg.Quotas))
	}
	cfg.Quotas = qs
	if cfg.CPURequest > 0 {
		cfg.CPURequest = slices.Min(qs)
	}
	return cfg, nil
}

// podBinary is what the trial pods run, read here: this gofit for the
// sample (the image of this release runs this build's sample), else
// --image pulled and unpacked into a temporary directory, its entrypoint
// read. It is the Go version and module facts the study designs by; an
// error says why they are unknown.
func podBinary(ctx context.Context, cfg trial.Study, progress io.Writer) (target.Binary, error) {
	if cfg.ImageRef == "" {
		self, err := os.Executable()
		if err != nil {
			return target.Binary{}, err
		}
		return target.Read(self)
	}
	dir, err := sandbox.TempDir() // a later lab run removes it if this one is killed
	if err != nil {
		return target.Binary{}, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	fmt.Fprintf(progress, "lab: reading --image %s here for its Go version\n", cfg.ImageRef)
	im, err := image.Load(ctx, cfg.ImageRef, filepath.Join(dir, "rootfs"), dir)
	if err != nil {
		return target.Binary{}, fmt.Errorf("%w: its Go version is unknown here, and the study plans as for an unknown one", err)
	}
	argv := im.Command(cfg.ImageArgs)
	if len(argv) == 0 {
		return target.Binary{}, fmt.Errorf("--image %s: no entrypoint to read", cfg.ImageRef)
	}
	_, onHost, err := im.Resolve(argv[0])
	if err != nil {
		return target.Binary{}, fmt.Errorf("--image %s: its command %q: %w", cfg.ImageRef, argv[0], err)
	}
	return target.Read(onHost)
}
