package report

import (
	"html/template"
	"math"
)

// The lab report's look, exported for gofit's other reports (the
// experiment report, issue 26): its stylesheet and its charts, so that
// every report gofit writes reads alike.

// CSS is report.html's stylesheet: page layout, tables, the verdict
// classes (better, worse, same, undecided, saturated, failed, base),
// warnings and plot figures. Put it in a <style> element.
const CSS = `body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1320px;margin:1em auto;color:#222;padding:0 1em}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1em 0 .3em}
.meta{color:#555;font-size:13px;margin:0 0 .5em}
.top{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}
.top>div{flex:1 1 560px;min-width:0}
table{border-collapse:collapse;font-size:12.5px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.better{background:#dff3df}.worse{background:#fadcdc}.same{background:#f3f3f3}.undecided{background:#fff2cc}.saturated{background:#f6e0f0;font-style:italic}.failed{background:#f4b4b4;font-weight:bold}.base{background:#e8eefa}
.ci{color:#555;font-size:11px}.v{font-size:11px;font-weight:600}.n{color:#777;font-size:10.5px}
pre{background:#f6f6f6;padding:.6em;font-size:12px;margin:.3em 0}
.alert{background:#fadcdc;border:1px solid #d66;padding:.5em .8em;margin:.4em 0}
.warn{background:#fff2cc;border:1px solid #d6b656;padding:.4em .8em;margin:.4em 0;font-size:13px}
ul.reasons{font-size:12.5px;padding-left:1.2em;margin:.3em 0}
figure.plot{display:inline-block;margin:.3em;vertical-align:top}figcaption{font-size:12px;color:#333;max-width:600px}
.key{white-space:nowrap;margin-right:.8em}.sw{display:inline-block;width:10px;height:10px;margin-right:3px}
details{margin:.5em 0}summary{cursor:pointer;font-weight:600}
`

// ChartLine is one line of a chart: the points (X[i], Y[i]), with Low[i]
// and High[i] as the ends of each point's interval whisker when given. A
// point whose Y is NaN or infinite is left out.
type ChartLine struct {
	Name      string
	X, Y      []float64
	Low, High []float64
}

// ChartSVG draws lines as the lab report draws its plots (gonum/plot,
// the report's palette, glyphs and whiskers) into an inline SVG figure
// with its legend, ready to sit in an HTML page styled with CSS. logY
// puts the y axis on a log scale. Line names are HTML-escaped; title and
// the axis labels are the caller's own text, not a user's.
func ChartSVG(title, xLabel, yLabel string, logY bool, lines []ChartLine) template.HTML {
	ls := make([]line, 0, len(lines))
	for _, l := range lines {
		var pts []pt
		for i := range l.X {
			if i >= len(l.Y) || math.IsNaN(l.Y[i]) || math.IsInf(l.Y[i], 0) {
				continue
			}
			p := pt{x: l.X[i], y: l.Y[i], lo: l.Y[i], hi: l.Y[i]}
			if i < len(l.Low) && i < len(l.High) {
				p.lo, p.hi = l.Low[i], l.High[i]
			}
			pts = append(pts, p)
		}
		ls = append(ls, line{name: l.Name, pts: pts})
	}
	return template.HTML(chartSVG(title, axisSpec{label: xLabel}, axisSpec{label: yLabel, log: logY}, ls))
}
