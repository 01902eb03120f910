package lab

import (
	"crypto/sha256"
	"expvar"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/examples/serve"
)

// The embedded sample service: an HTTP handler shaped like a typical API,
// with /debug/vars and /metrics.
// Each /work request does about 1ms of CPU work (SHA-256 rounds), allocates
// 128 KiB of garbage, waits 2ms as if on a backend, and replies. The
// process keeps a 24 MiB live set (a cache) for its whole life.
const (
	sampleLiveSet   = 24 << 20
	sampleGarbage   = 128 << 10
	sampleHashLoops = 400
	sampleIOWait    = 2 * time.Millisecond
)

// SampleCommand is the gofit subcommand that serves the sample.
const SampleCommand = trial.SampleCommand

var sampleCache [][]byte

// ServeSample runs the sample service on addr until SIGTERM or SIGINT.
func ServeSample(addr string) error {
	for i := 0; i < sampleLiveSet>>20; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(i + j)
		}
		sampleCache = append(sampleCache, b)
	}
	expvar.Publish("sample", expvar.Func(sampleVars))
	mux := http.NewServeMux()
	mux.HandleFunc("/work", sampleWork)
	mux.Handle("/debug/vars", expvar.Handler())
	// /metrics as a Go service scraped by Prometheus has them
	// (client_golang's Go and process collectors): gofit fleet reads the
	// sample like any other (its ground truth, docs/results/fleet.md).
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return serve.UntilSignal(addr, mux, 0)
}

func sampleWork(w http.ResponseWriter, r *http.Request) {
	garbage := make([]byte, sampleGarbage)
	for i := 0; i < len(garbage); i += 4096 {
		garbage[i] = byte(i)
	}
	sum := sha256.Sum256(garbage[:1024])
	for i := 0; i < sampleHashLoops; i++ {
		sum = sha256.Sum256(append(sum[:], sampleCache[i%len(sampleCache)][:992]...))
	}
	time.Sleep(sampleIOWait)
	fmt.Fprintf(w, "%x\n", sum[:4])
}

var sampleMetrics = []metrics.Sample{
	{Name: "/cpu/classes/gc/total:cpu-seconds"},
	{Name: "/cpu/classes/total:cpu-seconds"},
	{Name: "/cpu/classes/idle:cpu-seconds"},
}

func sampleVars() any {
	s := make([]metrics.Sample, len(sampleMetrics))
	copy(s, sampleMetrics)
	metrics.Read(s)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return sandbox.RuntimeVars{
		GoVersion:       runtime.Version(),
		GOMAXPROCS:      runtime.GOMAXPROCS(0),
		GOMEMLIMIT:      debug.SetMemoryLimit(-1),
		GCCPUSeconds:    s[0].Value.Float64(),
		TotalCPUSeconds: s[1].Value.Float64(),
		IdleCPUSeconds:  s[2].Value.Float64(),
		GCCPUFraction:   ms.GCCPUFraction,
		NumGC:           ms.NumGC,
	}
}
