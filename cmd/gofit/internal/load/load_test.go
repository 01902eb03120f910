package load

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A slow target under an open loop keeps many requests in flight; the
// pool must keep as many idle connections, or requests pay for new TCP
// connections inside their latency.
func TestOpenLoopReusesConnections(t *testing.T) {
	var conns, inFlight, peak atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(40 * time.Millisecond)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	ld := NewLoader(MaxOpenInFlight, nil)
	defer ld.Close()
	// 500 rps × 40 ms ≈ 20 in flight, above the old pool of 32 only in
	// bursts; 1000 rps keeps ~40 in flight, over it all the time.
	r := ld.Open(context.Background(), NewMix(Get(srv.URL, nil), 1), 1000, 1500*time.Millisecond)
	if r.Errors > 0 {
		t.Fatalf("%d errors: %s", r.Errors, r.ErrorSummary())
	}
	// Each connection serves one request at a time, so a pool that keeps
	// its idle connections opens about as many as were ever in flight at
	// once (a loaded machine raises both alike); one that drops them opens
	// one per request or so. The slack covers requests that were dialled
	// but had not reached the handler when the peak was counted.
	if n, p := conns.Load(), peak.Load(); n > 2*p+20 {
		t.Errorf("%d connections opened for %d requests with at most %d in flight: idle connections are being dropped", n, r.Requests, p)
	}
}

// Requests cut short when the load stops (a stall, Ctrl-C) count, as
// cancelled errors with the time they had taken, in the latencies too.
func TestCancelledRequestsCount(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	ld := NewLoader(4, nil)
	defer ld.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := ld.Closed(ctx, NewMix(Get(srv.URL, nil), 1), 0, 5*time.Second, 4)
	if r.Cancelled != 4 || r.Errors != 4 {
		t.Errorf("cancelled %d, errors %d; want the 4 in-flight requests counted", r.Cancelled, r.Errors)
	}
	n := 0
	for _, b := range r.Blocks {
		n += len(b.Lat)
	}
	if n != 4 || r.P99 < 250 {
		t.Errorf("%d latencies, p99 %.0fms; want 4 of at least 250ms", n, r.P99)
	}
}

func TestErrorsNameTheHTTPStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	ld := NewLoader(2, nil)
	defer ld.Close()
	r := ld.Closed(context.Background(), NewMix(Get(srv.URL, nil), 1), 20, 0, 2)
	if r.Errors != 20 || r.Requests != 0 || r.ErrorKinds["HTTP 500 Internal Server Error"] != 20 {
		t.Errorf("errors %d ok %d kinds %v", r.Errors, r.Requests, r.ErrorKinds)
	}
	if !strings.Contains(r.ErrorSummary(), "20 × HTTP 500 Internal Server Error") {
		t.Errorf("summary %q", r.ErrorSummary())
	}
}

// A server that closes the connection without answering is named so, not
// lumped in with every other transport error.
func TestErrorsNameAClosedConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	defer srv.Close()
	ld := NewLoader(1, nil)
	defer ld.Close()
	r := ld.Closed(context.Background(), NewMix(Get(srv.URL, nil), 1), 5, 0, 1)
	if r.ErrorKinds["connection closed before the response"] != 5 {
		t.Errorf("error kinds %v", r.ErrorKinds)
	}
}
