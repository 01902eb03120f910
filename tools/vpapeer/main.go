// Command vpapeer computes the VPA recommender's targets with VPA's own
// code (k8s.io/autoscaler/vertical-pod-autoscaler, its recommender's
// model and logic at the recommender's default configuration) for the
// scenarios gofit fleet's tests write, so that `gofit fleet`'s VPA column
// is checked against VPA itself (TestVPAAgainstItsModule). It is its own
// module: VPA's requires k8s.io v0.37, ahead of the rest of gofit.
//
//	GOWORK=off go run . -in ../../cmd/gofit/internal/fleet/testdata/vpa/scenarios.json \
//	  -out ../../cmd/gofit/internal/fleet/testdata/vpa/golden.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/model"
)

type scenario struct {
	Name            string    `json:"name"`
	Start           time.Time `json:"start"`
	StepSeconds     float64   `json:"step_seconds"`
	ContainersInPod int       `json:"containers_in_pod"`
	Pods            []struct {
		Name          string    `json:"name"`
		CPURequest    float64   `json:"cpu_request"`
		MemoryRequest float64   `json:"memory_request_bytes"`
		OOMKills      float64   `json:"oom_kills"`
		CPU           []float64 `json:"cpu_cores"`
		WorkingSet    []float64 `json:"working_set_bytes"`
	} `json:"pods"`
}

type result struct {
	Name   string  `json:"name"`
	CPU    float64 `json:"cpu_cores"`
	Memory float64 `json:"memory_bytes"`
}

// defaults are the recommender's (pkg/recommender/config/config.go,
// DefaultRecommenderConfig, v1.8.1): not imported, as that package pulls
// in the recommender's clients.
var defaults = logic.RecommendationConfig{
	SafetyMarginFraction: 0.15, PodMinCPUMillicores: 25, PodMinMemoryMb: 250,
	TargetCPUPercentile: 0.9, LowerBoundCPUPercentile: 0.5, UpperBoundCPUPercentile: 0.95, ConfidenceIntervalCPU: 24 * time.Hour,
	TargetMemoryPercentile: 0.9, LowerBoundMemoryPercentile: 0.5, UpperBoundMemoryPercentile: 0.95, ConfidenceIntervalMemory: 24 * time.Hour,
}

// recommend feeds one scenario's samples to VPA's model as its metrics
// feeder does (a CPU sample and a memory sample per pod per step, in
// time order; an OOM kill recorded after the last) and asks its
// recommender for the target. Pods are the container's instances,
// aggregated by container name; the pod minimum is split among
// ContainersInPod containers, as VPA splits it.
func recommend(s scenario) (result, error) {
	agg := model.NewAggregateContainerState()
	step := time.Duration(s.StepSeconds * float64(time.Second))
	for _, p := range s.Pods {
		cs := model.NewContainerState(model.Resources{
			model.ResourceCPU:    model.CPUAmountFromCores(p.CPURequest),
			model.ResourceMemory: model.MemoryAmountFromBytes(p.MemoryRequest),
		}, agg)
		var last time.Time
		for i := range p.CPU {
			t := s.Start.Add(time.Duration(i) * step)
			cs.AddSample(&model.ContainerUsageSample{MeasureStart: t, Usage: model.CPUAmountFromCores(p.CPU[i]), Resource: model.ResourceCPU})
			if i < len(p.WorkingSet) {
				cs.AddSample(&model.ContainerUsageSample{MeasureStart: t, Usage: model.MemoryAmountFromBytes(p.WorkingSet[i]), Resource: model.ResourceMemory})
			}
			last = t
		}
		if p.OOMKills > 0 {
			if err := cs.RecordOOM(last, model.MemoryAmountFromBytes(p.MemoryRequest)); err != nil {
				return result{}, fmt.Errorf("scenario %q pod %s: %w", s.Name, p.Name, err)
			}
		}
	}
	states := model.ContainerNameToAggregateStateMap{"app": agg}
	// The other containers of the pod, with no samples: VPA divides the
	// pod minimum among all of them.
	for i := 1; i < s.ContainersInPod; i++ {
		states[fmt.Sprintf("other-%d", i)] = model.NewAggregateContainerState()
	}
	rec := logic.CreatePodResourceRecommender(defaults).GetRecommendedPodResources(states)
	r, ok := rec["app"]
	if !ok {
		return result{}, errors.New("no recommendation")
	}
	return result{Name: s.Name, CPU: model.CoresFromCPUAmount(r.Target[model.ResourceCPU]), Memory: float64(model.BytesFromMemoryAmount(r.Target[model.ResourceMemory]))}, nil
}

func main() {
	in := flag.String("in", "", "scenarios `FILE` (JSON)")
	out := flag.String("out", "", "results `FILE` (JSON)")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "vpapeer:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" || out == "" {
		return errors.New("-in and -out are required")
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var sc []scenario
	if err := json.Unmarshal(b, &sc); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	module := "k8s.io/autoscaler/vertical-pod-autoscaler"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == module {
				module += "@" + d.Version
			}
		}
	}
	g := struct {
		Module  string   `json:"module"`
		Results []result `json:"results"`
	}{Module: module}
	for _, s := range sc {
		r, err := recommend(s)
		if err != nil {
			return err
		}
		g.Results = append(g.Results, r)
	}
	b, err = json.MarshalIndent(g, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}
