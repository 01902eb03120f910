package lab

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/fit"
)

// The probes' measurement is declared: gofit's memory setting plans
// GOMEMLIMIT = limit − declared − limit/32 and carries GOFIT_NON_GO as
// `gofit run` would read it; the ratio's setting does not change; the
// recommendation declares it in its env and YAML (with the webhook's
// annotation) and says why GOMEMLIMIT is below the ratio.
func TestNonGoDeclared(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	l := newLab(defaultConfig(true))
	m := &nongo.Measurement{Bytes: 52 * mib, AnonBytes: 50 * mib, KernelBytes: 1 * mib, Method: nongo.Arenas, Trusted: true}
	chooseNonGo(&l.rec.Target, []trial.NonGoProbe{{Err: errors.New("first probe exited")}, {Measurement: m}}, l.cfg.Progress)
	if l.rec.Target.NonGoBytes != 52*mib || l.rec.Target.NonGo != m || declared(l.rec.Target) != (fit.NonGo{Anon: 52 * mib}) {
		t.Fatalf("chosen %d, %+v", l.rec.Target.NonGoBytes, l.rec.Target.NonGo)
	}
	env := memEnv(l.cfg, &l.rec, result.SetGofit, 128*mib)
	if want := strconv.FormatInt(128*mib-52*mib-4*mib, 10); env["GOMEMLIMIT"] != want || env[nongo.EnvVar] != "52Mi" {
		t.Errorf("gofit env %v: want GOMEMLIMIT %s and %s=52Mi", env, want, nongo.EnvVar)
	}
	if env := memEnv(l.cfg, &l.rec, result.SetAutoMemLimit, 128*mib); env["GOMEMLIMIT"] != strconv.FormatInt(int64(float64(limit128)*automemlimitRatio), 10) || env[nongo.EnvVar] != "" {
		t.Errorf("ratio env %v changed", env)
	}
	mem := []result.MemResult{{Setting: result.SetGofit, FloorBytes: p(76 * mib), HealthyFloorBytes: p(96 * mib)}, {Setting: result.SetAutoMemLimit, FloorBytes: p(92 * mib), HealthyFloorBytes: p(124 * mib)}}
	res := analyseMemory(l.cfg, l.rec, mem, nil)
	rec := res.Recommendation
	if rec.NonGoBytes != 52*mib || rec.Env[nongo.EnvVar] != "52Mi" {
		t.Errorf("recommendation env %v, non_go_bytes %d", rec.Env, rec.NonGoBytes)
	}
	for _, want := range []string{"GOFIT_NON_GO", `value: "52Mi"`, `gofit.dev/non-go-memory: "NAME=52Mi"`} {
		if !strings.Contains(rec.YAML, want) {
			t.Errorf("YAML lacks %q:\n%s", want, rec.YAML)
		}
	}
	if why := strings.Join(rec.Reasons, "\n"); !strings.Contains(why, "below the 0.9 ratio's") || !strings.Contains(why, "52Mi outside the Go heap") {
		t.Errorf("reasons do not say why GOMEMLIMIT is below the ratio: %q", rec.Reasons)
	}
	if s := result.PeakLabel(&res); !strings.Contains(s, "52Mi outside the Go heap") {
		t.Errorf("peak label %q", s)
	}
}

// Nothing measured (not Go, or every probe failed to read it): gofit's
// setting plans the ratio alone, and the results say why.
func TestNonGoNotMeasured(t *testing.T) {
	l := newLab(defaultConfig(true))
	chooseNonGo(&l.rec.Target, []trial.NonGoProbe{{Err: nongo.ErrNotGo}}, l.cfg.Progress)
	if l.rec.Target.NonGo != nil || l.rec.Target.NonGoError != nongo.ErrNotGo.Error() || declared(l.rec.Target).Total() != 0 {
		t.Errorf("%+v", l.rec.Target)
	}
	if env := memEnv(l.cfg, &l.rec, result.SetGofit, 128*mib); env[nongo.EnvVar] != "" || env["GOMEMLIMIT"] != strconv.FormatInt(int64(float64(limit128)*fit.DefaultMemoryRatio), 10) {
		t.Errorf("env %v: want the ratio, nothing declared", env)
	}
}

func TestProbeEnvKeepsGODEBUG(t *testing.T) {
	if e := probeEnv(map[string]string{"GODEBUG": "x=1"}); e["GODEBUG"] != "x=1,gctrace=1" {
		t.Errorf("%v", e)
	}
	if e := probeEnv(map[string]string{}); e["GODEBUG"] != "gctrace=1" {
		t.Errorf("%v", e)
	}
}

var limit128 int64 = 128 * mib
