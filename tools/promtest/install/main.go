// Command install fetches the pinned Prometheus and promtool into the
// cache (tools/promtest) and prints where they are; .ci/run calls it
// so the time it takes shows apart from the tests.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gofit-dev/gofit/tools/promtest"
)

func main() {
	b, err := promtest.Install()
	if err != nil {
		fmt.Fprintln(os.Stderr, "promtest install:", err)
		os.Exit(1)
	}
	fmt.Println(filepath.Dir(b.Prometheus))
}
