package fleet

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// vpaScenario is one container's samples as tools/vpapeer feeds them to
// the VPA recommender's own model and logic (k8s.io/autoscaler/
// vertical-pod-autoscaler v1.8.1) and as VPA() reads them here.
type vpaScenario struct {
	Name            string    `json:"name"`
	Start           time.Time `json:"start"`
	StepSeconds     float64   `json:"step_seconds"`
	ContainersInPod int       `json:"containers_in_pod"`
	Pods            []vpaPod  `json:"pods"`
}

type vpaPod struct {
	Name          string    `json:"name"`
	CPURequest    float64   `json:"cpu_request"`
	MemoryRequest float64   `json:"memory_request_bytes"`
	OOMKills      float64   `json:"oom_kills"`
	CPU           []float32 `json:"cpu_cores"`
	WorkingSet    []float32 `json:"working_set_bytes"`
}

// vpaGolden is what tools/vpapeer wrote: VPA's target per scenario.
type vpaGolden struct {
	Module  string `json:"module"`
	Results []struct {
		Name   string  `json:"name"`
		CPU    float64 `json:"cpu_cores"`
		Memory float64 `json:"memory_bytes"`
	} `json:"results"`
}

func vpaScenarios() []vpaScenario {
	const step = 10 * time.Minute
	perDay := float64(24 * time.Hour / step)
	mk := func(days int, cpu, ws func(pod, i int) float64, pods int, req, memReq, oom float64) []vpaPod {
		n := days * int(perDay)
		var ps []vpaPod
		for p := range pods {
			vp := vpaPod{Name: "p" + string(rune('0'+p)), CPURequest: req, MemoryRequest: memReq, OOMKills: oom}
			for i := range n {
				vp.CPU = append(vp.CPU, float32(cpu(p, i)))
				vp.WorkingSet = append(vp.WorkingSet, float32(ws(p, i)))
			}
			ps = append(ps, vp)
		}
		return ps
	}
	wave := func(i int) float64 { return math.Sin(2 * math.Pi * float64(i) / perDay) }
	return []vpaScenario{
		{Name: "flat", Pods: mk(2, func(int, int) float64 { return 0.5 }, func(int, int) float64 { return 400 * mib }, 1, 0.5, 512*mib, 0)},
		{Name: "daily wave, two pods", Pods: mk(7, func(p, i int) float64 { return 0.3 + 0.2*wave(i) + 0.05*float64(p) },
			func(p, i int) float64 { return (200 + 50*wave(i) + 10*float64(p)) * mib }, 2, 1, 512*mib, 0)},
		{Name: "small, two containers a pod", ContainersInPod: 2, Pods: mk(2, func(int, int) float64 { return 0.001 }, func(int, int) float64 { return 20 * mib }, 1, 0.01, 32*mib, 0)},
		{Name: "pods with different requests", Pods: func() []vpaPod {
			// One pod of twenty requests 2 cores and uses 0.8; the rest
			// request 0.1 and use 0.2: VPA weighs every CPU sample alike.
			ps := mk(2, func(p, _ int) float64 { return map[bool]float64{true: 0.8, false: 0.2}[p == 0] }, func(int, int) float64 { return 100 * mib }, 20, 0.1, 128*mib, 0)
			ps[0].CPURequest = 2
			return ps
		}()},
		{Name: "OOM-killed", Pods: mk(3, func(int, int) float64 { return 0.2 }, func(int, int) float64 { return 150 * mib }, 1, 0.2, 200*mib, 1)},
	}
}

func (s vpaScenario) input() (Input, Group) {
	if s.Start.IsZero() {
		s.Start = t0
	}
	step := 10 * time.Minute
	g := Group{Workload: Workload{Namespace: "shop", Kind: "Deployment", Name: "web"}, Container: "app"}
	steps := 0
	for _, p := range s.Pods {
		g.Pods = append(g.Pods, Pod{Name: p.Name, Requests: Resources{p.CPURequest, p.MemoryRequest}, OOMKills: p.OOMKills,
			CPU: Track{V: p.CPU}, WorkingSet: Track{V: p.WorkingSet}, GOMAXPROCS: math.NaN(), GOMEMLIMIT: math.NaN(), GOGC: math.NaN()})
		steps = max(steps, len(p.CPU))
	}
	return Input{Start: s.Start, Step: step, Steps: steps, Groups: []Group{g}}, g
}

// TestVPAAgainstItsModule: VPA's column against VPA's own code. The
// scenarios in testdata/vpa/scenarios.json (written from vpaScenarios
// with GOFIT_WRITE_VPA_SCENARIOS=1) went through the recommender's model
// and logic, v1.8.1 at its defaults (tools/vpapeer, its own module):
//
//	cd tools/vpapeer && GOWORK=off go run . -in ../../cmd/gofit/internal/fleet/testdata/vpa/scenarios.json \
//	  -out ../../cmd/gofit/internal/fleet/testdata/vpa/golden.json
//
// VPA() must give the same targets, to within one histogram bucket (5%).
func TestVPAAgainstItsModule(t *testing.T) {
	dir := filepath.Join("testdata", "vpa")
	sc := vpaScenarios()
	for i := range sc {
		sc[i].Start, sc[i].StepSeconds = t0, 600
		if sc[i].ContainersInPod == 0 {
			sc[i].ContainersInPod = 1
		}
	}
	if os.Getenv("GOFIT_WRITE_VPA_SCENARIOS") != "" {
		b, err := json.Marshal(sc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "scenarios.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatalf("run tools/vpapeer first: %v", err)
	}
	var gold vpaGolden
	if err := json.Unmarshal(b, &gold); err != nil {
		t.Fatalf("testdata/vpa/golden.json: %v", err)
	}
	if len(gold.Results) != len(sc) {
		t.Fatalf("golden.json has %d results for %d scenarios: run tools/vpapeer again", len(gold.Results), len(sc))
	}
	for i, s := range sc {
		want := gold.Results[i]
		if want.Name != s.Name {
			t.Fatalf("golden.json's result %d is %q, want %q: run tools/vpapeer again", i, want.Name, s.Name)
		}
		in, g := s.input()
		v := vpa(in, g, s.ContainersInPod)
		t.Logf("%-30s ours CPU %.3f memory %s; VPA's CPU %.3f memory %s", s.Name, float64(v.CPURequest), fmtBytes(float64(v.Memory)), want.CPU, fmtBytes(want.Memory))
		within := func(got, want float64) bool { return math.Abs(got-want) <= 0.05*want }
		if !within(float64(v.CPURequest), want.CPU) || !within(float64(v.Memory), want.Memory) {
			t.Errorf("%s: ours CPU %v memory %s; %s's CPU %v memory %s", s.Name, float64(v.CPURequest), fmtBytes(float64(v.Memory)),
				gold.Module, want.CPU, fmtBytes(want.Memory))
		}
	}
}
