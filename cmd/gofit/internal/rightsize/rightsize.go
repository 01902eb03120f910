// Package rightsize is the pure core of `gofit rightsize`: it turns
// fleet's analysis of one opted-in workload into a plan, decides what to do
// with it (recommend, try it on a few live pods beside their siblings,
// promote it, roll it back), and judges a trial from the experiment's
// results. It does no I/O: the controller reads the workload, its pods,
// Prometheus and the guard's results, calls Next, and carries out the one
// Action it returns. Every Action says why, so that every change it leads
// to can be explained in an Event.
package rightsize

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/experiment"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/fleet"
	"github.com/gofit-dev/gofit/fit"
)

// Label or annotation keys on a workload or its namespace.
const (
	// KeyMode opts a workload (or every workload of a namespace) in, with
	// a mode: off, recommend, trial or auto. The workload's own wins.
	KeyMode = "gofit.dev/rightsize"
	// KeyFloor is a memory floor in bytes the plan never goes below: the
	// lab's floor for the service (`gofit lab`'s results.json), attached
	// by whoever sized it.
	KeyFloor = "gofit.dev/rightsize-memory-floor"
)

// Mode is what the controller may do for a workload.
type Mode string

// Modes, from doing nothing to promoting on its own.
const (
	Off       Mode = "off"       // nothing, and a running trial is rolled back
	Recommend Mode = "recommend" // write the plan and an Event; change nothing
	Trial     Mode = "trial"     // try the plan on a few pods, judge, stop there
	Auto      Mode = "auto"      // trial, then promote to the whole workload
)

// ParseMode reads a KeyMode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.TrimSpace(s)); m {
	case Off, Recommend, Trial, Auto:
		return m, nil
	}
	return "", fmt.Errorf("%s: %q is not a mode (want off, recommend, trial or auto)", KeyMode, s)
}

// ModeOf is the mode of a workload from its own labels and annotations
// (an annotation wins over a label) and then its namespace's; Off when
// neither opts in. where says which set it came from, for the Event.
func ModeOf(workload, namespace map[string]string) (m Mode, where string, err error) {
	for _, s := range []struct {
		name string
		kv   map[string]string
	}{{"workload", workload}, {"namespace", namespace}} {
		if v, ok := s.kv[KeyMode]; ok {
			m, err := ParseMode(v)
			if err != nil {
				return Off, s.name, fmt.Errorf("%s %w", s.name, err)
			}
			return m, s.name, nil
		}
	}
	return Off, "", nil
}

// Policy is what a platform team bounds the controller by. The zero
// value is not valid: start from DefaultPolicy.
type Policy struct {
	// Share is the most of a workload's ready pods a trial takes, and
	// MinPods the fewest: a trial always leaves at least one pod as the
	// control, so a workload needs MinPods+1 ready pods.
	Share   float64
	MinPods int
	// Saving is the share of reserved CPU or memory (requests) a plan
	// must save to be tried when it fixes no finding.
	Saving float64
	// Duration is how long a trial runs before it is judged for
	// promotion (harm stops it at any time).
	Duration time.Duration
	// Backoff is how long a plan stopped for harm, or not good enough to
	// promote, is not tried again (a different plan may be).
	Backoff time.Duration
	// PerNamespace and PerCluster bound the trials running at once.
	PerNamespace, PerCluster int
	// Paused is the kill switch: no trial starts, running ones are rolled
	// back, nothing is promoted.
	Paused bool
}

// DefaultPolicy: a quarter of the pods at most, one at least, 2 hours, a
// week's back-off, one trial per namespace and three per cluster.
func DefaultPolicy() Policy {
	return Policy{Share: 0.25, MinPods: 1, Saving: 0.15, Duration: 2 * time.Hour, Backoff: 7 * 24 * time.Hour,
		PerNamespace: 1, PerCluster: 3}
}

