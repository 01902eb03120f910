package memqos

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// sameButReasons checks that a terse plan of in is full (the plan res,
// made without Terse) with every reason left empty, and that res explains
// every value.
func sameButReasons(in Input, full Result) error {
	in.Terse = true
	terse, err := Compute(in)
	if err != nil {
		return fmt.Errorf("terse plan: %v", err)
	}
	blank := func(ss []Setting, where string, explained bool) ([]Setting, error) {
		out := append([]Setting(nil), ss...)
		for i := range out {
			if explained && out[i].Reason == "" {
				return nil, fmt.Errorf("%s %s: no reason in the full plan", where, out[i].File)
			}
			if !explained && out[i].Reason != "" {
				return nil, fmt.Errorf("%s %s: reason %q in a terse plan", where, out[i].File, out[i].Reason)
			}
			out[i].Reason = ""
		}
		return out, nil
	}
	strip := func(r Result, explained bool) (Result, error) {
		var err error
		out := r
		if out.Kubepods, err = blank(r.Kubepods, "kubepods", explained); err != nil {
			return out, err
		}
		out.QoS = map[corev1.PodQOSClass][]Setting{}
		for q, ss := range r.QoS {
			if out.QoS[q], err = blank(ss, string(q), explained); err != nil {
				return out, err
			}
		}
		out.Pods = nil
		for _, p := range r.Pods {
			if p.Settings, err = blank(p.Settings, "pod "+p.Name, explained); err != nil {
				return out, err
			}
			cs := append([]ContainerResult(nil), p.Containers...)
			for j := range cs {
				if cs[j].Settings, err = blank(cs[j].Settings, "pod "+p.Name+" container "+cs[j].Name, explained); err != nil {
					return out, err
				}
			}
			p.Containers = cs
			out.Pods = append(out.Pods, p)
		}
		return out, nil
	}
	f, err := strip(full, true)
	if err != nil {
		return err
	}
	tr, err := strip(terse, false)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(f, tr) {
		return fmt.Errorf("terse plan differs beyond its reasons:\nfull  %+v\nterse %+v", f, tr)
	}
	return nil
}

// TestTerseSameValues: a terse plan has the values, warnings and totals of
// the full one, on the fuzzer's seeds and on 3,000 random nodes of the
// same making (every class, policy, kernel, cgroup version, GOMEMLIMIT
// source and the memory.min cap), plus a node scaled by the cap and one
// whose pods set kernel knobs.
func TestTerseSameValues(t *testing.T) {
	inputs := []Input{fuzzInput(nil), capped(), knobbed()}
	r := rand.New(rand.NewPCG(27, 7))
	for range 3000 {
		b := make([]byte, 64+r.IntN(192))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		inputs = append(inputs, fuzzInput(b))
	}
	for i, in := range inputs {
		full, err := Compute(in)
		if err != nil {
			continue // refused input: nothing planned either way
		}
		if err := sameButReasons(in, full); err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
	}
}

// capped is a node whose pods ask for more memory.min than the cap allows.
func capped() Input {
	in := Input{NodeAllocatable: 4 << 30, PodOverrides: &PodOverrides{true, true, true, true, true}}
	for i := range 4 {
		q := resource.MustParse("2Gi")
		in.Pods = append(in.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i), Namespace: "ns", UID: types.UID(fmt.Sprint("u", i)),
			Annotations: map[string]string{AnnotationMemoryQOS: `{"policy":"auto","minLimitPercent":100}`}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: q}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	return in
}

// knobbed is a node whose pod sets the Alibaba Cloud Linux knobs.
func knobbed() Input {
	in := capped()
	in.Pods = in.Pods[:1]
	in.Pods[0].Annotations[AnnotationMemoryQOS] = `{"policy":"auto","wmarkRatio":95,"priorityEnable":1,"priority":6,"oomKillGroup":1}`
	return in
}

// TestComputeAllocs bounds what a terse plan of 110 ordinary pods
// allocates: a few slabs and maps per pass, nothing per value.
func TestComputeAllocs(t *testing.T) {
	in := Input{NodeAllocatable: 64 << 30, Policy: PolicyAuto, Terse: true}
	for i := range 110 {
		q := resource.MustParse("256Mi")
		in.Pods = append(in.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i), Namespace: "ns", UID: types.UID(fmt.Sprintf("u%03d", i))},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: q}, Limits: corev1.ResourceList{corev1.ResourceMemory: q}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: fmt.Sprint("containerd://", i)}}}})
	}
	a := testing.AllocsPerRun(10, func() {
		if _, err := Compute(in); err != nil {
			t.Fatal(err)
		}
	})
	if a > 40 {
		t.Errorf("a terse plan of 110 pods: %v allocations, want at most 40", a)
	}
	t.Logf("a terse plan of 110 pods: %v allocations", a)
}
