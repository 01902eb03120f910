package fit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

func fmtCores(c float64) string { return strconv.FormatFloat(c, 'f', -1, 64) }

// ParseMemLimit parses a GOMEMLIMIT value as Go's runtime does: an integer
// number of bytes with an optional B, KiB, MiB, GiB or TiB suffix, or "off"
// (returned as 0). The runtime treats an empty GOMEMLIMIT as unset; that is
// for the caller to decide, so "" is an error here.
func ParseMemLimit(s string) (int64, error) {
	if s == "off" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	num := s
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("not a byte count (want e.g. 900MiB, 1GiB, 943718400 or off)")
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("too large")
	}
	return v * mult, nil
}

// FormatBytes renders bytes in the largest binary unit that keeps it exact
// to one decimal, as people write memory limits: "100MiB", "1.5GiB".
func FormatBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return trimFloat(float64(b)/(1<<30)) + "GiB"
	case b >= 1<<20:
		return trimFloat(float64(b)/(1<<20)) + "MiB"
	case b >= 1<<10:
		return trimFloat(float64(b)/(1<<10)) + "KiB"
	}
	return strconv.FormatInt(b, 10) + "B"
}

func trimFloat(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) }

// FormatMemLimit renders a GOMEMLIMIT for the environment: exact bytes, so
// that what the runtime gets is what the plan says.
func FormatMemLimit(bytes int64) string { return strconv.FormatInt(bytes, 10) }