// Check names the first field out of range, by its flag.
func (p Policy) Check() error {
	switch {
	case !(p.Share > 0 && p.Share <= 0.5):
		return fmt.Errorf("--share %v: want a share above 0 and at most 0.5 (the control keeps at least half the pods)", p.Share)
	case p.MinPods < 1:
		return fmt.Errorf("--min-pods %d: want at least 1", p.MinPods)
	case !(p.Saving >= 0 && p.Saving < 1):
		return fmt.Errorf("--saving %v: want a share in [0, 1)", p.Saving)
	case p.Duration <= 0:
		return fmt.Errorf("--trial-duration %v: want a positive duration", p.Duration)
	case p.Backoff < 0:
		return fmt.Errorf("--backoff %v: want a duration of 0 or more", p.Backoff)
	case p.PerNamespace < 1 || p.PerCluster < p.PerNamespace:
		return fmt.Errorf("--max-trials-per-namespace %d, --max-trials %d: want 1 or more, and the cluster's at least the namespace's", p.PerNamespace, p.PerCluster)
	}
	return nil
}

// Setting is one container's resources and Go environment.
type Setting struct {
	Requests fleet.Resources   `json:"requests"`
	Limits   fleet.Resources   `json:"limits"`
	Env      map[string]string `json:"env,omitempty"`
}

// Plan is what a workload would run with, against what it runs with.
type Plan struct {
	Workload fleet.Workload     `json:"workload"`
	Current  map[string]Setting `json:"current"`  // by container
	Proposed map[string]Setting `json:"proposed"` // by container
	// Fixes are the finding codes the plan answers.
	Fixes []string `json:"fixes,omitempty"`
	// CPUSaving and MemorySaving are the reserved (requested) CPU and
	// memory the plan gives back, as a share of today's (negative: it
	// asks for more).
	CPUSaving    float64  `json:"cpu_saving"`
	MemorySaving float64  `json:"memory_saving"`
	Reasons      []string `json:"reasons"`
	// Missing: why there is no plan (too little data for a container).
	Missing []string `json:"missing,omitempty"`
}

// fixable are the findings a plan's settings answer.
var fixable = []string{fleet.CodeGOMAXPROCSAboveLimit, fleet.CodeGOMEMLIMITUnset, fleet.CodeGOMEMLIMITAtLimit,
	fleet.CodeHeapPinned, fleet.CodeThrottledByGOMAXPROCS, fleet.CodeUnderProvisioned, fleet.CodeOOMKilled}

