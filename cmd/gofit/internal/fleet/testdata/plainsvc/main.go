// Command plainsvc is a Go service as most are: it links client_golang
// and serves its default metrics, and knows nothing of gofit (no
// GOMEMLIMIT, GOMAXPROCS as the environment gives it). Its background
// work keeps -workers goroutines busy in bursts, as a request fan-out
// would, and keeps a live heap of -live bytes with garbage churning
// around it. TestRealFleet scrapes it with a real Prometheus.
package main

import (
	"crypto/sha256"
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// kept holds the live heap for the life of the process; sink takes the
// requests' garbage, which escapes to the heap as a real handler's does.
var (
	kept [][]byte
	sink []byte
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	workers := flag.Int("workers", 4, "goroutines working in each burst")
	burst := flag.Duration("burst", 20*time.Millisecond, "CPU each worker burns per 100ms")
	live := flag.Int("live", 32<<20, "bytes of live heap to keep")
	flag.Parse()

	for range *live >> 16 {
		b := make([]byte, 1<<16)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // resident, as live data is
		}
		kept = append(kept, b)
	}
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			for range *workers {
				go func() {
					end := time.Now().Add(*burst)
					sum := sha256.Sum256(nil)
					for time.Now().Before(end) {
						buf := make([]byte, 4096)
						copy(buf, sum[:])
						sum = sha256.Sum256(buf)
						// Garbage for the GC, a few MB/s: GCs run well inside
						// the test's minute, so the heap goal they set is the
						// live heap's and not the one left from building it
						// (the runtime forces one only every 2 minutes).
						sink = make([]byte, 256)
					}
				}()
			}
		}
	}()
	http.Handle("/metrics", promhttp.Handler())
	log.Printf("live heap %d bytes in %d blocks", *live, len(kept))
	log.Fatal(http.ListenAndServe(*addr, nil))
}
