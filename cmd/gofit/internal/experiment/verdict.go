package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/admission"
)

// The guard's verdict on one experiment, over HTTP, for a canary tool
// that asks as Argo Rollouts' web metric provider does: "harmful" once an
// arm is stopped, "ok" while the guard has judged the experiment on its
// data within the stale bound, and "unknown" otherwise (no look yet, or
// looks failing because Prometheus is down or has no series). The guard
// never passes an experiment on data it does not have: an outage reads
// "unknown", which Argo counts as Inconclusive (the rollout pauses for a
// person) rather than as harm (it would abort) or as a pass.

// GuardVerdict is the answer of GET /v1/experiments/{namespace}/{name}.
type GuardVerdict struct {
	Namespace  string                       `json:"namespace"`
	Experiment string                       `json:"experiment"`
	Workload   string                       `json:"workload,omitempty"`
	Verdict    string                       `json:"verdict"` // harmful, ok or unknown
	Reason     string                       `json:"reason"`
	Stopped    map[string]admission.ArmStop `json:"stopped,omitempty"`
	Looked     *time.Time                   `json:"looked,omitempty"`
}

// Verdicts of VerdictHandler.
const (
	VerdictHarmful = "harmful"
	VerdictOK      = "ok"
	VerdictUnknown = "unknown"
)

// VerdictHandler serves GET /v1/experiments/{namespace}/{name}[?workload=
// Kind/NAME] from the experiments' Leases, which every guard replica can
// read (the leader writes them): any replica behind a Service answers
// the same. A look older than stale is no judgement. Only the guard's
// namespaces are answered (404 elsewhere). An experiment's Leases are
// read at most once per verdictCache, however many ask: give cs a
// client of its own, so that no flood of questions can starve the
// leader's renewals of its client's rate limit.
func VerdictHandler(cs kubernetes.Interface, namespaces []string, stale time.Duration, now func() time.Time) http.Handler {
	if now == nil {
		now = time.Now
	}
	type listed struct {
		at     time.Time
		leases []coordinationv1.Lease
		err    error
	}
	var mu sync.Mutex
	cache := map[string]listed{}
	list := func(ctx context.Context, ns, name string) ([]coordinationv1.Lease, error) {
		key := ns + "/" + name
		mu.Lock()
		defer mu.Unlock()
		if c, ok := cache[key]; ok && now().Sub(c.at) < verdictCache {
			return c.leases, c.err
		}
		if len(cache) > 1000 {
			clear(cache)
		}
		l, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: admission.LabelExperiment + "=" + name})
		c := listed{at: now(), err: err}
		if err == nil {
			c.leases = l.Items
		}
		cache[key] = c
		return c.leases, c.err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/experiments/{namespace}/{name}", func(w http.ResponseWriter, r *http.Request) {
		ns, name, wl := r.PathValue("namespace"), r.PathValue("name"), r.URL.Query().Get("workload")
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			http.Error(w, fmt.Sprintf("namespace %q: %s", ns, errs[0]), http.StatusBadRequest)
			return
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			http.Error(w, fmt.Sprintf("experiment %q: %s", name, errs[0]), http.StatusBadRequest)
			return
		}
		if len(namespaces) > 0 && !slices.Contains(namespaces, ns) {
			http.Error(w, fmt.Sprintf("namespace %s: the guard judges experiments in %v only", ns, namespaces), http.StatusNotFound)
			return
		}
		v := GuardVerdict{Namespace: ns, Experiment: name, Workload: wl, Verdict: VerdictUnknown}
		leases, err := list(r.Context(), ns, name)
		if err != nil {
			v.Reason = "the experiment's Lease cannot be read: " + err.Error()
			writeVerdict(w, v)
			return
		}
		var found []string
		for i := range leases {
			l := &leases[i]
			lw := l.Annotations[admission.AnnotationWorkload]
			if wl != "" && lw != wl {
				continue
			}
			found = append(found, lw)
			st, err := admission.ParseGuardStatus(l.Annotations)
			if err != nil {
				v.Reason = fmt.Sprintf("Lease %s: %v", l.Name, err)
				continue
			}
			v.Workload, v.Stopped, v.Looked = lw, st.Stopped, st.Looked
			switch {
			case len(st.Stopped) > 0:
				v.Verdict, v.Reason = VerdictHarmful, "the guard stopped an arm as harmful"
			case st.Looked == nil:
				v.Reason = "the guard has not judged the experiment on its data yet"
			case now().Sub(*st.Looked) > stale:
				v.Reason = fmt.Sprintf("the guard's last judgement on data is %v old, beyond %v: Prometheus down or without the experiment's series?", now().Sub(*st.Looked).Round(time.Second), stale)
			default:
				v.Verdict, v.Reason = VerdictOK, "judged on its data, no arm harmful"
			}
		}
		switch {
		case len(found) == 0:
			v.Reason = "no Lease of the experiment: it has not started, or has another name"
			if wl != "" {
				v.Reason = "no Lease of the experiment for workload " + wl
			}
		case len(found) > 1:
			v = GuardVerdict{Namespace: ns, Experiment: name, Verdict: VerdictUnknown,
				Reason: fmt.Sprintf("workloads %q run an experiment of this name: ask with ?workload=KIND/NAME", found)}
		}
		writeVerdict(w, v)
	})
	return mux
}

// verdictCache is how long an experiment's Leases, once read, answer
// every question about it.
const verdictCache = 5 * time.Second

func writeVerdict(w http.ResponseWriter, v GuardVerdict) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