// PlanFrom builds a workload's plan from fleet's containers of it, raising
// memory to floor (bytes; 0: none) where the plan went below it.
func PlanFrom(w fleet.Workload, cs []fleet.Container, floor float64) Plan {
	p := Plan{Workload: w, Current: map[string]Setting{}, Proposed: map[string]Setting{}}
	var cpuNow, cpuNew, memNow, memNew float64
	for _, c := range cs {
		if c.Workload != w {
			continue
		}
		g := c.Gofit
		if !g.Enough() {
			p.Missing = append(p.Missing, fmt.Sprintf("container %s: %s", c.Container, strings.Join(g.Missing, ", ")))
			continue
		}
		now := Setting{Requests: c.Observed.Requests, Limits: c.Observed.Limits}
		mem := float64(g.Memory)
		gomemlimit := g.GOMEMLIMIT
		env := map[string]string{}
		for k, v := range g.Env {
			env[k] = v
		}
		if floor > 0 && mem < floor {
			// The heap's share of the limit moves with it: the runtime's
			// other memory does not grow with the limit.
			if gomemlimit > 0 {
				gomemlimit += int64(floor - mem)
				env["GOMEMLIMIT"] = fmt.Sprint(gomemlimit)
				remark(env, "GOMEMLIMIT")
			}
			p.Reasons = append(p.Reasons, fmt.Sprintf("container %s: memory %s raised to the lab floor %s (%s)", c.Container, bytesOf(mem), bytesOf(floor), KeyFloor))
			mem = floor
		}
		next := Setting{Requests: fleet.Resources{CPU: float64(g.CPURequest), Memory: mem}, Limits: fleet.Resources{Memory: mem}, Env: env}
		switch {
		case !g.CPURequest.Valid():
			// Fleet leaves CPU alone (an HPA scales on it): so does the plan.
			next.Requests.CPU, next.Limits.CPU = now.Requests.CPU, now.Limits.CPU
		case g.CPULimitKept:
			next.Limits.CPU = now.Limits.CPU
		case g.CPULimit.Valid():
			next.Limits.CPU = float64(g.CPULimit)
		}
		if !g.Memory.Valid() {
			next.Requests.Memory, next.Limits.Memory = now.Requests.Memory, now.Limits.Memory
		}
		p.Current[c.Container], p.Proposed[c.Container] = now, next
		cpuNow += now.Requests.CPU
		cpuNew += next.Requests.CPU
		memNow += now.Requests.Memory
		memNew += next.Requests.Memory
		for _, f := range c.Findings {
			if slices.Contains(fixable, f.Code) && !slices.Contains(p.Fixes, f.Code) {
				p.Fixes = append(p.Fixes, f.Code)
			}
		}
		for _, r := range g.Reasons {
			p.Reasons = append(p.Reasons, "container "+c.Container+": "+r)
		}
	}
	if from := QoS(p.Current); from == Guaranteed && QoS(p.Proposed) != Guaranteed {
		// A pod's QoS class cannot change in place, and a team that
		// chose Guaranteed (exclusive CPUs, last to be evicted) keeps it:
		// requests rise to the limits.
		for name, s := range p.Proposed {
			s.Limits.CPU = math.Max(s.Limits.CPU, s.Requests.CPU)
			s.Requests = s.Limits
			p.Proposed[name] = s
		}
		cpuNew, memNew = 0, 0
		for _, s := range p.Proposed {
			cpuNew += s.Requests.CPU
			memNew += s.Requests.Memory
		}
		p.Reasons = append(p.Reasons, "kept Guaranteed: requests raised to the limits (a pod's QoS class cannot change in place)")
	}
	if len(p.Proposed) == 0 && len(p.Missing) == 0 {
		p.Missing = append(p.Missing, "no Go container of "+w.String()+" in the analysis")
	}
	p.CPUSaving, p.MemorySaving = saving(cpuNow, cpuNew), saving(memNow, memNew)
	sort.Strings(p.Fixes)
	return p
}

// remark writes env[name]'s new value into gofit's marker (fit.MarkerVar),
// where the marker names it: the runtime library follows as the limits
// move only the values the marker says gofit chose, and takes any other
// for the user's.
func remark(env map[string]string, name string) {
	m, ok := env[fit.MarkerVar]
	if !ok {
		return
	}
	kvs := strings.Split(m, ",")
	for i, kv := range kvs {
		if k, _, ok := strings.Cut(kv, "="); ok && k == name {
			kvs[i] = name + "=" + env[name]
		}
	}
	env[fit.MarkerVar] = strings.Join(kvs, ",")
}

func saving(now, next float64) float64 {
	if now <= 0 {
		return 0 // nothing reserved today: nothing to give back
	}
	return 1 - next/now
}

// QoS classes, as Kubernetes names them.
const (
	Guaranteed = "Guaranteed"
	Burstable  = "Burstable"
	BestEffort = "BestEffort"
)

// QoS is the QoS class of a pod whose containers have these settings:
// Guaranteed when every one has CPU and memory limits equal to its
// requests, BestEffort when none has any, else Burstable.
func QoS(cs map[string]Setting) string {
	guaranteed, none := len(cs) > 0, true
	for _, s := range cs {
		if s.Requests != (fleet.Resources{}) || s.Limits != (fleet.Resources{}) {
			none = false
		}
		if s.Limits.CPU <= 0 || s.Limits.Memory <= 0 || s.Requests != s.Limits {
			guaranteed = false
		}
	}
	switch {
	case guaranteed:
		return Guaranteed
	case none:
		return BestEffort
	}
	return Burstable
}

