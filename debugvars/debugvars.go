// Package debugvars publishes gofit's report (the container's limits, its
// usage and the plan, as `gofit inspect --json` prints it) as the expvar
// "gofit". It is opt-in: importing expvar registers /debug/vars on
// http.DefaultServeMux, which shows the command line and memory statistics
// to anyone who can reach a server using that mux, so only programs that
// want it should link it.
//
//	if err := debugvars.Publish(auto.Fitter()); err != nil { ... }
//	mux.Handle("/debug/vars", expvar.Handler())
package debugvars

import (
	"errors"
	"expvar"
	"fmt"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/report"
)

// Name is the expvar name Publish uses.
const Name = "gofit"

// ErrTaken is returned when another variable already has the name.
var ErrTaken = errors.New("expvar name already published")

// Publish publishes f's report as the expvar Name. Where expvar.Publish
// panics on a name already taken, Publish returns an error wrapping
// ErrTaken. A nil f (gofit not active) is an error too.
func Publish(f *gofit.Fitter) (err error) {
	if f == nil {
		return errors.New("debugvars: gofit is not active")
	}
	if expvar.Get(Name) != nil {
		return fmt.Errorf("debugvars: %q: %w", Name, ErrTaken)
	}
	defer func() {
		// Another goroutine may publish the name between Get and Publish.
		if r := recover(); r != nil {
			err = fmt.Errorf("debugvars: %q: %w (%v)", Name, ErrTaken, r)
		}
	}()
	expvar.Publish(Name, expvar.Func(func() any { return Report(f) }))
	return nil
}

// Report is what Publish shows: f's report, or {"error": ...} when the
// cgroup's statistics cannot be read.
func Report(f *gofit.Fitter) any {
	s, err := f.Cgroups().Stats()
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	return report.New(f.Cgroups(), f.Limits(), s, f.Input(), f.Plan())
}
