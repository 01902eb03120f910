// Command minimal is the smallest service gofit fits: the blank import of
// auto sets GOMAXPROCS and GOMEMLIMIT from the container's limits before
// main runs, and keeps them fitted while the limits change.
package main

import (
	"fmt"
	"log"
	"net/http"
	"runtime"
	"runtime/debug"

	_ "github.com/gofit-dev/gofit/auto"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "GOMAXPROCS=%d GOMEMLIMIT=%d\n", runtime.GOMAXPROCS(0), debug.SetMemoryLimit(-1))
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
