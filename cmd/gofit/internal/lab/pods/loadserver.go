package pods

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/examples/serve"
)

// LoadCommand is the gofit subcommand a `gofit lab --kube` run's load
// pod serves: the lab's load generator behind one HTTP endpoint, so the
// load comes from a pod beside the trials (other nodes where there are
// any) and only its summary crosses the API server.
const LoadCommand = "lab-load"

// loadPath is where ServeLoad takes a loadRequest and answers a loadReply.
const loadPath = "/v1/load"

// loadCPUPath answers the load pod's own CPU seconds since it started.
const loadCPUPath = "/v1/cpu"

// The load pod drives load only for the run that started it: the run
// gives it a token in its env and sends it with every request. Without
// one, anything that reaches the pod on the cluster's network could aim
// its generator at any URL.
const (
	LoadTokenEnv    = "GOFIT_LAB_LOAD_TOKEN"
	loadTokenHeader = "X-Gofit-Lab-Token"
)

// loadRequest is one window of load, as the lab's runner would drive it
// from this machine.
type loadRequest struct {
	Targets []wireTarget `json:"targets"`
	Seed    int64        `json:"seed"`
	// Open: Rate requests a second for Window; else a closed loop of
	// Concurrency workers for Requests (0: no bound) or Window.
	Open        bool          `json:"open"`
	Rate        float64       `json:"rate,omitempty"`
	Window      time.Duration `json:"window_ns"`
	Requests    int           `json:"requests,omitempty"`
	Concurrency int           `json:"concurrency,omitempty"`
	InFlight    int           `json:"in_flight"`
	// MinRate: the stall rule's floor (0: none). The load pod cannot read
	// the trial's fault counters, so only a window without completions
	// stops a load early (load.Loader's no-progress rule).
	MinRate float64 `json:"min_rate,omitempty"`
	// Warmup: first drive the same load this long on the same
	// connections, measured by nothing (0: none).
	Warmup time.Duration `json:"warmup_ns,omitempty"`
	// Marks are URLs read right before and right after the window (the
	// trial cgroup's counters from the node agent, the target's
	// /debug/vars), so that what they count is the window's alone, as
	// the local lab reads its counters around its load.
	Marks []string `json:"marks,omitempty"`
	// MarkAuth is the bearer token for each mark ("" none, or fewer
	// than Marks): the node agent's under --metrics-secure, read over
	// https only. A trial's own /debug/vars never gets one.
	MarkAuth []string `json:"mark_auth,omitempty"`
}

// mark is one of a window's Marks read at its two edges.
type mark struct {
	Start json.RawMessage `json:"start,omitempty"`
	End   json.RawMessage `json:"end,omitempty"`
	Error string          `json:"error,omitempty"`
}

// wireTarget is a load.Target with its body, which load.Target's JSON
// leaves out (reports name the file instead).
type wireTarget struct {
	load.Target
	Body []byte `json:"body,omitempty"`
}

// loadReply is what the window measured.
type loadReply struct {
	Result load.Result   `json:"result"`
	Blocks []stats.Block `json:"blocks"`
	Error  string        `json:"error,omitempty"`
	// Marks in the request's order; WindowSeconds from the end of the
	// start reads to the end of the end reads (the local lab's CPU window).
	Marks         []mark  `json:"marks,omitempty"`
	WindowSeconds float64 `json:"window_seconds,omitempty"`
}

func wireTargets(ts []load.Target) []wireTarget {
	out := make([]wireTarget, len(ts))
	for i, t := range ts {
		out[i] = wireTarget{Target: t, Body: t.Body}
	}
	return out
}

// check says what is wrong with a request, naming the field.
func (q *loadRequest) check() error {
	switch {
	case len(q.Targets) == 0:
		return errors.New("targets: none")
	case q.Window <= 0 && (q.Open || q.Requests <= 0):
		return errors.New("window_ns: must be above 0")
	case q.Open && q.Rate <= 0:
		return errors.New("rate: must be above 0 in an open loop")
	case !q.Open && q.Concurrency <= 0:
		return errors.New("concurrency: must be above 0 in a closed loop")
	case q.InFlight <= 0 || q.InFlight > 4096:
		return errors.New("in_flight: must be 1 to 4096")
	case q.Window > time.Hour:
		return errors.New("window_ns: at most an hour")
	case q.Warmup < 0 || q.Warmup > time.Hour:
		return errors.New("warmup_ns: 0 to an hour")
	case len(q.Marks) > 4:
		return errors.New("marks: at most 4")
	}
	for i, m := range q.Marks {
		if err := load.CheckURL(m); err != nil {
			return fmt.Errorf("marks[%d]: %w", i, err)
		}
	}
	if len(q.MarkAuth) > len(q.Marks) {
		return errors.New("mark_auth: more tokens than marks")
	}
	for i, tok := range q.MarkAuth {
		if tok != "" && !strings.HasPrefix(q.Marks[i], "https://") {
			return fmt.Errorf("mark_auth[%d]: a token goes over https only, and marks[%d] is %s", i, i, q.Marks[i])
		}
	}
	for i, t := range q.Targets {
		if err := load.CheckURL(t.URL); err != nil {
			return fmt.Errorf("targets[%d].url: %w", i, err)
		}
	}
	return nil
}

