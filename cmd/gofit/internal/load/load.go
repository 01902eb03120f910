// Package load drives HTTP load at a service from outside its cgroup: an
// open loop (a fixed rate, each latency timed from when its request was
// due) and a closed loop (workers that send the next request when the
// last returns), over a weighted mix of requests, with a readiness wait
// and the environment and port helpers a service started for a trial
// needs. The lab and the QoS experiment both drive load through it.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// Result summarises one load window. Latencies are in milliseconds and
// cover every request sent: failed and cancelled ones count with the time
// they took (a request cut short by the window's end took at least that
// long), so a setting cannot look fast by failing.
type Result struct {
	Requests   int            `json:"requests"` // succeeded
	Errors     int            `json:"errors"`   // failed, timed out or cancelled
	Cancelled  int            `json:"cancelled"`
	ErrorKinds map[string]int `json:"error_kinds,omitempty"` // e.g. "HTTP 500 Internal Server Error": 12
	Duration   time.Duration  `json:"-"`
	Seconds    float64        `json:"seconds"`
	RPS        float64        `json:"rps"` // successful requests per second of the window
	P50        float64        `json:"p50_ms"`
	P90        float64        `json:"p90_ms"`
	P99        float64        `json:"p99_ms"`
	P999       float64        `json:"p999_ms"`
	Max        float64        `json:"max_ms"`
	GenCPUSec  float64        `json:"generator_cpu_seconds"` // the generator's own CPU while it ran
	Stalled    bool           `json:"stalled"`
	Targets    []TargetResult `json:"targets"` // per target of the mix, in its order
	Blocks     []stats.Block  `json:"-"`
}

// TargetResult is what one target of the mix got in a window.
type TargetResult struct {
	Method   string         `json:"method"`
	URL      string         `json:"url"`
	Requests int            `json:"requests"` // sent (counted), whatever came back
	Status   map[string]int `json:"status"`   // "200": 950, "503": 3, "connection refused": 1
	P50      float64        `json:"p50_ms"`
	P99      float64        `json:"p99_ms"`
	hist     *hdrhistogram.Histogram
}

// Merge adds o's counts and latencies to t (same target).
func (t *TargetResult) Merge(o TargetResult) {
	if t.Status == nil {
		t.Status = map[string]int{}
	}
	for k, v := range o.Status {
		t.Status[k] += v
	}
	t.Requests += o.Requests
	if o.hist != nil {
		if t.hist == nil {
			t.hist = newHist()
		}
		t.hist.Merge(o.hist)
		t.P50, t.P99 = ms(t.hist, 50), ms(t.hist, 99)
	}
}

// ErrorSummary names the errors, commonest first, e.g. `12 × HTTP 500
// Internal Server Error`, or "" when there was none.
func (r Result) ErrorSummary() string { return Kinds(r.ErrorKinds) }

// Kinds formats counts of error kinds, commonest first.
func Kinds(kinds map[string]int) string {
	type kv struct {
		k string
		n int
	}
	var ks []kv
	for k, n := range kinds {
		ks = append(ks, kv{k, n})
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].n > ks[j].n || ks[i].n == ks[j].n && ks[i].k < ks[j].k })
	var parts []string
	for _, e := range ks {
		parts = append(parts, fmt.Sprintf("%d × %s", e.n, e.k))
	}
	return strings.Join(parts, ", ")
}

// StallProbe reports the counters that climb while a target thrashes near
// its memory limit (major faults, limit hits). It may be nil.
type StallProbe func() (faults, hits uint64)

// Mix is the requests a load sends: its targets in the order of a
// weighted, seeded schedule. Every window starts at the schedule's start.
type Mix struct {
	Targets []Target
	order   []int
}

// NewMix schedules ts by weight, shuffled with seed (see Schedule).
func NewMix(ts []Target, seed int64) *Mix {
	return &Mix{Targets: ts, order: Schedule(ts, seed)}
}

func (m *Mix) target(i int64) int { return m.order[int(i%int64(len(m.order)))] }

// Loader drives HTTP load at a mix of targets.
type Loader struct {
	client *http.Client
	probe  StallProbe
	// MaxInFlight bounds concurrent requests; the connection pool keeps as
	// many idle connections, so no request pays for a new TCP connection
	// once the pool has warmed up.
	MaxInFlight int
	// Stall is the window over which progress is judged, and MinRate the
	// completions per second below which a window counts as stalled while
	// the probe's counters climb (see watch).
	Stall   time.Duration
	MinRate float64
}

