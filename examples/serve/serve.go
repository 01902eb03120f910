// Package serve is what gofit's example and sample services share: serving
// a handler until SIGTERM or SIGINT, and the /work handler that burns a
// known amount of CPU. examples/service and examples/offheap, the tools'
// plain and httpbin services, and the lab's sample and load pod serve
// through it. It imports only the standard library, so the library module
// stays light and the services that use it stay plain Go services.
package serve

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// UntilSignal serves h on addr until the process gets SIGTERM or SIGINT,
// then stops it as Serve does. A signal is a clean stop: it returns nil.
func UntilSignal(addr string, h http.Handler, grace time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return Serve(ctx, ln, h, grace)
}

// Serve serves h on ln until ctx is done. With grace > 0 the server then
// shuts down (no new connections; requests in flight get up to grace),
// with 0 it closes at once. It returns nil after a stop it was asked for,
// and the server's error otherwise.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		if grace <= 0 {
			srv.Close()
			return
		}
		shutdown, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Work burns CPU: ?n= rounds of SHA-256 over 1 KiB (default 2000, about
// 2ms), and answers the first 4 bytes of the last sum in hex. ?garbage=K
// also allocates K KiB (default 0, at most 4096) on the heap and writes
// every page of it, as a handler that decodes a body does: garbage once
// the next request replaces it, so the heap grows with the request rate
// until a GC runs (with GOGC=off and no GOMEMLIMIT, until the memory
// limit).
func Work(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 2000, 1_000_000)
	if !ok {
		return
	}
	kib, ok := intParam(w, r, "garbage", 0, 4096)
	if !ok {
		return
	}
	if kib > 0 {
		g := make([]byte, kib<<10)
		for i := 0; i < len(g); i += 4096 {
			g[i] = byte(i)
		}
		lastGarbage.Store(&g)
	}
	buf := make([]byte, 1024)
	var sum [32]byte
	for i := 0; i < n; i++ {
		sum = sha256.Sum256(buf)
		copy(buf, sum[:])
	}
	fmt.Fprintf(w, "%x\n", sum[:4])
}

// lastGarbage keeps the last request's garbage reachable until the next
// request, so that it is allocated on the heap, never on the stack.
var lastGarbage atomic.Pointer[[]byte]

// intParam reads the query parameter name as an integer from 0 to max
// (def when absent); out of range or not a number, it answers 400 naming
// it and reports false.
func intParam(w http.ResponseWriter, r *http.Request, name string, def, max int) (int, bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, true
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > max {
		http.Error(w, fmt.Sprintf("%s: want an integer from 0 to %d", name, max), http.StatusBadRequest)
		return 0, false
	}
	return v, true
}
