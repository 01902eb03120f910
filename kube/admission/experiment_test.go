package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission/admissiontest"
)

func TestParseExperiment(t *testing.T) {
	const issueYAML = `
name: gomaxprocs          # unique in the namespace
control: fitted
arms:
  - {name: fitted, fit: gofit}
  - {name: go-default, fit: none}
  - {name: two, env: {GOMAXPROCS: "2"}}
`
	good := []struct {
		name, in, control string
		arms              []string
	}{
		{"the issue's YAML", issueYAML, "fitted", []string{"fitted", "go-default", "two"}},
		{"JSON, control defaults to the first arm", `{"name":"gc","arms":[{"name":"a","fit":"none"},{"name":"b","env":{"GOGC":"50","GOMEMLIMIT":"200MiB"}}]}`, "a", []string{"a", "b"}},
		{"GOGC off and GODEBUG", "name: x\narms: [{name: a, fit: gofit}, {name: b, env: {GOGC: 'off', GODEBUG: 'gctrace=0'}}]", "a", []string{"a", "b"}},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			e, err := ParseExperiment(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if e.Control != c.control || fmt.Sprint(e.ArmNames()) != fmt.Sprint(c.arms) {
				t.Errorf("control %q arms %v, want %q %v", e.Control, e.ArmNames(), c.control, c.arms)
			}
		})
	}
	bad := []struct{ name, in, field string }{
		{"empty", "  ", "empty"},
		{"not YAML", "name: [", "not YAML"},
		{"no name", "arms: [{name: a, fit: none}, {name: b, fit: gofit}]", "field name: missing"},
		{"name not a label", "name: Big_Name\narms: [{name: a, fit: none}, {name: b, fit: gofit}]", "field name:"},
		{"name a number", "name: 5\narms: [{name: a, fit: none}, {name: b, fit: gofit}]", "field name: want string"},
		{"one arm", "name: x\narms: [{name: a, fit: none}]", "field arms: 1 arms"},
		{"too many arms", "name: x\narms: [" + strings.Repeat("{name: a, fit: none},", 9) + "]", "field arms: 9 arms"},
		{"arm without name", "name: x\narms: [{fit: none}, {name: b, fit: gofit}]", "field arms[0].name: missing"},
		{"duplicate arm", "name: x\narms: [{name: a, fit: none}, {name: a, fit: gofit}]", `field arms[1].name: "a" names two arms`},
		{"fit and env", "name: x\narms: [{name: a, fit: none, env: {GOGC: '50'}}, {name: b, fit: gofit}]", "field arms[0]: has both"},
		{"neither", "name: x\narms: [{name: a}, {name: b, fit: gofit}]", "field arms[0]: want fit"},
		{"unknown fit", "name: x\narms: [{name: a, fit: auto}, {name: b, fit: gofit}]", `field arms[0].fit: "auto"`},
		{"misspelt env", "name: x\narms: [{name: a, fit: none}, {name: b, evn: {GOGC: '50'}}]", `unknown field "evn"`},
		{"env not a map", "name: x\narms: [{name: a, fit: none}, {name: b, env: [GOGC]}]", "field arms.env: want map"},
		{"not a Go variable", "name: x\narms: [{name: a, fit: none}, {name: b, env: {GOFIT: 'off'}}]", "field arms[1].env.GOFIT: not a Go runtime variable"},
		{"bad GOMAXPROCS", "name: x\narms: [{name: a, fit: none}, {name: b, env: {GOMAXPROCS: '0'}}]", "field arms[1].env.GOMAXPROCS"},
		{"bad GOGC", "name: x\narms: [{name: a, fit: none}, {name: b, env: {GOGC: 'lots'}}]", "field arms[1].env.GOGC"},
		{"bad GOMEMLIMIT", "name: x\narms: [{name: a, fit: none}, {name: b, env: {GOMEMLIMIT: '1.5 gigs'}}]", "field arms[1].env.GOMEMLIMIT"},
		{"control names no arm", "name: x\ncontrol: c\narms: [{name: a, fit: none}, {name: b, fit: gofit}]", `field control: "c"`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseExperiment(c.in)
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %v, want one containing %q", err, c.field)
			}
		})
	}
}

