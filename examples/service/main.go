// Command service is a small HTTP service fitted by gofit: importing auto
// sets GOMAXPROCS and GOMEMLIMIT from the container's limits before main,
// /metrics shows the limits, the throttling and the plan, and /debug/vars
// the report (published explicitly with debugvars, on this server's own mux).
//
//	go run ./examples/service -addr 127.0.0.1:8080
//	curl -s 127.0.0.1:8080/work; curl -s 127.0.0.1:8080/metrics | grep ^gofit_
package main

import (
	"expvar"
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gofit-dev/gofit/auto"
	"github.com/gofit-dev/gofit/debugvars"
	"github.com/gofit-dev/gofit/examples/serve"
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
	mux.Handle("/work", timed(reg, "/work", http.HandlerFunc(serve.Work)))

	log.Printf("listening on %s", *addr)
	if err := serve.UntilSignal(*addr, mux, 5*time.Second); err != nil {
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
