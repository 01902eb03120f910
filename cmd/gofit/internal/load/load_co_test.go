package load

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// The open-loop generator times each request from when it should have been
// sent, so a target that stalls cannot hide the stall by holding the
// generator back (coordinated omission). A server stalls for 500ms: every
// request due during the stall waits until it ends, so their latencies
// spread evenly from 0 to 500ms, a third of all requests at 100/s for
// 1.5s. A generator that timed from the actual send (or a closed loop)
// would see one slow request and a p90 near zero.
func TestOpenLoopCountsTheStall(t *testing.T) {
	const (
		stallFrom = 300 * time.Millisecond
		stallLen  = 500 * time.Millisecond
	)
	var start time.Time
	ready := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-ready
		if since := time.Since(start); since >= stallFrom && since < stallFrom+stallLen {
			time.Sleep(stallFrom + stallLen - since)
		}
	}))
	defer srv.Close()
	l := NewLoader(4, nil)
	defer l.Close()
	start = time.Now()
	close(ready)
	res := l.Open(context.Background(), NewMix(Get(srv.URL, nil), 1), 100, 1500*time.Millisecond)
	if res.Errors > 0 || res.Requests < 140 {
		t.Fatalf("%d requests, %d errors; want about 150 without errors", res.Requests, res.Errors)
	}
	// Expected: p90 about 350ms (the 15 requests due in the stall's first
	// 150ms), max about 500ms. The bounds leave room for a slow machine.
	if res.P90 < 200 || res.Max < 400 {
		t.Errorf("p90 %.1fms, max %.1fms; want at least 200ms and 400ms: the stall was omitted", res.P90, res.Max)
	}
	if res.P50 > 100 {
		t.Errorf("p50 %.1fms: most requests were not delayed, want well under 100ms", res.P50)
	}
}

// The closed loop, by contrast, lets the stall hold it back: the one
// request in flight during a 500ms stall waits, and no others are sent, so
// the stall shows in one latency and not in p90. This is the omission the
// open loop avoids.
func TestClosedLoopOmitsTheStall(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 50 {
			time.Sleep(500 * time.Millisecond)
		}
	}))
	defer srv.Close()
	l := NewLoader(1, nil)
	defer l.Close()
	res := l.Closed(context.Background(), NewMix(Get(srv.URL, nil), 1), 200, 0, 1)
	if res.Requests != 200 || res.Max < 450 {
		t.Errorf("%d requests, max %.1fms: want 200 and the stalled one near 500ms", res.Requests, res.Max)
	}
	if res.P90 > 100 {
		t.Errorf("closed loop p90 %.1fms: expected the stall to show in one request only", res.P90)
	}
}
