package result

import (
	"fmt"
	"strings"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/fit"
)

// NonGoLabel says what the probes measured, in a line.
func NonGoLabel(m *nongo.Measurement) string {
	if m == nil {
		return "not measured"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s outside the Go heap (%s anonymous, %s kernel, %s hot file pages) by %s",
		fit.FormatBytes(m.AnonBytes+m.KernelBytes+m.HotFile), fit.FormatBytes(m.AnonBytes), fit.FormatBytes(m.KernelBytes), fit.FormatBytes(m.HotFile), m.Method)
	if m.Bytes > 0 {
		fmt.Fprintf(&b, ", declared %s", nongo.Quantity(m.Bytes))
	} else {
		fmt.Fprintf(&b, ", not declared (anonymous under %s)", fit.FormatBytes(nongo.DeclareMin))
	}
	if !m.Trusted {
		b.WriteString("; NOT TRUSTED: " + strings.Join(m.Caveats, "; "))
	}
	return b.String()
}

// PeakLabel is the unlimited peak with the non-Go memory beside it, as the
// report shows them.
func PeakLabel(r *Results) string {
	s := fit.FormatBytes(int64(r.Target.PeakBytes))
	if m := r.Target.NonGo; m != nil && m.Bytes > 0 {
		s += fmt.Sprintf(", of which %s outside the Go heap (declared)", nongo.Quantity(m.Bytes))
	}
	return s
}
