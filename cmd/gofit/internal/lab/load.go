package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// LoadResult summarises one load window. Latencies are in milliseconds and
// cover every request sent: failed and cancelled ones count with the time
// they took (a request cut short by the window's end took at least that
// long), so a setting cannot look fast by failing.
type LoadResult struct {
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
	GenCPUSec  float64        `json:"generator_cpu_seconds"` // the lab's own CPU while it ran
	Stalled    bool           `json:"stalled"`
	Blocks     []Block        `json:"-"`
}

// ErrorSummary names the commonest error, e.g. `12 × HTTP 500 Internal
// Server Error`, or "" when there was none.
func (r LoadResult) ErrorSummary() string {
	type kv struct {
		k string
		n int
	}
	var kinds []kv
	for k, n := range r.ErrorKinds {
		kinds = append(kinds, kv{k, n})
	}
	sort.Slice(kinds, func(i, j int) bool {
		return kinds[i].n > kinds[j].n || kinds[i].n == kinds[j].n && kinds[i].k < kinds[j].k
	})
	var parts []string
	for _, e := range kinds {
		parts = append(parts, fmt.Sprintf("%d × %s", e.n, e.k))
	}
	return strings.Join(parts, ", ")
}

// StallProbe reports the counters that climb while a target thrashes near
// its memory limit (major faults, limit hits). It may be nil.
type StallProbe func() (faults, hits uint64)

// Loader drives HTTP load at a URL from outside the target's cgroup.
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

// NewLoader returns a Loader for up to maxInFlight concurrent requests.
func NewLoader(maxInFlight int, probe StallProbe) *Loader {
	maxInFlight = max(maxInFlight, 1)
	tr := &http.Transport{MaxIdleConns: maxInFlight, MaxIdleConnsPerHost: maxInFlight, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	return &Loader{client: &http.Client{Transport: tr, Timeout: requestTimeout}, probe: probe, MaxInFlight: maxInFlight, Stall: loadStallWindow}
}

// Close drops idle connections.
func (l *Loader) Close() { l.client.CloseIdleConnections() }

const (
	// loadStallWindow is the window of the stall rule during load.
	loadStallWindow = 2 * time.Second
	requestTimeout  = 10 * time.Second
	// maxOpenInFlight bounds the open loop's concurrent requests; a request
	// that must wait for a slot is still timed from when it should have
	// been sent.
	maxOpenInFlight = 256
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 120_000_000, 3) } // 1µs..120s

type run struct {
	mu        sync.Mutex
	hist      *hdrhistogram.Histogram
	stamps    []stamp
	kinds     map[string]int
	ok, errs  atomic.Int64
	cancelled atomic.Int64
	cancel    context.CancelFunc
	stalled   atomic.Bool
	startCPU  time.Duration
	start     time.Time
	last      time.Time
}

func (l *Loader) begin(ctx context.Context) (*run, context.Context) {
	r := &run{hist: newHist(), kinds: map[string]int{}, startCPU: selfCPU(), start: time.Now()}
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

// do sends one request; it returns "" on success, else what went wrong,
// naming the HTTP status when there was one.
func (l *Loader) do(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := l.client.Do(req)
	if err != nil {
		var ne interface{ Timeout() bool }
		switch {
		case ctx.Err() != nil:
			return errCancelled
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Sprintf("timeout after %v", requestTimeout)
		case errors.Is(err, syscall.ECONNREFUSED):
			return "connection refused"
		case errors.Is(err, syscall.ECONNRESET):
			return "connection reset"
		}
		return "transport error"
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return "HTTP " + resp.Status
	}
	return ""
}

const errCancelled = "cancelled"

// record counts one request that took lat; at is its place in the window
// for the bootstrap blocks (the completion time in the closed loop, the
// intended send time in the open loop).
func (r *run) record(fail string, at time.Duration, lat time.Duration) {
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
	r.mu.Lock()
	if !ok {
		r.kinds[fail]++
	}
	r.hist.RecordValue(max(lat.Microseconds(), 1))
	r.stamps = append(r.stamps, stamp{at: at.Seconds(), ms: float32(lat.Seconds() * 1000), ok: ok})
	if now := time.Now(); now.After(r.last) {
		r.last = now
	}
	r.mu.Unlock()
}

// result closes the run. The window ends at end (the load's own end: the
// last completion in the closed loop, the last intended send plus the
// drain in the open loop).
func (r *run) result(window time.Duration) LoadResult {
	r.cancel()
	res := LoadResult{
		Requests: int(r.ok.Load()), Errors: int(r.errs.Load()), Cancelled: int(r.cancelled.Load()), Duration: window, Seconds: window.Seconds(),
		GenCPUSec: (selfCPU() - r.startCPU).Seconds(), Stalled: r.stalled.Load(),
	}
	if len(r.kinds) > 0 {
		res.ErrorKinds = r.kinds
	}
	if window > 0 {
		res.RPS = float64(res.Requests) / window.Seconds()
	}
	ms := func(q float64) float64 { return float64(r.hist.ValueAtQuantile(q)) / 1000 }
	if r.hist.TotalCount() > 0 {
		res.P50, res.P90, res.P99, res.P999 = ms(50), ms(90), ms(99), ms(99.9)
		res.Max = float64(r.hist.Max()) / 1000
	}
	res.Blocks = blocksOf(r.stamps, window.Seconds())
	return res
}

// Closed runs conc workers, each sending its next request when the
// previous one returns, until n requests were sent (n > 0) or d has passed
// (d > 0), whichever comes first.
func (l *Loader) Closed(ctx context.Context, url string, n int, d time.Duration, conc int) LoadResult {
	r, ctx := l.begin(ctx)
	var next atomic.Int64
	var wg sync.WaitGroup
	conc = min(conc, l.MaxInFlight)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if n > 0 && next.Add(1) > int64(n) {
					return
				}
				if d > 0 && time.Since(r.start) >= d {
					return
				}
				t0 := time.Now()
				fail := l.do(ctx, url)
				now := time.Now()
				r.record(fail, now.Sub(r.start), now.Sub(t0))
			}
		}()
	}
	wg.Wait()
	window := time.Since(r.start)
	return r.result(window)
}

// Open sends requests at a fixed rate for d. Each latency is measured from
// the request's intended send time, so a stalled target cannot hide its
// stall by slowing the generator down (coordinated omission).
func (l *Loader) Open(ctx context.Context, url string, rate float64, d time.Duration) LoadResult {
	r, ctx := l.begin(ctx)
	sem := make(chan struct{}, l.MaxInFlight)
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				// Never sent, yet due: it counts, cancelled, with the
				// time it waited.
				r.record(errCancelled, offset, time.Since(intended))
				return
			}
			defer func() { <-sem }()
			fail := l.do(ctx, url)
			r.record(fail, offset, time.Since(intended))
		}()
	}
	wg.Wait()
	// The window is the sending schedule: rps is what the target completed
	// of what was offered in it (late completions count; they were offered
	// inside the window).
	window := min(d, time.Since(r.start))
	return r.result(window)
}

// selfCPU is the CPU time the lab process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