// InPlace says why a running pod cannot take the plan by a resize and be
// put back the same way ("" when it can): a resize may change a value,
// not add or remove a request or limit (the API refuses removing one, so
// a trial that added a limit could never be rolled back), nor move the
// pod to another QoS class.
func (p Plan) InPlace() string {
	if from, to := QoS(p.Current), QoS(p.Proposed); from != to {
		return fmt.Sprintf("it moves the pods from QoS class %s to %s", from, to)
	}
	for _, name := range sortedKeys(p.Proposed) {
		a, b := p.Current[name], p.Proposed[name]
		for _, f := range []struct {
			what string
			x, y float64
		}{{"CPU request", a.Requests.CPU, b.Requests.CPU}, {"memory request", a.Requests.Memory, b.Requests.Memory},
			{"CPU limit", a.Limits.CPU, b.Limits.CPU}, {"memory limit", a.Limits.Memory, b.Limits.Memory}} {
			switch {
			case f.x <= 0 && f.y > 0:
				return fmt.Sprintf("container %s: it adds a %s the pods do not have, which a resize could not take away again", name, f.what)
			case f.x > 0 && f.y <= 0:
				return fmt.Sprintf("container %s: it removes the %s, which a resize cannot", name, f.what)
			}
		}
	}
	return ""
}

// Ready reports whether the plan has figures for every container.
func (p Plan) Ready() bool { return len(p.Missing) == 0 && len(p.Proposed) > 0 }

// Worth says whether a plan is worth a trial: it answers a finding, or
// gives back at least saving of the reserved CPU or memory.
func (p Plan) Worth(saving float64) (bool, string) {
	if len(p.Fixes) > 0 {
		return true, "it answers " + strings.Join(p.Fixes, ", ")
	}
	if p.CPUSaving >= saving || p.MemorySaving >= saving {
		return true, fmt.Sprintf("it gives back %.0f%% of the requested CPU and %.0f%% of the memory", 100*p.CPUSaving, 100*p.MemorySaving)
	}
	return false, fmt.Sprintf("it answers no finding and gives back %.0f%% of the requested CPU and %.0f%% of the memory, under the %.0f%% a trial needs",
		100*p.CPUSaving, 100*p.MemorySaving, 100*saving)
}

// Hash names a plan's proposed settings: a plan stopped for harm is known
// again by it through the back-off.
func (p Plan) Hash() string {
	b, _ := json.Marshal(p.Proposed) // maps marshal in key order
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6])
}

// Phase is where a workload is in the loop.
type Phase string

// Phases. A workload with no Status is idle.
const (
	Idle        Phase = ""
	Recommended Phase = "recommended"
	Trialling   Phase = "trial"
	Stopped     Phase = "stopped"  // harm, a failed promotion or the kill switch: back-off
	Passed      Phase = "passed"   // a trial in mode trial passed; promote by hand
	Promoted    Phase = "promoted" // the plan is the workload's template
)

// Status is what the controller keeps on the workload (an annotation), so
// that a restarted controller picks up where it was.
type Status struct {
	Phase  Phase     `json:"phase,omitempty"`
	Plan   string    `json:"plan,omitempty"` // Plan.Hash
	Since  time.Time `json:"since"`
	Pods   []string  `json:"pods,omitempty"` // the trial's pods
	Reason string    `json:"reason,omitempty"`
	// Current and Proposed are the plan's settings as it was tried: a
	// trial judges the plan it started with (a plan computed during it
	// would read the trial's own pods), a rollback puts Current back and a
	// promotion writes Proposed.
	Current  map[string]Setting `json:"current,omitempty"`
	Proposed map[string]Setting `json:"proposed,omitempty"`
}

// Pod is one of the workload's pods as the controller sees it.
type Pod struct {
	Name  string
	Node  string
	Ready bool
}

// Load is the trials running now.
type Load struct{ Namespace, Cluster int }

// Kind of Action.
type Kind string

// Actions.
const (
	None        Kind = "none"
	Wait        Kind = "wait"
	DoRecommend Kind = "recommend"
	StartTrial  Kind = "start-trial"
	Promote     Kind = "promote"
	Rollback    Kind = "rollback"  // harm, opt-out or the kill switch: the trial's pods back to the control
	EndTrial    Kind = "end-trial" // judged, not promoted: the trial's pods back to the control
	Pass        Kind = "pass"      // judged good in mode trial: kept as a file to promote by hand
)

