package result

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// millicores writes cores as Kubernetes does: 0.25 is "250m".
func Millicores(c float64) string { return fmt.Sprintf("%dm", int(math.Round(c*1000))) }

// cpuLabel is a CPU limit as millicores, or "no" for none.
func CPULabel(c float64) string {
	if c == 0 {
		return "no"
	}
	return Millicores(c)
}

// rowLabel names a CPU study row: its quota, or for the request row (q 0)
// the request without a limit.
func RowLabel(q, request float64) string {
	if q == 0 {
		return "no limit, request " + Millicores(request)
	}
	return Millicores(q)
}

// requestOf is the request of the CPU study's request row, 0 if none ran.
func RequestCores(ss []CPUSummary) float64 {
	for _, s := range ss {
		if s.QuotaCores == 0 && s.RequestCores > 0 {
			return s.RequestCores
		}
	}
	return 0
}

// label names a summary row with every setting it stands for.
func SummaryLabel(s CPUSummary) string {
	return strings.Join(append([]string{s.Setting}, s.SameAs...), " = ")
}

// settingRank orders the CPU settings as tables and plots list them:
// the baseline first, then gofit.
func SettingRank(s string) int {
	switch s {
	case SetGoDefault:
		return 0
	case SetGofit:
		return 1
	case SetProcs1:
		return 2
	}
	return 3
}

// pctLevels are the HDR-style percentiles of the latency plot.
var PercentileLevels = []float64{50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99}

// cpuList writes CPU numbers as a list: "0,1,3".
func CPUList(cs []int) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
