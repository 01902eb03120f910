package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The report's plots are drawn with gonum/plot into SVG and inlined, so
// report.html stays one offline file.

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
}

// pt is one plotted point: y with an interval lo..hi (lo = hi = y for
// none). sat marks a saturated open-loop cell: ringed, and named in the
// legend, since its latency is a queue's.
type pt struct {
	x, y, lo, hi float64
	sat          bool
}

type line struct {
	name string
	pts  []pt
}

// errPts adapts points for plotter.YErrorBars.
type errPts []pt

func (e errPts) Len() int                    { return len(e) }
func (e errPts) XY(i int) (float64, float64) { return e[i].x, e[i].y }
func (e errPts) YError(i int) (float64, float64) {
	return e[i].y - e[i].lo, e[i].hi - e[i].y
}

type axisSpec struct {
	label string
	log   bool
	ticks []plot.Tick // nil: the default ticker
	min   float64     // 0: from the data
	max   float64
}

// chartSVG draws lines with interval whiskers. The y range comes from the
// points themselves, not the whiskers: a whisker reaching past the range
// is cut at its edge (marked with a cap), so one wide interval cannot
// flatten every line onto the floor.
func chartSVG(title string, x, y axisSpec, lines []line) string {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = x.label, y.label
	var ymin, ymax = math.Inf(1), math.Inf(-1)
	var xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, q := range l.pts {
			if y.log && q.y <= 0 {
				continue
			}
			ymin, ymax = math.Min(ymin, q.y), math.Max(ymax, q.y)
			xmin, xmax = math.Min(xmin, q.x), math.Max(xmax, q.x)
		}
	}
	if math.IsInf(ymin, 1) {
		return fmt.Sprintf(`<figure class="plot"><figcaption>%s: no data</figcaption></figure>`, title)
	}
	// Room for whiskers, bounded: at most 3× (log) or half the range
	// (linear) beyond the points.
	if y.log {
		lo, hi := ymin, ymax
		for _, l := range lines {
			for _, q := range l.pts {
				if q.lo > 0 {
					lo = math.Min(lo, q.lo)
				}
				hi = math.Max(hi, q.hi)
			}
		}
		ymin, ymax = math.Max(lo, ymin/3)/1.15, math.Min(hi, ymax*3)*1.15
	} else {
		span := math.Max(ymax-ymin, ymax*0.1)
		hi, lo := ymax, ymin
		for _, l := range lines {
			for _, q := range l.pts {
				hi, lo = math.Max(hi, q.hi), math.Min(lo, q.lo)
			}
		}
		ymax = math.Min(hi, ymax+span/2) + span*0.08
		ymin = math.Max(0, math.Max(lo, ymin-span/2)-span*0.08)
		if y.min == 0 && ymin < ymax*0.35 {
			ymin = 0
		}
	}
	if y.min != 0 || y.max != 0 {
		ymin, ymax = y.min, y.max
	}
	if ymax <= ymin {
		ymax = ymin*1.1 + 1
	}
	p.Y.Min, p.Y.Max = ymin, ymax
	if y.log {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	} else {
		p.Y.Tick.Marker = linTicks{}
	}
	if x.log {
		p.X.Scale = plot.LogScale{}
	}
	if x.ticks != nil {
		p.X.Tick.Marker = plot.ConstantTicks(x.ticks)
	}
	if xmax == xmin {
		xmin, xmax = xmin*0.8, xmax*1.25
	} else if x.log {
		xmin, xmax = xmin/1.15, xmax*1.15
	} else {
		pad := (xmax - xmin) * 0.04
		xmin, xmax = xmin-pad, xmax+pad
	}
	if x.min != 0 || x.max != 0 {
		xmin, xmax = x.min, x.max
	}
	p.X.Min, p.X.Max = xmin, xmax
	p.Add(plotter.NewGrid())
	// The legend is HTML above the plot: inside it, it would cover data.
	var legend []string
	for i, l := range lines {
		pts := append(errPts(nil), l.pts...)
		sort.Slice(pts, func(a, b int) bool { return pts[a].x < pts[b].x })
		var kept errPts
		for _, q := range pts {
			if y.log && q.y <= 0 {
				continue
			}
			// Cut whiskers at the plot's edges.
			q.lo, q.hi = math.Max(q.lo, ymin), math.Min(q.hi, ymax)
			q.lo, q.hi = math.Min(q.lo, q.y), math.Max(q.hi, q.y)
			kept = append(kept, q)
		}
		if len(kept) == 0 {
			continue
		}
		c := palette[i%len(palette)]
		ln, sc, err := plotter.NewLinePoints(kept)
		if err != nil {
			continue
		}
		ln.Color, ln.Width = c, vg.Points(1.8)
		if i >= len(palette) {
			ln.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		sc.Color, sc.Shape, sc.Radius = c, shapes[i%len(shapes)], vg.Points(3)
		eb, err := plotter.NewYErrorBars(kept)
		if err == nil {
			eb.Color, eb.CapWidth = c, vg.Points(6)
			p.Add(eb)
		}
		p.Add(ln, sc)
		r, g, b, _ := c.RGBA()
		legend = append(legend, fmt.Sprintf(`<span class="key"><span class="sw" style="background:#%02x%02x%02x"></span>%s %s</span>`, r>>8, g>>8, b>>8, glyphNames[i%len(glyphNames)], template.HTMLEscapeString(l.name)))
	}
	var sat plotter.XYs
	for _, l := range lines {
		for _, q := range l.pts {
			if q.sat && !(y.log && q.y <= 0) {
				sat = append(sat, plotter.XY{X: q.x, Y: math.Min(math.Max(q.y, ymin), ymax)})
			}
		}
	}
	if len(sat) > 0 {
		if sc, err := plotter.NewScatter(sat); err == nil {
			sc.Color, sc.Shape, sc.Radius = satColor, draw.RingGlyph{}, vg.Points(7)
			p.Add(sc)
			legend = append(legend, `<span class="key"><span class="sw" style="background:#b00020"></span>◯ saturated: offered more than it serves, a queue's latency (no verdict)</span>`)
		}
	}
	var buf bytes.Buffer
	c := vgsvg.New(6.2*vg.Inch, 3.4*vg.Inch)
	p.Draw(draw.New(c))
	if _, err := c.WriteTo(&buf); err != nil {
		return ""
	}
	return inlineSVG(buf.String(), title, strings.Join(legend, " "))
}