// Action is the one thing to do now, and why.
type Action struct {
	Kind Kind     `json:"kind"`
	Why  string   `json:"why"`
	Pods []string `json:"pods,omitempty"` // StartTrial: the pods to resize; Rollback, EndTrial: those to put back
	// Next is the status to keep once the action is done.
	Next Status `json:"next"`
}

// Input is everything Next decides from. While a trial runs, Plan is not
// read: the trial judges the plan kept in Status.
type Input struct {
	Now    time.Time
	Mode   Mode
	Plan   Plan
	Status Status
	Pods   []Pod
	Load   Load
	Policy Policy
	// Judgement is the trial's, while one runs (nil before its first look).
	Judgement *Judgement
	// Resize is how the kubelet took the trial's resizes, while one runs.
	Resize Resize
	// Blocked, when set, says why no trial may start now (the workload is
	// rolling out, or its pods run another experiment); NotInPlace why
	// its pods could not take the plan in place at all (their whole pod's
	// QoS class would change): the plan is then recommended instead.
	Blocked, NotInPlace string
}

// Resize is the kubelet's answer to a trial's resizes.
type Resize struct {
	// Applied: every trial pod runs with the plan's resources (its
	// containers' status says so, and no resize is pending).
	Applied bool
	// Infeasible names a pod whose resize the kubelet refused, and why.
	Infeasible string
}

