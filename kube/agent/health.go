package agent

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// health is what /healthz reports: whether reconcile passes complete, and
// what the agent is waiting for when they do not.
type health struct {
	mu      sync.Mutex
	last    time.Time // end of the last completed pass
	skip    string    // why that pass wrote nothing, if it did not
	waiting string    // what Run waits for before the first pass
	// pods the kubelet runs that the API's view lacks, and the longest
	// such absence (Report.Unknown, Report.ViewLag)
	unknown int
	lag     time.Duration
	// deferred: what the agent leaves to the kubelet (Report.Deferred)
	deferred []string
	// config is why the QoS ConfigMap was refused ("" when it was not),
	// and configBlocks whether that leaves no configuration in force, so
	// that nothing is written.
	config       string
	configBlocks bool
	// loop is when Run's loop last came round, whatever the pass did:
	// what /livez judges (a bad ConfigMap stops writes, not the loop).
	loop time.Time
}

// tick records that Run's loop came round at t.
func (h *health) tick(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loop = t
}

// Live says whether the agent's process is worth keeping: nil unless
// Run's loop has stopped coming round for more than maxAge. It is what a
// liveness probe asks (/livez). A ConfigMap that does not parse fails
// Health, not Live: restarting the agent cannot fix the ConfigMap, and a
// crash-looping agent would lose the loop that notices when it is fixed.
// Before the loop's first turn the start-up wait is bounded by the
// agent's own --sync-timeout, which ends the process with an error.
func (a *Agent) Live(now time.Time, maxAge time.Duration) error {
	h := &a.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loop.IsZero() {
		return nil
	}
	if age := now.Sub(h.loop).Round(time.Millisecond); age > maxAge {
		return fmt.Errorf("the reconcile loop last came round %v ago, more than %v", age, maxAge)
	}
	return nil
}

// badConfig records the QoS ConfigMap's error (nil: none) and whether the
// agent writes nothing for it.
func (h *health) badConfig(err error, blocks bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.config, h.configBlocks = "", false
	if err != nil {
		h.config, h.configBlocks = err.Error(), blocks
	}
}

func (h *health) passed(at time.Time, skip, reason string, unknown int, lag time.Duration, deferred []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last, h.waiting = at, ""
	h.deferred = deferred
	h.unknown, h.lag = unknown, lag
	h.skip = skip
	if reason != "" {
		h.skip = reason
	}
}

func (h *health) wait(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting = what
}

// Health says whether the agent is doing its job: nil when a reconcile pass
// has completed within maxAge of now, and an error naming the key while a
// QoS ConfigMap that does not parse or check leaves it nothing to write.
// The text says what it did last, or what it waits for. A pass that stood aside or skipped for want of the
// node's allocatable memory still completed: the loop is alive, and the
// reason is in the text, the log and the metrics.
func (a *Agent) Health(now time.Time, maxAge time.Duration) (string, error) {
	h := &a.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.configBlocks {
		// Treated like a failed read: the values stay as they are.
		return "", fmt.Errorf("%s: nothing under kubepods is written until it is fixed", h.config)
	}
	if h.last.IsZero() {
		what := h.waiting
		if what == "" {
			what = "the first reconcile"
		}
		return "", fmt.Errorf("no reconcile pass yet: waiting for %s", what)
	}
	age := now.Sub(h.last).Round(time.Millisecond)
	if age > maxAge {
		return "", fmt.Errorf("last reconcile pass %v ago, more than %v", age, maxAge)
	}
	text := fmt.Sprintf("ok: last reconcile pass %v ago", age)
	if h.unknown > 0 {
		text += fmt.Sprintf("; the kubelet runs %d pod(s) missing from the API's view, for up to %v (their values kept)", h.unknown, h.lag.Round(time.Second))
	}
	if h.skip != "" {
		text += "; it wrote nothing: " + h.skip
	}
	if h.config != "" {
		text += "; " + h.config + ": ignored, the last good configuration stays in force"
	}
	if len(h.deferred) > 0 {
		text += "; it defers to the kubelet for " + strings.Join(h.deferred, "; ")
	}
	return text, nil
}
