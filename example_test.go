package gofit_test

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/fit"
)

// Start fits the process now and keeps it fitted until Stop; every option
// has a default.
func ExampleStart() {
	ctx := context.Background()
	f, err := gofit.Start(ctx,
		gofit.WithLogger(slog.Default()), // silent by default
		gofit.WithMemoryRatio(0.85),      // default 0.9
		gofit.WithRounding(fit.Ceil),     // default fit.Floor
		gofit.WithRefresh(time.Second),   // default 1s, at least 100ms (gofit.MinRefresh)
		gofit.WithGOGC("off"),            // opt in: GOGC with GOMEMLIMIT
		gofit.WithCPURequestFactor(1),    // opt in: no CPU limit, GOMAXPROCS from the request
	)
	if err != nil {
		// not in a cgroup, GOFIT off (gofit.ErrDisabled), a bad option: nothing changed
		log.Print(err)
		return
	}
	defer f.Stop() // stops following and restores what Start found
}

// WithPolicy takes the policy's options as a program's own flags or the
// GOFIT_* variables give them, checked as gofit run and the webhook check
// theirs.
func ExampleWithPolicy() {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	policyFlags := fit.BindFlags(fs) // --memory-ratio, --ceil, --gogc, --cpu-request-factor, --cpu-request-min
	fs.Parse(os.Args[1:])
	opts, err := policyFlags.Options() // or fit.ReadEnv(os.LookupEnv)
	if err != nil {
		log.Fatal(err) // names the flag: "--memory-ratio: bad option: memory ratio 2: ..."
	}
	f, err := gofit.Start(context.Background(), gofit.WithPolicy(opts))
	if err != nil {
		log.Print(err)
		return
	}
	defer f.Stop()
}
