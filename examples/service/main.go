// Command service is a small HTTP service fitted by gofit: importing auto
// sets GOMAXPROCS and GOMEMLIMIT from the container's limits before main,
// /metrics shows the limits, the throttling and the plan, and /debug/vars
// the report (published explicitly with debugvars, on this server's own mux).
//
//	go run ./examples/service -addr 127.0.0.1:8080
//	curl -s 127.0.0.1:8080/work; curl -s 127.0.0.1:8080/metrics | grep ^gofit_
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"expvar"
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

	"github.com/gofit-dev/gofit/auto"
	"github.com/gofit-dev/gofit/debugvars"
	"github.com/gofit-dev/gofit/metrics"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Parse()

	if err := debugvars.Publish(auto.Fitter()); err != nil {
		log.Printf("no /debug/vars report: %v", err) // gofit not active here
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(auto.Fitter()), collectors.NewGoCollector())

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// process_cpu_seconds_total is there with gofit off too (GOFIT=off,
	// an experiment's arm), where gofit's own CPU figures are not.
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux.Handle("/debug/vars", expvar.Handler())
	mux.Handle("/work", timed(reg, "/work", http.HandlerFunc(work)))

	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("listening on %s", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// timed records h's latency in the service's own histogram, whose
// percentiles the workload dashboard in deploy/monitoring shows next to the
// throttling (its name is the dashboard's latency_metric variable).
func timed(reg prometheus.Registerer, handler string, h http.Handler) http.Handler {
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "http_request_duration_seconds",
		Help:        "Time to answer an HTTP request.",
		ConstLabels: prometheus.Labels{"handler": handler},
		Buckets:     []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"code"})
	reg.MustRegister(latency)
	return promhttp.InstrumentHandlerDuration(latency, h)
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