func TestLeastFilledStaysWithinOne(t *testing.T) {
	arms := []string{"a", "b", "c"}
	counts := map[string]int{}
	for n := 1; n <= 20; n++ {
		counts[LeastFilled(arms, counts, nil)]++
		lo, hi := n, 0
		for _, a := range arms {
			lo, hi = min(lo, counts[a]), max(hi, counts[a])
		}
		if hi-lo > 1 {
			t.Fatalf("after %d pods: %v", n, counts)
		}
	}
	// Deletes leave a gap; the next pods fill it.
	counts["b"] -= 2
	counts[LeastFilled(arms, counts, nil)]++
	counts[LeastFilled(arms, counts, nil)]++
	if counts["a"] != counts["b"] {
		t.Errorf("after two deletes from b and two new pods: %v", counts)
	}
}

// fixedArm assigns arms in turn, or fails.
type fixedArm struct {
	next  int
	err   error
	block bool   // until the context ends
	note  string // on every assignment
}

func (f *fixedArm) Assign(ctx context.Context, _ *corev1.Pod, e *Experiment) (Assignment, error) {
	if f.block {
		<-ctx.Done()
		return Assignment{}, ctx.Err()
	}
	if f.err != nil {
		return Assignment{}, f.err
	}
	a := e.Arms[f.next%len(e.Arms)].Name
	f.next++
	return Assignment{Arm: a, Ticket: fmt.Sprintf("t%d", f.next), Note: f.note}, nil
}

// TestAdmitSaysWhyItGaveTheControl: an assignment's note (the guard
// silent, fail closed) goes on the pod and in a warning.
func TestAdmitSaysWhyItGaveTheControl(t *testing.T) {
	const note = "the experiment guard last judged this experiment at 2026-12-06T11:00:00Z, more than 15m0s ago: new pods get the control a until it judges again"
	m := NewMutator(fit.Policy{}, WithArmAssigner(&fixedArm{note: note}))
	pod := experimentPod("name: g\narms: [{name: a, fit: gofit}, {name: b, fit: none}]", ctr("app", "250m", "1Gi"))
	res := m.Admit(context.Background(), pod)
	got := admissiontest.ApplyPatchOps(t, pod, res.Patch)
	if got.Labels[LabelArm] != "a" || got.Annotations[AnnotationArmNote] != note {
		t.Errorf("labels %v annotations %v", got.Labels, got.Annotations)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], note) {
		t.Errorf("warnings %q, want the note", res.Warnings)
	}
}

func experimentPod(spec string, cs ...corev1.Container) *corev1.Pod {
	p := admissiontest.Pod("web", cs...)
	p.Namespace = "shop"
	p.Annotations = map[string]string{AnnotationExperiment: spec}
	return p
}