// Next is the controller's one decision for a workload.
func Next(in Input) Action {
	st, pol := in.Status, in.Policy
	keep := func(k Kind, why string) Action { return Action{Kind: k, Why: why, Next: st} }
	to := func(k Kind, ph Phase, why string, pods []string) Action {
		return Action{Kind: k, Why: why, Pods: pods, Next: Status{Phase: ph, Plan: st.Plan, Since: in.Now, Pods: slices.Clone(pods), Reason: why,
			Current: st.Current, Proposed: st.Proposed}}
	}
	if st.Phase == Trialling {
		switch {
		case pol.Paused:
			// Not a judgement of the plan: no back-off.
			return to(Rollback, Idle, "the kill switch is on", st.Pods)
		case in.Mode == Off || in.Mode == Recommend:
			return to(Rollback, Idle, fmt.Sprintf("the workload's mode is now %s", in.Mode), st.Pods)
		case in.Resize.Infeasible != "":
			return to(Rollback, Stopped, "the kubelet cannot take the plan: "+in.Resize.Infeasible, st.Pods)
		}
		j := in.Judgement
		if j != nil && j.Harmful {
			return to(Rollback, Stopped, "harm: "+strings.Join(j.Reasons, "; "), st.Pods)
		}
		if live := livePods(in.Pods, st.Pods); len(live) == 0 {
			return to(EndTrial, Idle, "the trial's pods are gone", nil)
		}
		if end := st.Since.Add(pol.Duration); in.Now.Before(end) {
			return keep(Wait, fmt.Sprintf("trial runs until %s", end.UTC().Format(time.RFC3339)))
		}
		switch {
		case !in.Resize.Applied:
			// A trial whose pods never ran the plan compared the same
			// settings twice: "same" would promote a plan never run.
			return to(EndTrial, Stopped, "the kubelet had not applied the resize by the trial's end", st.Pods)
		case j == nil:
			return to(EndTrial, Stopped, "the trial was never judged: no results from Prometheus", st.Pods)
		case !j.Promote:
			return to(EndTrial, Stopped, "not promoted: "+strings.Join(j.Reasons, "; "), st.Pods)
		case in.Mode == Auto:
			return to(Promote, Promoted, "promoted: "+strings.Join(j.Reasons, "; "), st.Pods)
		}
		return to(Pass, Passed, "passed (mode trial: promote by hand): "+strings.Join(j.Reasons, "; "), st.Pods)
	}
	if in.Mode == Off {
		return keep(None, "not opted in")
	}
	if !in.Plan.Ready() {
		return keep(Wait, "no plan: "+strings.Join(in.Plan.Missing, "; "))
	}
	hash := in.Plan.Hash()
	// A stopped trial backs the workload off, whatever plan comes next: a
	// plan recomputed over a sliding window drifts a little at each look,
	// and a drift must not start the same trial again. A promotion does
	// too, until the plan's history is mostly the promoted pods'.
	switch st.Phase {
	case Stopped, Promoted, Passed:
		if until := st.Since.Add(pol.Backoff); in.Now.Before(until) {
			if st.Plan == hash && st.Phase != Stopped {
				return keep(None, fmt.Sprintf("plan %s already %s", hash, st.Phase))
			}
			return keep(Wait, fmt.Sprintf("%s at %s (%s); no new trial before %s", st.Phase, st.Since.UTC().Format(time.RFC3339), st.Reason, until.UTC().Format(time.RFC3339)))
		}
	case Recommended:
		if in.Mode == Recommend && st.Plan == hash {
			return keep(None, fmt.Sprintf("plan %s already recommended", hash))
		}
	}
	worth, why := in.Plan.Worth(pol.Saving)
	if !worth {
		return keep(None, "plan "+hash+" not worth a trial: "+why)
	}
	recommend := func(why string) Action {
		if st.Phase == Recommended && st.Plan == hash {
			return keep(Wait, why)
		}
		a := to(DoRecommend, Recommended, "plan "+hash+": "+why, nil)
		a.Next.Plan, a.Next.Current, a.Next.Proposed = hash, in.Plan.Current, in.Plan.Proposed
		return a
	}
	if in.Mode == Recommend {
		return recommend(why)
	}
	notInPlace := in.Plan.InPlace()
	if notInPlace == "" {
		notInPlace = in.NotInPlace
	}
	if notInPlace != "" {
		return recommend(fmt.Sprintf("%s; not tried: %s, which a running pod cannot take in place and be put back (apply it by hand)", why, notInPlace))
	}
	switch {
	case pol.Paused:
		return keep(Wait, "the kill switch is on")
	case in.Blocked != "":
		return keep(Wait, in.Blocked)
	case in.Load.Namespace >= pol.PerNamespace || in.Load.Cluster >= pol.PerCluster:
		return keep(Wait, fmt.Sprintf("%d trials in the namespace and %d in the cluster already (at most %d and %d)",
			in.Load.Namespace, in.Load.Cluster, pol.PerNamespace, pol.PerCluster))
	}
	pods, err := Pick(in.Pods, pol)
	if err != nil {
		return keep(Wait, err.Error())
	}
	a := to(StartTrial, Trialling, fmt.Sprintf("plan %s on %d of %d ready pods: %s", hash, len(pods), countReady(in.Pods), why), pods)
	a.Next.Plan, a.Next.Current, a.Next.Proposed = hash, in.Plan.Current, in.Plan.Proposed
	return a
}