// runLoad drives one window.
func runLoad(ctx context.Context, q loadRequest) loadReply {
	ts := make([]load.Target, len(q.Targets))
	for i, t := range q.Targets {
		ts[i] = t.Target
		ts[i].Body = t.Body
	}
	ld := load.NewLoader(q.InFlight, nil)
	ld.MinRate = q.MinRate
	defer ld.Close()
	if q.Warmup > 0 {
		// Every window starts the same seeded order, the warm-up too.
		if q.Open {
			ld.Open(ctx, load.NewMix(ts, q.Seed), q.Rate, q.Warmup)
		} else {
			ld.Closed(ctx, load.NewMix(ts, q.Seed), 0, q.Warmup, q.Concurrency)
		}
	}
	marks := make([]mark, len(q.Marks))
	readMarks(ctx, q.Marks, q.MarkAuth, marks, false)
	t0 := time.Now()
	mix := load.NewMix(ts, q.Seed)
	var res load.Result
	if q.Open {
		res = ld.Open(ctx, mix, q.Rate, q.Window)
	} else {
		res = ld.Closed(ctx, mix, q.Requests, q.Window, q.Concurrency)
	}
	readMarks(ctx, q.Marks, q.MarkAuth, marks, true)
	return loadReply{Result: res, Blocks: res.Blocks, Marks: marks, WindowSeconds: time.Since(t0).Seconds()}
}

// markClient reads marks: small JSON documents from the pod network. The
// node agent's https serves a certificate it made at start, which
// nothing can pin: the token it is sent is what authenticates, and TLS
// keeps it off the wire.
var markClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
}}

// readMarks reads each URL (with its token from auth, if any) into its
// mark's start or end, side by side.
func readMarks(ctx context.Context, urls, auth []string, into []mark, end bool) {
	var wg sync.WaitGroup
	for i, u := range urls {
		tok := ""
		if i < len(auth) {
			tok = auth[i]
		}
		wg.Go(func() {
			b, err := getMark(ctx, u, tok)
			if err != nil && ctx.Err() == nil && transient(err) {
				// Once more: on a busy node the agent can miss the
				// client's 5 s once (the e2e node, 2026-12-07), and one
				// slow answer is no reason to end the whole study. The
				// window's seconds are timed around the reads, so a
				// late edge is counted in them.
				b, err = getMark(ctx, u, tok)
			}
			switch {
			case err != nil && into[i].Error == "":
				into[i].Error = err.Error()
			case err == nil && end:
				into[i].End = b
			case err == nil:
				into[i].Start = b
			}
		})
	}
	wg.Wait()
}

// transient says whether a mark's read timed out or was cut off (a
// reset), not refused or answered: every error of an http.Client is a
// net.Error, so only its timeouts count.
func transient(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

func getMark(ctx context.Context, u, tok string) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := markClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("GET %s: not JSON", u)
	}
	return b, nil
}

// loadHandler serves loadPath. Windows of trials on different nodes run
// side by side here, as the local lab drives a health pair's two loads
// from one process: their generator CPU is in each reply.
func loadHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+loadPath, func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(loadTokenHeader)), []byte(token)) != 1 {
			http.Error(w, "load request: no or a wrong "+loadTokenHeader+": this load pod drives load only for the run that started it", http.StatusForbidden)
			return
		}
		var q loadRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&q); err != nil {
			http.Error(w, "load request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := q.check(); err != nil {
			http.Error(w, "load request: "+err.Error(), http.StatusBadRequest)
			return
		}
		rep := runLoad(r.Context(), q)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	// The generator's own CPU since it started: windows of trials on
	// different nodes overlap here, so a window's generator_cpu_seconds
	// may hold another's; the run's total comes from this.
	start := load.SelfCPU()
	mux.HandleFunc("GET "+loadCPUPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]float64{"cpu_seconds": (load.SelfCPU() - start).Seconds()})
	})
	return mux
}

// ServeLoad serves the lab's load on addr until SIGTERM or SIGINT, to
// requests that carry the token in $GOFIT_LAB_LOAD_TOKEN.
func ServeLoad(addr string) error {
	token := os.Getenv(LoadTokenEnv)
	if len(token) < 16 {
		return fmt.Errorf("$%s: want the run's token (16 characters or more), got %d characters: the load pod serves only the run that started it", LoadTokenEnv, len(token))
	}
	return serve.UntilSignal(addr, loadHandler(token), 0)
}
