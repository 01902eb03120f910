// Command plainservice is a small HTTP service that gofit does not fit: it
// links client_golang, whose default Go collector exports
// go_sched_gomaxprocs_threads, go_gc_gomemlimit_bytes, go_gc_gogc_percent
// and the heap and GC metrics, and nothing of gofit. The monitoring tests
// (kube/monitoring) scrape it as the unfitted Go service every cluster
// has; it serves the same /work and latency histogram as
// examples/service, so the two compare under one load.
//
//	go run ./tools/promtest/plainservice -addr 127.0.0.1:8080
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "http_request_duration_seconds",
		Help:        "Time to answer an HTTP request.",
		ConstLabels: prometheus.Labels{"handler": "/work"},
		Buckets:     []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"code"})
	reg.MustRegister(latency)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/work", promhttp.InstrumentHandlerDuration(latency, http.HandlerFunc(work)))

	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// work burns CPU: ?n= rounds of SHA-256 over 1 KiB (default 2000, about 2ms).
func work(w http.ResponseWriter, r *http.Request) {
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