// satColor rings saturated cells.
var satColor = color.RGBA{0xb0, 0x00, 0x20, 0xff}

var glyphNames = []string{"●", "□", "△", "▲", "✕", "+"}

var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}

// inlineSVG drops the XML prologue so the SVG can sit inside HTML, and
// names it for screen readers and tests.
func inlineSVG(s, title, legend string) string {
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	s = strings.Replace(s, "<svg", fmt.Sprintf(`<svg role="img" aria-label=%q`, title), 1)
	return `<figure class="plot"><figcaption>` + legend + `</figcaption>` + s + `</figure>`
}

// logTicks labels 1-2-5 steps of each decade, so a log axis over less
// than a decade still gets labels.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	if min <= 0 || max <= min {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		base := math.Pow(10, e)
		for _, m := range []float64{1, 2, 3, 5} {
			v := m * base
			if v < min || v > max {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: fmtNum(v)})
		}
		for m := 2.0; m < 10; m++ {
			if v := m * base; v >= min && v <= max && m != 2 && m != 3 && m != 5 {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	// Under a third of a decade may hold one label or none: label every
	// tick then.
	labelled := 0
	for _, t := range ts {
		if t.Label != "" {
			labelled++
		}
	}
	if labelled < 2 {
		for i := range ts {
			ts[i].Label = fmtNum(ts[i].Value)
		}
		if len(ts) < 2 {
			return plot.DefaultTicks{}.Ticks(min, max)
		}
	}
	return ts
}

// linTicks are gonum's default positions, labelled with as many
// decimals as their step needs (the default can print 0.95 and 1 as "1").
type linTicks struct{}

func (linTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	step := math.Inf(1)
	prev := math.NaN()
	for _, t := range ts {
		if t.Label == "" {
			continue
		}
		if !math.IsNaN(prev) {
			step = math.Min(step, t.Value-prev)
		}
		prev = t.Value
	}
	dec := 0
	if step > 0 && !math.IsInf(step, 1) {
		dec = max(0, int(math.Ceil(-math.Log10(step)+1e-9)))
	}
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', dec, 64)
		}
	}
	return ts
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
	}
	return fmt.Sprintf("%.2g", v)
}

// quotaTicks are ticks at the quotas tested, labelled in millicores.
func quotaTicks(qs []float64) []plot.Tick {
	ts := make([]plot.Tick, len(qs))
	for i, q := range qs {
		ts[i] = plot.Tick{Value: q, Label: result.Millicores(q)}
	}
	return ts
}

// mibTicks are labelled ticks at the limits in labelled, and minor ticks
// at the other limits tested. On the log axis they go on, a label within
// 8% of the previous one would overprint it, and becomes a minor tick.
func mibTicks(labelled, minor []float64) []plot.Tick {
	seen := map[float64]bool{}
	var ts []plot.Tick
	sort.Float64s(labelled)
	last := math.Inf(-1)
	for _, v := range labelled {
		if seen[v] {
			continue
		}
		seen[v] = true
		if v < last*1.08 {
			ts = append(ts, plot.Tick{Value: v})
			continue
		}
		ts = append(ts, plot.Tick{Value: v, Label: fmtNum(v)})
		last = v
	}
	for _, v := range minor {
		if !seen[v] {
			seen[v] = true
			ts = append(ts, plot.Tick{Value: v})
		}
	}
	return ts
}

// percentileX maps a percentile to the HDR plot's x: the number of nines,
// log10(1/(1-p)), so p50, p90, p99, p99.9 are evenly spaced.
func percentileX(p float64) float64 { return math.Log10(100 / (100 - p)) }

func percentileTicks() []plot.Tick {
	var ts []plot.Tick
	for _, p := range result.PercentileLevels {
		t := plot.Tick{Value: percentileX(p)}
		// Label the nines; the steps between are minor ticks.
		switch p {
		case 50, 90, 99, 99.9, 99.99:
			t.Label = fmt.Sprintf("p%g", p)
		}
		ts = append(ts, t)
	}
	return ts
}