const (
	// StallWindow is the window of the stall rule during load.
	StallWindow = 2 * time.Second
	// RequestTimeout bounds each request.
	RequestTimeout = 10 * time.Second
	// MaxOpenInFlight bounds the open loop's concurrent requests; a
	// request that must wait for a slot is still timed from when it
	// should have been sent.
	MaxOpenInFlight = 256
)

// NewLoader returns a Loader for up to maxInFlight concurrent requests.
func NewLoader(maxInFlight int, probe StallProbe) *Loader {
	maxInFlight = max(maxInFlight, 1)
	tr := &http.Transport{MaxIdleConns: maxInFlight, MaxIdleConnsPerHost: maxInFlight, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	return &Loader{client: &http.Client{Transport: tr, Timeout: RequestTimeout}, probe: probe, MaxInFlight: maxInFlight, Stall: StallWindow}
}

// Close drops idle connections.
func (l *Loader) Close() { l.client.CloseIdleConnections() }

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 120_000_000, 3) } // 1µs..120s

func ms(h *hdrhistogram.Histogram, q float64) float64 {
	if h.TotalCount() == 0 {
		return 0
	}
	return float64(h.ValueAtQuantile(q)) / 1000
}

type run struct {
	mix       *Mix
	mu        sync.Mutex
	hist      *hdrhistogram.Histogram
	per       []TargetResult
	stamps    []stats.Stamp
	kinds     map[string]int
	ok, errs  atomic.Int64
	cancelled atomic.Int64
	cancel    context.CancelFunc
	stalled   atomic.Bool
	startCPU  time.Duration
	start     time.Time
}

func (l *Loader) begin(ctx context.Context, mix *Mix) (*run, context.Context) {
	r := &run{mix: mix, hist: newHist(), kinds: map[string]int{}, startCPU: SelfCPU(), start: time.Now()}
	r.per = make([]TargetResult, len(mix.Targets))
	for i, t := range mix.Targets {
		r.per[i] = TargetResult{Method: t.Method, URL: t.URL, Status: map[string]int{}, hist: newHist()}
	}
	ctx, r.cancel = context.WithCancel(ctx)
	go l.watch(ctx, r)
	return r, ctx
}

// watch cancels the run when it stalls: in a window of l.Stall, fewer
// than l.MinRate completions per second (or none) while the probe's
// counters climb, or no completion at all for two windows. Near its memory
// limit a Go service rarely dies: it crawls, re-reading its own code pages.
func (l *Loader) watch(ctx context.Context, r *run) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	probe := func() (uint64, uint64) {
		if l.probe == nil {
			return 0, 0
		}
		return l.probe()
	}
	winStart, winDone := time.Now(), int64(0)
	f0, h0 := probe()
	last, lastAt := int64(0), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		done := r.ok.Load() + r.errs.Load()
		if done != last {
			last, lastAt = done, time.Now()
		}
		if time.Since(lastAt) > 2*l.Stall {
			r.stalled.Store(true)
			r.cancel()
			return
		}
		if el := time.Since(winStart); el >= l.Stall {
			f, h := probe()
			climbing := f > f0 || h > h0
			n := done - winDone
			if climbing && (n == 0 || float64(n)/el.Seconds() < l.MinRate) {
				r.stalled.Store(true)
				r.cancel()
				return
			}
			winStart, winDone, f0, h0 = time.Now(), done, f, h
		}
	}
}

// errCancelled is the kind of a request the window's end cut short.
const errCancelled = "cancelled"

// do sends one request to t; it returns "" on success, else what went
// wrong, naming the HTTP status when there was one, and the status code
// (0 without a response).
func (l *Loader) do(ctx context.Context, t *Target) (string, int) {
	req, err := newRequest(ctx, t)
	if err != nil {
		return err.Error(), 0
	}
	resp, err := l.client.Do(req)
	if err != nil {
		var ne interface{ Timeout() bool }
		switch {
		case ctx.Err() != nil:
			return errCancelled, 0
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Sprintf("timeout after %v", RequestTimeout), 0
		case errors.Is(err, syscall.ECONNREFUSED):
			return "connection refused", 0
		case errors.Is(err, syscall.ECONNRESET):
			return "connection reset", 0
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return "connection closed before the response", 0
		}
		// Name the system error when there is one (EMFILE, EADDRNOTAVAIL
		// on a loaded box), never the address: kinds are counted.
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return "transport error: " + errno.Error(), 0
		}
		return "transport error", 0
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 400:
		return "HTTP " + resp.Status, resp.StatusCode
	case err != nil && ctx.Err() != nil:
		return errCancelled, resp.StatusCode
	case err != nil:
		return "body cut short", resp.StatusCode
	}
	return "", resp.StatusCode
}

