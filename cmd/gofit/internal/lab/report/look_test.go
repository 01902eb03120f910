package report

import (
	"math"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

// ChartSVG draws what the lab's own plots draw: an inline figure named
// for its title, a legend with escaped names, NaN points left out.
func TestChartSVG(t *testing.T) {
	got := string(ChartSVG("p99 by arm", "minutes", "ms", true, []ChartLine{
		{Name: "control <a>", X: []float64{1, 2, 3}, Y: []float64{10, math.NaN(), 12}, Low: []float64{9, 0, 11}, High: []float64{11, 0, 13}},
		{Name: "gofit", X: []float64{1, 2, 3}, Y: []float64{8, 9, 10}},
	}))
	for _, want := range []string{`<figure class="plot">`, `aria-label="p99 by arm"`, "control &lt;a&gt;", "gofit", "<svg"} {
		if !strings.Contains(got, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if strings.Contains(got, "<a>") || strings.Contains(got, "NaN") {
		t.Errorf("chart has an unescaped name or a NaN point")
	}
}

// report.html carries the exported stylesheet, so reports that use CSS
// look like it.
func TestHTMLUsesCSS(t *testing.T) {
	b, err := renderHTML(&result.Results{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<style>\n"+CSS+"</style>") {
		t.Error("report.html does not carry report.CSS")
	}
}
