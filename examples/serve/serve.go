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
// 2ms), and answers the first 4 bytes of the last sum in hex.
func Work(w http.ResponseWriter, r *http.Request) {
	n := 2000
	if s := r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > 1_000_000 {
			http.Error(w, "n: want an integer from 0 to 1000000", http.StatusBadRequest)
			return
		}
		n = v
	}
	buf := make([]byte, 1024)
	var sum [32]byte
	for i := 0; i < n; i++ {
		sum = sha256.Sum256(buf)
		copy(buf, sum[:])
	}
	fmt.Fprintf(w, "%x\n", sum[:4])
}