func livePods(pods []Pod, names []string) []string {
	var out []string
	for _, p := range pods {
		if slices.Contains(names, p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
}

func countReady(pods []Pod) int {
	n := 0
	for _, p := range pods {
		if p.Ready {
			n++
		}
	}
	return n
}

// Pick chooses a trial's pods among the ready ones: floor(Share × ready),
// at least MinPods, leaving at least as many as the control as the trial
// takes, spread over nodes (a trial on one node measures the node), by
// name within a node so that the choice is the same on every look.
func Pick(pods []Pod, pol Policy) ([]string, error) {
	byNode := map[string][]string{}
	var nodes []string
	ready := 0
	for _, p := range pods {
		if !p.Ready {
			continue
		}
		ready++
		if _, ok := byNode[p.Node]; !ok {
			nodes = append(nodes, p.Node)
		}
		byNode[p.Node] = append(byNode[p.Node], p.Name)
	}
	n := max(pol.MinPods, int(math.Floor(pol.Share*float64(ready))))
	if ready-n < n {
		return nil, fmt.Errorf("%d ready pods: a trial of %d needs %d ready, as many again for the control", ready, n, 2*n)
	}
	sort.Strings(nodes)
	for _, nd := range nodes {
		sort.Strings(byNode[nd])
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		for _, nd := range nodes {
			if i < len(byNode[nd]) && len(out) < n {
				out = append(out, byNode[nd][i])
			}
		}
	}
	return out, nil
}

// Judgement is a trial's standing from the experiment's results.
type Judgement struct {
	Harmful bool     `json:"harmful"`
	Promote bool     `json:"promote"`
	Reasons []string `json:"reasons"`
}

// promoteOn are the metrics a trial must not make worse, each by no more
// than the experiment's margin for it (10% on p99, 5% on CPU per
// request). Both improve downwards.
var promoteOn = []string{"p99_seconds", "cpu_seconds_per_request"}

// Judge reads the experiment's results for the trial's arm. Harm (the
// guard's anytime-valid verdict) rolls back at any look. Promotion needs no
// harm, no OOM kill and no more restarts per pod than the control, and, on
// latency p99 and CPU per request, the arm no worse than the control by
// more than the metric's margin: the upper end of the ratio's interval
// (arm ÷ control, at the results' level) at most 1 + margin.
//
// That is a non-inferiority test, the question a promotion asks: "same"
// (the whole interval within 1 ± margin) also asks that the arm be no
// better by more than the margin, which no one needs of a cheaper size,
// and which a trial on one pod, whose interval is wide, rarely shows. An
// interval from 0.80 to 1.04 on CPU per request is not "same" and not
// "better", yet it rules out a cost above 5% at the stated error.
func Judge(r *experiment.Results, arm string) (Judgement, error) {
	if r == nil {
		return Judgement{}, errors.New("no results")
	}
	var a, c *experiment.ArmResult
	for i := range r.Arms {
		switch r.Arms[i].Name {
		case arm:
			a = &r.Arms[i]
		case r.Control:
			c = &r.Arms[i]
		}
	}
	if a == nil || c == nil {
		return Judgement{}, fmt.Errorf("results of %s have no arm %q or no control %q", r.Experiment, arm, r.Control)
	}
	if a.Harmful {
		return Judgement{Harmful: true, Reasons: slices.Clone(a.Harms)}, nil
	}
	j := Judgement{Promote: true}
	fail := func(f string, args ...any) { j.Promote = false; j.Reasons = append(j.Reasons, fmt.Sprintf(f, args...)) }
	if a.OOMKills > 0 {
		fail("%.0f OOM kills in the trial", a.OOMKills)
	}
	// Per pod: the trial has fewer pods than the control.
	if perPod(a.Restarts, len(a.Pods)) > perPod(c.Restarts, len(c.Pods)) {
		fail("%.0f restarts in the trial's %d pods against %.0f in the control's %d", a.Restarts, len(a.Pods), c.Restarts, len(c.Pods))
	}
	for _, m := range promoteOn {
		i := slices.IndexFunc(r.Verdicts, func(v experiment.Verdict) bool { return v.Arm == arm && v.Metric == m })
		if i < 0 {
			fail("no verdict on %s (its series were not found)", m)
			continue
		}
		v := r.Verdicts[i]
		high, ok := float64(v.High), !math.IsNaN(float64(v.High)) && !math.IsNaN(float64(v.Low))
		what := fmt.Sprintf("%s ×%.3f (%.0f%% interval %.3f–%.3f, %s)", m, float64(v.Ratio), 100*v.Level, float64(v.Low), high, v.Verdict)
		switch {
		case !ok:
			fail("%s: no interval", what)
		case high <= 1+v.Margin:
			j.Reasons = append(j.Reasons, fmt.Sprintf("%s: at most %.0f%% worse", what, 100*v.Margin))
		default:
			fail("%s: may be more than %.0f%% worse", what, 100*v.Margin)
		}
	}
	return j, nil
}

func perPod(n float64, pods int) float64 { return n / float64(max(pods, 1)) }

func bytesOf(b float64) string {
	const mib = 1 << 20
	if b >= 1<<30 {
		return fmt.Sprintf("%.2fGiB", b/(1<<30))
	}
	return fmt.Sprintf("%.1fMiB", b/mib)
}
