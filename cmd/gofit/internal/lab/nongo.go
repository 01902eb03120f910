package lab

import (
	"fmt"
	"io"
	"maps"
	"strconv"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/fit"
)

// The unlimited probes measure the target's non-Go memory from outside,
// as `gofit inspect --pid` does: nothing of gofit is linked into it. The
// figure is declared to the policy for gofit's memory setting and the
// recommendation, as a user following the recommendation declares it
// (GOFIT_NON_GO, gofit.dev/non-go-memory); the 0.9 ratio stays its peer.

// probeEnv is the unlimited probes' environment: the no-knob setting's,
// with the runtime's gctrace lines on stderr, which count the collections
// the probe saw (a figure from before the first is not trusted). The
// setting's GODEBUG (the sample's) is kept; the lab's own environment
// reaches no target with its GODEBUG (load.CleanEnv).
func probeEnv(env map[string]string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	if g := out["GODEBUG"]; g != "" {
		out["GODEBUG"] = g + ",gctrace=1"
	} else {
		out["GODEBUG"] = "gctrace=1"
	}
	return out
}

// chooseNonGo records the probes' measurement: the largest of them, as
// gofit's library keeps the largest of its last minute, so that a probe
// that ended between two fills of a cache does not set it low.
func chooseNonGo(t *result.TargetInfo, probes []trial.NonGoProbe, progress io.Writer) {
	var best *nongo.Measurement
	var errs []string
	for _, p := range probes {
		switch {
		case p.Measurement != nil && (best == nil || p.Measurement.Bytes+p.Measurement.AnonBytes > best.Bytes+best.AnonBytes):
			best = p.Measurement
		case p.Err != nil:
			errs = append(errs, p.Err.Error())
		}
	}
	if best == nil {
		t.NonGoError = "not measured"
		if len(errs) > 0 {
			t.NonGoError = errs[0]
		}
		sayNonGo(progress, "%s; gofit's setting plans the memory ratio alone", t.NonGoError)
		return
	}
	t.NonGo, t.NonGoBytes = best, best.Bytes
	sayNonGo(progress, "%s", result.NonGoLabel(best))
}

// sayNonGo says a line on the progress stream (not a trial: progress
// counts trials).
func sayNonGo(progress io.Writer, format string, a ...any) {
	if progress != nil {
		fmt.Fprintf(progress, "lab: non-Go memory: %s\n", fmt.Sprintf(format, a...))
	}
}

// declared is the non-Go memory the records declare to the policy.
func declared(t result.TargetInfo) fit.NonGo { return fit.NonGo{Anon: max(t.NonGoBytes, 0)} }

// declareNonGo adds the declaration of n bytes to an environment, as
// `gofit run` reads it.
func declareNonGo(env map[string]string, n int64) {
	if n > 0 {
		env[nongo.EnvVar] = nongo.Quantity(n)
	}
}

// nonGoReason says why the recommended GOMEMLIMIT is below the ratio's,
// and how the declaration goes with the pod.
func nonGoReason(m *nongo.Measurement, limit int64, gomemlimit string) string {
	q := nongo.Quantity(m.Bytes)
	if n, err := strconv.ParseInt(gomemlimit, 10, 64); err == nil {
		gomemlimit = fit.FormatBytes(n)
	}
	return fmt.Sprintf("memory: GOMEMLIMIT=%s, below the 0.9 ratio's %s: the unlimited probes measured %s outside the Go heap (%s anonymous, %s kernel, %s hot file pages, by %s), which GOMEMLIMIT does not bound; "+
		"declared as %s=%s for gofit run, or the pod annotation %s: NAME=%s for the webhook, so GOMEMLIMIT leaves room for it",
		gomemlimit, fit.FormatBytes(int64(float64(limit)*automemlimitRatio)), q, fit.FormatBytes(m.AnonBytes), fit.FormatBytes(m.KernelBytes), fit.FormatBytes(m.HotFile), m.Method,
		nongo.EnvVar, q, nongo.Annotation, q)
}
