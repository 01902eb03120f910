package experiment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	labreport "github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
)

// WriteFiles writes results.json and report.html into dir.
func WriteFiles(dir string, r *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report directory: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode results: %w", err)
	}
	html, err := RenderHTML(r)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, b := range map[string][]byte{"results.json": append(js, '\n'), "report.html": html} {
		p := filepath.Join(dir, name)
		if err := labreport.WriteAtomic(p, b); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

func metricByName(name string) (Metric, bool) {
	for _, m := range Metrics() {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// format prints a metric's value in its unit.
func format(name string, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	m, _ := metricByName(name)
	switch m.Unit {
	case "s":
		switch {
		case v >= 1:
			return fmt.Sprintf("%.2f s", v)
		case v >= 1e-3:
			return fmt.Sprintf("%.3g ms", v*1e3)
		}
		return fmt.Sprintf("%.3g µs", v*1e6)
	case "bytes":
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case "share":
		return fmt.Sprintf("%.2f%%", 100*v)
	}
	return fmt.Sprintf("%.3g", v)
}

func ratioText(v Verdict) string {
	if v.Verdict == Harmful {
		return v.Detail
	}
	lo, hi := float64(v.Low), float64(v.High)
	if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, -1) && math.IsInf(hi, 1) {
		return fmt.Sprintf("×%.3f (no interval)", float64(v.Ratio))
	}
	end := func(x float64) string {
		switch {
		case math.IsInf(x, 1):
			return "∞"
		case math.IsInf(x, -1):
			return "-∞"
		}
		return fmt.Sprintf("%.3f", x)
	}
	return fmt.Sprintf("×%.3f [%s–%s]", float64(v.Ratio), end(lo), end(hi))
}

// where is the experiment's namespace and, when known, its workload.
func (r *Results) where() string {
	if r.Workload == "" {
		return r.Namespace
	}
	if r.Workload == NoController {
		return r.Namespace + " (pods without a controller)"
	}
	return r.Namespace + " (" + r.Workload + ")"
}

// WriteSummary prints the terminal summary.
func WriteSummary(w io.Writer, r *Results) {
	fmt.Fprintf(w, "experiment %s in %s, control %s: %d windows of %.0fs from %s to %s\n", r.Experiment, r.where(), r.Control, r.Windows, r.WindowSeconds,
		r.From.UTC().Format("2006-01-02 15:04"), r.To.UTC().Format("15:04 MST"))
	keys := make([]string, 0, len(r.Sources))
	for k := range r.Sources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-10s %s\n", k+":", r.Sources[k])
	}
	for _, a := range r.Arms {
		fmt.Fprintf(w, "arm %s: %d pods (%s)", a.Name, len(a.Pods), strings.Join(a.Pods, ", "))
		if a.Harmful {
			fmt.Fprintf(w, " HARMFUL: %s", strings.Join(a.Harms, "; "))
		}
		fmt.Fprintln(w)
		if len(a.Nodes) > 0 {
			nodes := slices.Sorted(maps.Keys(a.Nodes))
			for i, n := range nodes {
				nodes[i] = fmt.Sprintf("%s %d", n, a.Nodes[n])
			}
			fmt.Fprintf(w, "  %-24s %s\n", "pods by node", strings.Join(nodes, ", "))
		}
		for _, m := range Metrics() {
			if v, ok := a.Metrics[m.Name]; ok {
				fmt.Fprintf(w, "  %-24s %s [%s–%s]\n", m.Label, format(m.Name, float64(v.Value)), format(m.Name, float64(v.Low)), format(m.Name, float64(v.High)))
			}
		}
	}
	if r.AnytimeValid {
		fmt.Fprintf(w, "verdicts against %s (look %d from the start: anytime-valid intervals, %g chance of any false verdict at any look; same: within the margin):\n", r.Control, r.Look, r.Alpha)
	} else {
		fmt.Fprintf(w, "verdicts against %s (95%% intervals of the ratio; same: within the margin):\n", r.Control)
	}
	for _, v := range r.Verdicts {
		fmt.Fprintf(w, "  %-12s %-24s %-9s %s\n", v.Arm, v.Metric, v.Verdict, ratioText(v))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// Failing lists the verdicts of kinds (harmful, worse, undecided, ...),
// for --fail-on.
func Failing(r *Results, kinds []string) []Verdict {
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	var out []Verdict
	for _, v := range r.Verdicts {
		if want[v.Verdict] {
			out = append(out, v)
		}
	}
	return out
}

var tmpl = template.Must(template.New("experiment").Funcs(template.FuncMap{
	"fmt":   func(name string, v F) string { return format(name, float64(v)) },
	"ratio": ratioText,
	"pct":   func(v F) string { return format("error_share", float64(v)) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gofit experiment {{.R.Experiment}}</title>
<style>
{{.CSS}}
</style></head><body>
<h1>gofit experiment {{.R.Experiment}}</h1>
<p class="meta">Namespace {{.R.Namespace}}{{with .R.Workload}}, workload {{.}}{{end}}, control arm <b>{{.R.Control}}</b>. {{.R.Windows}} paired windows of {{printf "%.0f" .R.WindowSeconds}} s from {{.R.From.UTC.Format "2006-01-02 15:04:05"}} to {{.R.To.UTC.Format "15:04:05 MST"}}; blocks of {{.R.BlockWindows}} windows, {{.R.Resamples}} resamples (seed {{.R.Seed}}).</p>
{{range .R.Notes}}<div class="warn">{{.}}</div>{{end}}
{{range .R.Arms}}{{if .Harmful}}<div class="alert"><b>{{.Name}} is harmful:</b> {{range .Harms}}{{.}}. {{end}}</div>{{end}}{{end}}
<h2>Verdicts against {{.R.Control}}</h2>
<p class="meta">Each cell: the arm's figure ÷ the control's over the same windows, and its interval from a block bootstrap that draws the same windows for both (95% for one reading, or an anytime-valid confidence sequence from the experiment's start, which holds however often the report is read, over every metric and arm: see the notes). Better or worse only when the interval excludes 1; same when it lies within 1 ± the margin; undecided otherwise.</p>
<table><tr><th>metric</th>{{range .Others}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Label}}</td>{{range .Cells}}<td class="{{.Class}}">{{.Text}}<br><span class="v">{{.Verdict}}</span></td>{{end}}</tr>{{end}}
</table>
<h2>Arms</h2>
<table><tr><th>metric</th>{{range .R.Arms}}<th>{{.Name}}</th>{{end}}</tr>
<tr><td>pods</td>{{range .R.Arms}}<td>{{len .Pods}} <span class="ci">{{range .Pods}}{{.}} {{end}}</span></td>{{end}}</tr>
<tr><td>pods by node</td>{{range .R.Arms}}<td><span class="ci">{{range $n, $c := .Nodes}}{{$n}} {{$c}} {{end}}</span></td>{{end}}</tr>
{{range .Metrics}}{{$m := .}}<tr><td>{{.Label}}</td>{{range $.R.Arms}}{{with index .Metrics $m.Name}}<td>{{fmt $m.Name .Value}} <span class="ci">[{{fmt $m.Name .Low}}–{{fmt $m.Name .High}}]</span></td>{{else}}<td>–</td>{{end}}{{end}}</tr>{{end}}
<tr><td>OOM kills</td>{{range .R.Arms}}<td>{{.OOMKills}}</td>{{end}}</tr>
<tr><td>restarts</td>{{range .R.Arms}}<td>{{.Restarts}}</td>{{end}}</tr>
<tr><td>time not ready</td>{{range .R.Arms}}<td>{{pct .Unready}}</td>{{end}}</tr>
</table>
<h2>Over time</h2>
<p class="meta">Each point is one window's figure for the arm (pods pooled).</p>
{{range .Plots}}{{.}}{{end}}
<h2>Sources</h2>
<table>{{range $k, $v := .R.Sources}}<tr><td>{{$k}}</td><td style="text-align:left">{{$v}}</td></tr>{{end}}</table>
</body></html>
`))

type cell struct{ Class, Text, Verdict string }
type row struct {
	Label string
	Cells []cell
}

// RenderHTML renders report.html.
func RenderHTML(r *Results) ([]byte, error) {
	var others []string
	for _, a := range r.Arms {
		if a.Name != r.Control {
			others = append(others, a.Name)
		}
	}
	var rows []row
	var metrics []Metric
	for _, m := range Metrics() {
		present := false
		for _, a := range r.Arms {
			if _, ok := a.Metrics[m.Name]; ok {
				present = true
			}
		}
		if !present {
			continue
		}
		metrics = append(metrics, m)
		if !m.Verdict {
			continue
		}
		rw := row{Label: m.Label}
		for _, o := range others {
			c := cell{Text: "–"}
			for _, v := range r.Verdicts {
				if v.Arm == o && v.Metric == m.Name {
					c = cell{Class: v.Verdict, Text: ratioText(v), Verdict: v.Verdict}
				}
			}
			rw.Cells = append(rw.Cells, c)
		}
		rows = append(rows, rw)
	}
	var plots []template.HTML
	for _, p := range []struct{ metric, title, unit string }{
		{"p99_seconds", "latency p99", "seconds"}, {"p50_seconds", "latency p50", "seconds"},
		{"cpu_seconds_per_request", "CPU per request", "CPU seconds"}, {"cpu_cores", "CPU per pod", "cores"},
		{"throttled_share", "throttled periods", "share"}, {"gc_cpu_share", "GC share of CPU", "share"},
		{"working_set_bytes", "working set per pod", "bytes"}, {"heap_bytes", "Go heap per pod", "bytes"},
		{"requests_per_second", "requests per pod", "per second"},
	} {
		var lines []labreport.ChartLine
		for _, s := range r.Series {
			vs, ok := s.Values[p.metric]
			if !ok {
				continue
			}
			l := labreport.ChartLine{Name: s.Arm}
			for i, v := range vs {
				l.X = append(l.X, s.T[i].Sub(r.From).Minutes())
				l.Y = append(l.Y, v)
			}
			lines = append(lines, l)
		}
		if len(lines) > 0 {
			plots = append(plots, labreport.ChartSVG(p.title, "minutes from the start", p.unit, false, lines))
		}
	}
	var buf bytes.Buffer
	err := tmpl.Execute(&buf, struct {
		R       *Results
		CSS     template.CSS
		Others  []string
		Rows    []row
		Metrics []Metric
		Plots   []template.HTML
	}{r, template.CSS(labreport.CSS), others, rows, metrics, plots})
	if err != nil {
		return nil, fmt.Errorf("render report.html: %w", err)
	}
	return buf.Bytes(), nil
}