func TestAdmitGivesEachArmItsSettings(t *testing.T) {
	const spec = `{"name":"gmp","arms":[{"name":"fitted","fit":"gofit"},{"name":"go-default","fit":"none"},{"name":"two","env":{"GOMAXPROCS":"2"}}]}`
	m := NewMutator(fit.Policy{}, WithArmAssigner(&fixedArm{}))
	want := []struct {
		arm string
		env map[string]string
	}{
		{"fitted", map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": "966367641", "GOFIT_RUN": "GOMAXPROCS=1,GOMEMLIMIT=966367641"}},
		{"go-default", map[string]string{"GOFIT": "off"}},
		{"two", map[string]string{"GOFIT": "off", "GOMAXPROCS": "2"}},
	}
	for _, w := range want {
		pod := experimentPod(spec, ctr("app", "250m", "1Gi"))
		res := m.Admit(context.Background(), pod)
		got := admissiontest.ApplyPatchOps(t, pod, res.Patch)
		if len(res.Warnings) != 0 {
			t.Errorf("%s: warnings %q", w.arm, res.Warnings)
		}
		if got.Labels[LabelExperiment] != "gmp" || got.Labels[LabelArm] != w.arm || got.Annotations[AnnotationArmTicket] == "" {
			t.Errorf("%s: labels %v annotations %v", w.arm, got.Labels, got.Annotations)
		}
		if e := envOf(got.Spec.Containers[0]); fmt.Sprint(e) != fmt.Sprint(w.env) {
			t.Errorf("%s: env %v, want %v", w.arm, e, w.env)
		}
		// Reinvoked: the arm stays and nothing more changes.
		if again := m.Admit(context.Background(), got); len(again.Patch) != 0 {
			t.Errorf("%s: reinvocation patched %+v", w.arm, again.Patch)
		}
	}
}

func TestAdmitArmOverridesTheContainersOwnValue(t *testing.T) {
	const spec = "name: g\narms: [{name: a, fit: none}, {name: b, env: {GOGC: '50'}}]"
	m := NewMutator(fit.Policy{}, WithArmAssigner(&fixedArm{next: 1}))
	pod := experimentPod(spec, ctr("app", "1", "1Gi", env("GOGC", "200"), env("GODEBUG", "madvdontneed=1")))
	got := admissiontest.ApplyPatchOps(t, pod, m.Admit(context.Background(), pod).Patch)
	if e := envOf(got.Spec.Containers[0]); fmt.Sprint(e) != fmt.Sprint(map[string]string{"GODEBUG": "madvdontneed=1", "GOFIT": "off", "GOGC": "50"}) {
		t.Errorf("env %v", e)
	}
}

func TestAdmitMalformedOrUnassignedGetsTheNormalFit(t *testing.T) {
	const good = "name: g\narms: [{name: a, fit: none}, {name: b, fit: gofit}]"
	cases := []struct {
		name, spec string
		assigner   ArmAssigner
		warn       string
	}{
		{"malformed", "name: g\narms: [{name: a, fit: none}, {name: b, env: {GOMAXPROCS: two}}]", &fixedArm{}, "field arms[1].env.GOMAXPROCS"},
		{"no assigner", good, nil, "runs without experiments"},
		{"assigner fails", good, &fixedArm{err: errors.New("leases is forbidden")}, "no arm assigned: leases is forbidden"},
		{"assigner too slow", good, &fixedArm{block: true}, "no arm assigned: context deadline exceeded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opts []MutatorOption
			if c.assigner != nil {
				opts = append(opts, WithArmAssigner(c.assigner))
			}
			m := NewMutator(fit.Policy{}, opts...)
			pod := experimentPod(c.spec, ctr("app", "250m", "1Gi"))
			res := m.Admit(context.Background(), pod)
			got := admissiontest.ApplyPatchOps(t, pod, res.Patch)
			if len(res.Warnings) == 0 || !strings.Contains(res.Warnings[0], AnnotationExperiment) || !strings.Contains(res.Warnings[0], c.warn) {
				t.Errorf("warnings %q, want one naming %q", res.Warnings, c.warn)
			}
			if _, ok := got.Labels[LabelArm]; ok {
				t.Errorf("arm label on a pod with no arm: %v", got.Labels)
			}
			if e := envOf(got.Spec.Containers[0]); e["GOMAXPROCS"] != "1" || e["GOFIT_RUN"] == "" {
				t.Errorf("not the normal fit: %v", e)
			}
		})
	}
}

