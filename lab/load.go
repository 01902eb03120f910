package lab

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// LoadResult summarises one load run. Latencies are in milliseconds.
type LoadResult struct {
	Requests  int           `json:"requests"` // completed successfully
	Errors    int           `json:"errors"`
	Duration  time.Duration `json:"-"`
	Seconds   float64       `json:"seconds"`
	RPS       float64       `json:"rps"`
	P50       float64       `json:"p50_ms"`
	P90       float64       `json:"p90_ms"`
	P99       float64       `json:"p99_ms"`
	P999      float64       `json:"p999_ms"`
	Max       float64       `json:"max_ms"`
	GenCPUSec float64       `json:"generator_cpu_seconds"` // the lab's own CPU while it ran
	Stalled   bool          `json:"stalled"`
}

// StallProbe reports the counters that climb while a target thrashes near
// its memory limit (major faults, limit hits). It may be nil.
type StallProbe func() (faults, hits uint64)

// Loader drives HTTP load at a URL from outside the target's cgroup.
type Loader struct {
	client *http.Client
	probe  StallProbe
	// Stall is the window over which progress is judged, and MinRate the
	// completions per second below which a window counts as stalled while
	// the probe's counters climb (see watch).
	Stall   time.Duration
	MinRate float64
}

// NewLoader returns a Loader with keep-alive connections for conc workers.
func NewLoader(conc int, probe StallProbe) *Loader {
	tr := &http.Transport{MaxIdleConns: conc * 2, MaxIdleConnsPerHost: conc * 2, IdleConnTimeout: 30 * time.Second}
	return &Loader{client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, probe: probe, Stall: loadStallWindow}
}

// Close drops idle connections.
func (l *Loader) Close() { l.client.CloseIdleConnections() }

// loadStallWindow is the window of the stall rule during load.
const loadStallWindow = 2 * time.Second

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 120_000_000, 3) } // 1µs..120s

type run struct {
	mu        sync.Mutex
	hist      *hdrhistogram.Histogram
	ok, errs  atomic.Int64
	cancel    context.CancelFunc
	stalled   atomic.Bool
	startCPU  time.Duration
	startWall time.Time
}

func (l *Loader) begin(ctx context.Context) (*run, context.Context) {
	r := &run{hist: newHist(), startCPU: selfCPU(), startWall: time.Now()}
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

func (l *Loader) do(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode < 400
}

func (r *run) record(ok bool, lat time.Duration) {
	if !ok {
		r.errs.Add(1)
		return
	}
	r.ok.Add(1)
	r.mu.Lock()
	r.hist.RecordValue(max(lat.Microseconds(), 1))
	r.mu.Unlock()
}

func (r *run) result() LoadResult {
	r.cancel()
	d := time.Since(r.startWall)
	res := LoadResult{
		Requests: int(r.ok.Load()), Errors: int(r.errs.Load()), Duration: d, Seconds: d.Seconds(),
		GenCPUSec: (selfCPU() - r.startCPU).Seconds(), Stalled: r.stalled.Load(),
	}
	if d > 0 {
		res.RPS = float64(res.Requests) / d.Seconds()
	}
	ms := func(q float64) float64 { return float64(r.hist.ValueAtQuantile(q)) / 1000 }
	if r.hist.TotalCount() > 0 {
		res.P50, res.P90, res.P99, res.P999 = ms(50), ms(90), ms(99), ms(99.9)
		res.Max = float64(r.hist.Max()) / 1000
	}
	return res
}

// Closed sends n requests with conc workers, each sending its next request
// when the previous one returns: the published experiments' shape.
func (l *Loader) Closed(ctx context.Context, url string, n, conc int) LoadResult {
	r, ctx := l.begin(ctx)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				ok := l.do(ctx, url)
				if ctx.Err() != nil && !ok {
					return // cancelled, not failed
				}
				r.record(ok, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	return r.result()
}

// maxInFlight bounds the open loop's concurrent requests; a request that
// must wait for a slot is still timed from when it should have been sent.
const maxInFlight = 512

// Open sends requests at a fixed rate for d. Each latency is measured from
// the request's intended send time, so a stalled target cannot hide its
// stall by slowing the generator down (coordinated omission).
func (l *Loader) Open(ctx context.Context, url string, rate float64, d time.Duration) LoadResult {
	r, ctx := l.begin(ctx)
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		intended := start.Add(time.Duration(i) * interval)
		if intended.Sub(start) >= d || ctx.Err() != nil {
			break
		}
		if wait := time.Until(intended); wait > 0 {
			select {
			case <-time.After(wait):
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
				return
			}
			defer func() { <-sem }()
			ok := l.do(ctx, url)
			if ctx.Err() != nil && !ok {
				return
			}
			r.record(ok, time.Since(intended))
		}()
	}
	wg.Wait()
	return r.result()
}

// selfCPU is the CPU time the lab process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
