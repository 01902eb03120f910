// Command httpbin is go-httpbin (github.com/mccutchen/go-httpbin) as a
// team would run it in a cluster: its handlers, and /metrics from
// client_golang's Go and process collectors, nothing of gofit. gofit
// fleet's ground truth (tools/groundtruth) runs it beside the lab's
// sample.
//
//	go run ./tools/groundtruth/httpbin -addr 127.0.0.1:8080
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/gofit-dev/gofit/examples/serve"
	"github.com/mccutchen/go-httpbin/v2/httpbin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen `ADDR`")
	flag.Parse()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", httpbin.New())
	if err := serve.UntilSignal(*addr, mux, 5*time.Second); err != nil {
		log.Fatal(err)
	}
}
