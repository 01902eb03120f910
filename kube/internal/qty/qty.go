// Package qty guards arithmetic on resource quantities taken from pods.
//
// A quantity such as "1e9999999920" parses in an instant, but comparing
// it with "8192" rescales one side by 10 to the power of the exponent
// gap: math/big then works for minutes on a number with billions of
// digits. Its Value and MilliValue are quick but wrong: 0. Anyone who can create a pod can write one, and
// the webhook and the node agent read every pod, so each figure passes
// Tame before any exact arithmetic.
package qty

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Tame reports whether q is zero or lies within 1e-300 and 1e300 in
// magnitude: then Cmp, Value and MilliValue work on numbers of a few
// hundred digits at most. Tiny figures never reach here: ParseQuantity
// rounds to nano (see Parse). AsApproximateFloat64 needs no rescaling, so
// the check itself costs the same for any exponent.
func Tame(q resource.Quantity) bool {
	if q.Sign() == 0 {
		return true
	}
	f := math.Abs(q.AsApproximateFloat64())
	return f >= 1e-300 && f <= 1e300
}

// exponent is a quantity's decimal exponent suffix, as in "5e-3".
var exponent = regexp.MustCompile(`[eE]([+-]?[0-9]+)$`)

// Parse is resource.ParseQuantity for text a tenant wrote, such as an
// annotation, that the API server has not parsed before us. ParseQuantity
// rounds "1e-9999999920" to nano by dividing by 10^9999999920, which takes
// minutes; Parse refuses an exponent beyond ±300 first, and the result is
// Tame.
func Parse(s string) (resource.Quantity, error) {
	if m := exponent.FindStringSubmatch(s); m != nil {
		if e, err := strconv.Atoi(m[1]); err != nil || e < -300 || e > 300 {
			return resource.Quantity{}, fmt.Errorf("quantity %q: exponent beyond ±300", s)
		}
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, err
	}
	if !Tame(q) {
		return resource.Quantity{}, fmt.Errorf("quantity %q: beyond 1e300", s)
	}
	return q, nil
}

// Stalls reports whether resource.ParseQuantity would take minutes over
// s: s ends in an exponent that ParseQuantity reads as below -300. It
// reads the exponent as an int64 and keeps its low 32 bits, so
// "1E06000020600000" counts as 10^-48712512, and it then rounds the
// figure to nano by dividing by a power of ten with that many digits.
func Stalls(s string) bool {
	i := strings.LastIndexAny(s, "eE")
	if i < 0 || i+1 >= len(s) {
		return false
	}
	e, err := strconv.ParseInt(s[i+1:], 10, 64)
	return err == nil && int32(e) < -300
}
