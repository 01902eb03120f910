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
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/gofit-dev/gofit/examples/serve"
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
	mux.Handle("/work", promhttp.InstrumentHandlerDuration(latency, http.HandlerFunc(serve.Work)))

	if err := serve.UntilSignal(*addr, mux, 5*time.Second); err != nil {
		log.Fatal(err)
	}
}
