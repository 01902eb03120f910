package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/local"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
)

// The lab on a service like issue 30's: examples/offheap mapping 48 MiB
// outside a 32 MiB live heap, linking nothing of gofit. The unlimited
// probes measure the 48 MiB from outside; at 112 MiB, where the 0.9
// ratio's GOMEMLIMIT (100.8 MiB) lets the heap grow into the cache's room
// (in three --quick studies its survival floor was 128 MiB; at 120 MiB
// one health trial passed), gofit's setting, with the measured figure
// declared (GOMEMLIMIT 112 − 54 − 3.5 MiB for the 32 MiB live heap; its
// healthy floor was 100 MiB in two studies), is healthy and the ratio's
// is not. Up to 5 pairs per health trial, so that the p99 ratio's interval
// can decide on a busy machine, and, as the lab's healthy search does, a
// failure gets a second look: at load average 20 one of three runs read
// gofit's p99 at ×3.29 [0.90–4.23] of the unlimited run's, 1.6 s against
// 0.5 s. The ratio's failure is an OOM kill, which does not need one.
// Two probes and two or three health trials: 20 to 60 s.
func TestGofitHealthyBelowTheRatioOffHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the lab's real memory trials in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab needs root to create cgroups")
	}
	sb, err := sandbox.New()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	defer sb.Close()
	bin := filepath.Join(t.TempDir(), "offheap")
	build := exec.Command("go", "build", "-o", bin, "github.com/gofit-dev/gofit/examples/offheap")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	cfg := defaultConfig(true)
	cfg.Target = sandbox.Target{Path: bin, Args: []string{"-live-mib", "32", "-offheap-mib", "48", "-addr", "127.0.0.1:{port}"}, URL: "http://127.0.0.1:{port}/work"}
	cfg.Probes = 2
	cfg.HealthMaxPairs = 5
	l := newLab(cfg)
	l.run = local.OnSandbox(cfg.Study, sb)
	const cpu = 1
	l.rec.Target.ProbeCPU = cpu
	ctx := context.Background()
	if err := l.runProbes(ctx, cpu); err != nil {
		t.Fatal(err)
	}
	m := l.rec.Target.NonGo
	if m == nil {
		t.Fatalf("non-Go memory not measured: %s", l.rec.Target.NonGoError)
	}
	if d := m.AnonBytes - 48*mib; d < -8*mib || d > 8*mib || m.Method != nongo.Arenas || l.rec.Target.NonGoBytes < 48*mib {
		t.Errorf("measured %+v: want 48 ± 8 MiB anonymous by %s, declared", m, nongo.Arenas)
	}
	const limit = 112 * mib
	g := healthVerdict(l, ctx, memEnv(l.cfg, &l.rec, result.SetGofit, 0), memEnv(l.cfg, &l.rec, result.SetGofit, limit), cpu, limit)
	if !g.Healthy {
		t.Logf("gofit at %d MiB, first look: %s", limit/mib, g.Verdict())
		g = healthVerdict(l, ctx, memEnv(l.cfg, &l.rec, result.SetGofit, 0), memEnv(l.cfg, &l.rec, result.SetGofit, limit), cpu, limit)
	}
	r := healthVerdict(l, ctx, memEnv(l.cfg, &l.rec, result.SetAutoMemLimit, 0), memEnv(l.cfg, &l.rec, result.SetAutoMemLimit, limit), cpu, limit)
	t.Logf("non-Go %s; at %d MiB gofit (%s): %s; the ratio: %s", result.NonGoLabel(m), limit/mib, memEnv(l.cfg, &l.rec, result.SetGofit, limit)["GOMEMLIMIT"], g.Verdict(), r.Verdict())
	if !g.Healthy || r.Healthy {
		t.Errorf("at %d MiB: gofit healthy %v (%s), the ratio healthy %v (%s); want gofit healthy below the ratio", limit/mib, g.Healthy, g.Verdict(), r.Healthy, r.Verdict())
	}
}
