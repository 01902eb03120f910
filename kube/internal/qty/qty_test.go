package qty

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestTame(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "250m": true, "1Gi": true, "16Ei": true, "-1": true, "1e300": true, "-1e300": true,
		"1e9999999920": false, "-1e9999999920": false, "1e301": false, "-1e301": false,
	} {
		if got := Tame(resource.MustParse(s)); got != want {
			t.Errorf("Tame(%s) = %v, want %v", s, got, want)
		}
	}
}

// TestParseRefusesHugeExponents fails by timing out without the exponent
// check: ParseQuantity itself stalls on the tiny ones.
func TestParseRefusesHugeExponents(t *testing.T) {
	for _, s := range []string{"1e-9999999920", "1E9999999920", "5e+301", "1e99999999999999999999"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted it", s)
		}
	}
	for s, want := range map[string]int64{"64Mi": 64 << 20, "1e3": 1000, "5E2": 500, "1Ei": 1 << 60, "1E": 1e18, "2e-0": 2} {
		q, err := Parse(s)
		if err != nil || q.Value() != want {
			t.Errorf("Parse(%q) = %v, %v; want %d", s, q.Value(), err, want)
		}
	}
}

func TestStalls(t *testing.T) {
	for s, want := range map[string]bool{
		"1e-301": true, "1E06000020600000": true, "5e-9999999920": true, "1e-300": false, "1e9999999920": false,
		"1e99999999999999999999": false, "64Mi": false, "1e": false, "e-999": true, "1e-x": false, "": false,
	} {
		if got := Stalls(s); got != want {
			t.Errorf("Stalls(%q) = %v, want %v", s, got, want)
		}
	}
}