// A dry run (kubectl --dry-run=server) must assign no arm: assigning one
// writes the experiment's Lease, and the webhook declares sideEffects:
// None. It gets the normal fit and a warning; the real create after it
// gets an arm, and a dry run of a pod that has its arm keeps it.
func TestDryRunAssignsNoArm(t *testing.T) {
	const spec = `{"name":"gmp","arms":[{"name":"two","env":{"GOMAXPROCS":"2"}},{"name":"fitted","fit":"gofit"}]}`
	arms := &fixedArm{}
	h := NewHandler(NewMutator(fit.Policy{}, WithArmAssigner(arms)), HandlerOptions{})
	pod := experimentPod(spec, ctr("app", "250m", "1Gi"))
	dry := func(p *corev1.Pod) *admissionv1.AdmissionResponse {
		var r map[string]any
		if err := json.Unmarshal(review(t, p, admissionv1.Create, ""), &r); err != nil {
			t.Fatal(err)
		}
		r["request"].(map[string]any)["dryRun"] = true
		b, _ := json.Marshal(r)
		code, resp, out := post(t, h, b)
		if code != http.StatusOK || !resp.Allowed {
			t.Fatalf("dry run: %d %s", code, out)
		}
		return resp
	}
	resp := dry(pod)
	got := applyPatch(t, pod, resp)
	if arms.next != 0 {
		t.Errorf("a dry run assigned %d arm(s)", arms.next)
	}
	if got.Labels[LabelArm] != "" || envOf(got.Spec.Containers[0])["GOMAXPROCS"] != "1" {
		t.Errorf("dry run: labels %v env %v, want no arm and the normal fit", got.Labels, envOf(got.Spec.Containers[0]))
	}
	if len(resp.Warnings) == 0 || !strings.Contains(resp.Warnings[0], "dry run") {
		t.Errorf("dry run warnings %q, want one saying no arm is given", resp.Warnings)
	}
	created, _ := admit(t, h, pod)
	if arms.next != 1 || created.Labels[LabelArm] != "two" {
		t.Fatalf("the real create: %d assignments, arm %q", arms.next, created.Labels[LabelArm])
	}
	again := applyPatch(t, created, dry(created))
	if arms.next != 1 || again.Labels[LabelArm] != "two" || envOf(again.Spec.Containers[0])["GOMAXPROCS"] != "2" {
		t.Errorf("dry run of an assigned pod: %d assignments, arm %q, env %v", arms.next, again.Labels[LabelArm], envOf(again.Spec.Containers[0]))
	}
}

// TestLeastFilledPermutedBlocks (issue 53): ties went to the arm first in
// the spec, so pod 1, 4, 7, ... of every experiment got the first arm,
// and an arm could line up with the node or zone topology spreading
// fills in turn. With a uniform pick, each block of len(arms) pods is a
// random permutation of the arms: every block holds each arm once, and
// each of the 6 orders of 3 arms comes up about equally often.
func TestLeastFilledPermutedBlocks(t *testing.T) {
	arms := []string{"a", "b", "c"}
	rnd := rand.New(rand.NewPCG(53, 1))
	counts := map[string]int{}
	orders := map[string]int{}
	const blocks = 3000
	for range blocks {
		order := ""
		for range arms {
			a := LeastFilled(arms, counts, rnd.IntN)
			counts[a]++
			order += a
		}
		orders[order]++
		if counts["a"] != counts["b"] || counts["b"] != counts["c"] {
			t.Fatalf("after block %q: %v, want each arm once a block", order, counts)
		}
	}
	if len(orders) != 6 {
		t.Errorf("orders %v, want all 6 permutations", orders)
	}
	for o, n := range orders {
		// 500 expected; a binomial sd of about 20: 400 is 5 sd away.
		if n < 400 || n > 600 {
			t.Errorf("order %s in %d of %d blocks, want about %d: %v", o, n, blocks, blocks/6, orders)
		}
	}
	// Unequal counts: the least filled still wins, whatever the pick.
	if a := LeastFilled(arms, map[string]int{"a": 2, "b": 1, "c": 2}, func(int) int { return 0 }); a != "b" {
		t.Errorf("the least filled: %s, want b", a)
	}
}