// record counts one request to target ti that took lat; at is its place
// in the window for the bootstrap blocks (the completion time in the
// closed loop, the intended send time in the open loop).
func (r *run) record(ti int, fail string, code int, at, lat time.Duration) {
	ok := fail == ""
	switch {
	case ok:
		r.ok.Add(1)
	case fail == errCancelled:
		r.cancelled.Add(1)
		r.errs.Add(1)
	default:
		r.errs.Add(1)
	}
	us := max(lat.Microseconds(), 1)
	status := fail
	if code != 0 {
		status = strconv.Itoa(code)
	}
	r.mu.Lock()
	if !ok {
		r.kinds[fail]++
	}
	r.hist.RecordValue(us)
	p := &r.per[ti]
	p.Requests++
	p.Status[status]++
	p.hist.RecordValue(us)
	r.stamps = append(r.stamps, stats.Stamp{At: at.Seconds(), Ms: float32(lat.Seconds() * 1000), OK: ok})
	r.mu.Unlock()
}

// result closes the run over a window of that length.
func (r *run) result(window time.Duration) Result {
	r.cancel()
	res := Result{
		Requests: int(r.ok.Load()), Errors: int(r.errs.Load()), Cancelled: int(r.cancelled.Load()), Duration: window, Seconds: window.Seconds(),
		GenCPUSec: (SelfCPU() - r.startCPU).Seconds(), Stalled: r.stalled.Load(),
	}
	if len(r.kinds) > 0 {
		res.ErrorKinds = r.kinds
	}
	if window > 0 {
		res.RPS = float64(res.Requests) / window.Seconds()
	}
	if r.hist.TotalCount() > 0 {
		res.P50, res.P90, res.P99, res.P999 = ms(r.hist, 50), ms(r.hist, 90), ms(r.hist, 99), ms(r.hist, 99.9)
		res.Max = float64(r.hist.Max()) / 1000
	}
	for i := range r.per {
		r.per[i].P50, r.per[i].P99 = ms(r.per[i].hist, 50), ms(r.per[i].hist, 99)
	}
	res.Targets = r.per
	res.Blocks = stats.BlocksOf(r.stamps, window.Seconds())
	return res
}

// Closed runs conc workers, each sending its next request when the
// previous one returns, until n requests were sent (n > 0) or d has passed
// (d > 0), whichever comes first. Requests go to the mix's targets in its
// schedule's order.
func (l *Loader) Closed(ctx context.Context, mix *Mix, n int, d time.Duration, conc int) Result {
	r, ctx := l.begin(ctx, mix)
	var next atomic.Int64
	var wg sync.WaitGroup
	conc = min(conc, l.MaxInFlight)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if n > 0 && i >= int64(n) {
					return
				}
				if d > 0 && time.Since(r.start) >= d {
					return
				}
				ti := mix.target(i)
				t0 := time.Now()
				fail, code := l.do(ctx, &mix.Targets[ti])
				now := time.Now()
				r.record(ti, fail, code, now.Sub(r.start), now.Sub(t0))
			}
		}()
	}
	wg.Wait()
	return r.result(time.Since(r.start))
}

// Open sends requests at a fixed rate for d. Each latency is measured from
// the request's intended send time, so a stalled target cannot hide its
// stall by slowing the generator down (coordinated omission).
func (l *Loader) Open(ctx context.Context, mix *Mix, rate float64, d time.Duration) Result {
	r, ctx := l.begin(ctx, mix)
	sem := make(chan struct{}, l.MaxInFlight)
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := int64(0); ; i++ {
		offset := time.Duration(i) * interval
		if offset >= d || ctx.Err() != nil {
			break
		}
		intended := r.start.Add(offset)
		if wait := time.Until(intended); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
		}
		ti := mix.target(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				// Never sent, yet due: it counts, cancelled, with the
				// time it waited.
				r.record(ti, errCancelled, 0, offset, time.Since(intended))
				return
			}
			defer func() { <-sem }()
			fail, code := l.do(ctx, &mix.Targets[ti])
			r.record(ti, fail, code, offset, time.Since(intended))
		}()
	}
	wg.Wait()
	// The window is the sending schedule: rps is what the target completed
	// of what was offered in it (late completions count; they were offered
	// inside the window).
	return r.result(min(d, time.Since(r.start)))
}
