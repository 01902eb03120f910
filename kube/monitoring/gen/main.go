// Command gen writes deploy/monitoring, and the Helm chart's copy of its
// objects (charts/gofit/files/monitoring), from kube/monitoring's defaults:
//
//	go run ./kube/monitoring/gen            # from the repository root
//	go run ./kube/monitoring/gen -out DIR -chart DIR
//
// Files it wrote before that it would not write now are removed.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gofit-dev/gofit/kube/monitoring"
)

func main() {
	out := flag.String("out", "deploy/monitoring", "directory to write")
	chart := flag.String("chart", "charts/gofit/files/monitoring", "the chart's copy of the objects (empty: none)")
	flag.Parse()
	if err := monitoring.Write(*out, monitoring.Default()); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	abs, _ := filepath.Abs(*out)
	fmt.Println("wrote", abs)
	if *chart == "" {
		return
	}
	if err := monitoring.WriteChart(*chart, monitoring.Default()); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	abs, _ = filepath.Abs(*chart)
	fmt.Println("wrote", abs)
}
