// Package report renders a lab study's results: report.html (verdict
// tables, plots, every cell and trial), results.json, and the summary the
// lab prints. It reads result.Results and nothing else; the lab calls
// Write and Summary. Its look (the stylesheet and the charts) is
// exported for gofit's other reports: see CSS and ChartSVG.
package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/fit"
)

// Write writes results.json and report.html into dir, each through
// a temporary file and a rename. A study that measured nothing does not
// replace earlier results: it is written as results-empty.json and
// report-empty.html beside them. It returns the paths written.
func Write(dir string, r *result.Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	rj, rh := "results.json", "report.html"
	if r.Empty() {
		if _, err := os.Stat(filepath.Join(dir, rj)); err == nil {
			rj, rh = "results-empty.json", "report-empty.html"
		}
	}
	html, err := renderHTML(r)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range []struct {
		name string
		data []byte
	}{{rj, append(b, '\n')}, {rh, html}} {
		p := filepath.Join(dir, f.name)
		if err := WriteAtomic(p, f.data); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// WriteAtomic replaces path whole or not at all: it writes a temporary
// file beside it, syncs it, makes it readable by all (0644: a report is
// for reading) and renames it over path, so an interrupted run never
// leaves a half-written file behind. It is gofit's one writer for
// results, records and reports (the lab's, the experiment's, the
// fleet's); its errors name path.
func WriteAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// verdictRow is one setting across the quotas, for the verdict tables.
type verdictRow struct {
	Label string
	Cells []verdictCell
}

type verdictCell struct {
	Text, Interval, Verdict, Class, Note string
}

type verdictTable struct {
	Mode   result.Mode
	What   string
	Quotas []string
	Rows   []verdictRow
}

func verdictTables(r *result.Results) []verdictTable {
	var quotas []float64
	seenQ := map[float64]bool{}
	for _, s := range r.CPUSummary {
		if !seenQ[s.QuotaCores] {
			seenQ[s.QuotaCores] = true
			quotas = append(quotas, s.QuotaCores)
		}
	}
	// Ascending, the request row (no limit, 0) last.
	sort.Slice(quotas, func(i, j int) bool { return quotas[j] == 0 || quotas[i] != 0 && quotas[i] < quotas[j] })
	req := result.RequestCores(r.CPUSummary)
	var out []verdictTable
	for _, mode := range []result.Mode{result.Open, result.Closed} {
		t := verdictTable{Mode: mode, What: "open-loop p99 at equal offered load (lower is better)"}
		if mode == result.Closed {
			t.What = "closed-loop throughput (higher is better)"
		}
		for _, q := range quotas {
			t.Quotas = append(t.Quotas, result.RowLabel(q, req))
		}
		for _, setting := range []string{result.SetGoDefault, result.SetGofit, result.SetProcs1, result.SetProcsNCPU} {
			row := verdictRow{Label: setting}
			found := false
			for _, q := range quotas {
				c := verdictCell{Text: "–"}
				for _, s := range r.CPUSummary {
					if s.Mode != mode || s.QuotaCores != q || !s.Is(setting) {
						continue
					}
					found = true
					m, unit := s.P99, "ms"
					if mode == result.Closed {
						m, unit = s.RPS, " rps"
					}
					c.Text = fmtNum(m.Value) + unit
					c.Interval = fmt.Sprintf("[%s–%s]", fmtNum(m.CILow), fmtNum(m.CIHigh))
					switch {
					case s.Failed:
						c.Verdict, c.Class = "FAILED", "failed"
					case s.Setting == result.SetGoDefault:
						c.Verdict, c.Class = "baseline", "base"
					case s.Verdict != nil:
						c.Verdict, c.Class = *s.Verdict, *s.Verdict
						if !s.Decided {
							c.Verdict, c.Class = "undecided", "undecided"
							if s.DetectableRatio != nil {
								c.Verdict = fmt.Sprintf("undecided (cannot see <×%.2f)", *s.DetectableRatio)
							}
						}
					case s.Saturated:
						c.Verdict, c.Class = "saturated", result.Saturated
					}
					if s.Setting != setting {
						c.Note = "same cell as " + s.Setting
					}
					if mode == result.Open && s.OfferedRPS > 0 {
						c.Note = strings.TrimPrefix(c.Note+fmt.Sprintf("; at %.0f rps", s.OfferedRPS), "; ")
					}
				}
				row.Cells = append(row.Cells, c)
			}
			if found {
				t.Rows = append(t.Rows, row)
			}
		}
		out = append(out, t)
	}
	return out
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{"statuses": statuses}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gofit lab report</title>
<style>
` + CSS + `</style></head><body>
<h1>gofit lab report</h1>
<p class="meta">{{with .R.Machine.Host}}{{.}}: {{end}}{{.R.Machine.CPUs}} CPUs{{with .R.Machine.CPUModel}} ({{.}}){{end}}, cgroup v{{.R.Machine.CgroupVersion}}, {{.R.Machine.GoVersion}}, kernel {{.R.Machine.Kernel}}{{with .R.Machine.LoadAvg}}, load average at start {{.}}{{end}}.{{with .R.Machine.Where}}<br>Trials: {{.}}.{{end}}
Target <code>{{.R.Target.Command}}</code>{{with .R.Target.Image}} from image <code>{{.}}</code>{{end}}. {{.R.Lab.Trials}} trials in {{printf "%.0f" .R.Lab.WallSeconds}} s (budget {{printf "%.0f" .R.Lab.BudgetSeconds}} s).</p>
{{if .R.Lab.Failed}}<div class="alert"><b>Not a trustworthy result:</b> {{.R.Lab.Failed}}.</div>{{end}}
{{if .Placement}}<div class="{{if .R.Placement.Isolated}}meta{{else}}warn{{end}}"><b>Isolation:</b> {{.R.Placement.Note}}.{{if .Overlap}} Measured: {{.Overlap}}{{end}}</div>{{end}}
{{range .R.Lab.Warnings}}<div class="warn">{{.}}</div>{{end}}
{{if .R.Lab.BudgetLimited}}<div class="warn"><b>budget_limited:</b> the budget cut the study short of its sample minimums; intervals are wider and floors rest on shorter loads.<ul class="reasons">{{range .R.Lab.BudgetNotes}}<li>{{.}}</li>{{end}}</ul></div>{{end}}
<div class="top">
<div>
<h2>Verdicts against go-default</h2>
<p class="meta">Each cell: the estimate over every request of every repeat, its 95% bootstrap interval, and the verdict: better or worse only when the 97% interval of the ratio to go-default, read at the look the repeats stopped on, excludes 1.</p>
{{range .Tables}}<table style="margin-bottom:.6em"><tr><th>{{.What}}</th>{{range .Quotas}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td>{{.Label}}</td>{{range .Cells}}<td class="{{.Class}}">{{.Text}} <span class="ci">{{.Interval}}</span><br><span class="v">{{.Verdict}}</span>{{if .Note}}<br><span class="n">{{.Note}}</span>{{end}}</td>{{end}}</tr>{{end}}
</table>{{end}}
</div>
<div>
<h2>Recommendation{{if not .R.Recommendation.Confident}} (not confident){{end}}</h2>
<pre>{{.R.Recommendation.YAML}}</pre>
{{with .R.Recommendation.Check}}<p class="meta"><b>Check trial</b> (the pair run together, judged as the health trials are): {{.Outcome}}{{if .Healthy}}, healthy{{else}}, not healthy{{end}}: p99 {{printf "%.1f" .P99}} ms at {{printf "%.0f" .OfferedRPS}} rps, against {{printf "%.1f" .RefP99}} ms without a memory limit{{with .P99Ratio}} (×{{printf "%.2f" .Value}}, 97% interval {{printf "%.2f" .Low}}–{{printf "%.2f" .High}}){{end}}, {{.Pairs}} pairs.</p>{{end}}
<ul class="reasons">{{range .R.Recommendation.Reasons}}<li>{{.}}</li>{{end}}</ul>
</div>
</div>
<h2>CPU</h2>
<p class="meta">Closed loop: a fixed number of workers, each sending its next request when the previous returns, over windows of at least 50 CFS periods; CPU and throttling are read at the window's edges, after a warm-up. Open loop: every setting at a quota gets the same rate (offered_rps), each latency timed from its intended send time. Points are the estimate over all requests; whiskers its 95% interval (cut at the plot's edge).</p>
{{range .CPUPlots}}{{.}}{{end}}
<h2>Latency percentiles at {{.SmallestQuota}} (open loop)</h2>
{{.HDRPlot}}
<h2>Memory</h2>
<p class="meta">Each trial starts the target with its binary's page cache {{.R.Target.PageCache}}, under a memory limit and the CPU limit {{.ProbeCPU}}, and drives load. Survival trials: a fixed closed-loop load; survives: no OOM kill, errors at most 1%, no stall. Health trials: a fixed open-loop rate of {{printf "%.0f" .R.Target.HealthRPS}} rps (a share of the unlimited probes' {{printf "%.0f" .R.Target.ProbeRPS}} rps), in pairs of runs alternating the same setting without a memory limit (the reference) and at the limit; healthy: it survives and the 97% interval of its p99 ÷ the reference's (widened for the few pairs it rests on) lies at or under 2 (pairs are added while the interval straddles 2; at the most pairs the estimate decides). Peak without a limit: {{.Peak}}.</p>
<table><tr><th>setting</th><th>survival floor</th><th>healthy floor</th><th>limited trials (survival + health)</th></tr>
{{range .Floors}}<tr{{if .Short}} class="undecided"{{end}}><td>{{.Setting}}</td><td>{{.Floor}}</td><td>{{.Healthy}}</td><td>{{.Survival}} + {{.Health}}</td></tr>{{end}}</table>
<p class="meta">Each floor says what it rests on. <b>found</b>: its search ran to its end, between a limit that failed and the floor that passed. <b>bounded</b>: the budget cut the search after a limit passed; the floor is at most that limit. <b>above</b>: no limit tried passed. <b>not measured</b>: no trial ran under a memory limit, so there is no figure.</p>
{{range .MemPlots}}{{.}}{{end}}
<details><summary>Every CPU summary cell</summary>
<table><tr><th>quota</th><th>setting</th><th>mode</th><th>GOMAXPROCS</th><th>offered rps</th><th>rps [95% CI]</th><th>p99 ms [95% CI]</th><th>repeats</th><th>samples</th><th>CPU efficiency</th><th>throttled s</th><th>errors</th><th>isolated</th><th>notes</th></tr>
{{range .R.CPUSummary}}<tr{{if .Failed}} class="failed"{{end}}><td>{{if .QuotaCores}}{{printf "%.2f" .QuotaCores}}{{else}}none, request {{printf "%.2f" .RequestCores}}{{end}}</td><td>{{.Setting}}{{range .SameAs}} = {{.}}{{end}}</td><td>{{.Mode}}</td><td>{{.GOMAXPROCS}}</td><td>{{if .OfferedRPS}}{{printf "%.0f" .OfferedRPS}}{{end}}</td>
<td>{{printf "%.0f" .RPS.Value}} [{{printf "%.0f" .RPS.CILow}}–{{printf "%.0f" .RPS.CIHigh}}]</td><td>{{printf "%.1f" .P99.Value}} [{{printf "%.1f" .P99.CILow}}–{{printf "%.1f" .P99.CIHigh}}]</td>
<td>{{.Repeats}}</td><td>{{.Samples}}</td><td>{{printf "%.2f" .CPUEfficiency.Median}}</td><td>{{printf "%.2f" .ThrottledSeconds.Median}}</td><td>{{printf "%.2f" .ErrorShare}}</td><td>{{.Isolated}}</td><td>{{range .Notes}}{{.}}. {{end}}</td></tr>{{end}}
</table></details>
<details><summary>Every memory trial</summary>
<table><tr><th>setting</th><th>search</th><th>limit</th><th>outcome</th><th>healthy</th><th>rps</th><th>p99 ms</th><th>peak</th><th>page cache</th><th>major faults</th><th>detail</th></tr>
{{range .MemTrials}}<tr><td>{{.Setting}}</td><td>{{.Search}}</td><td>{{.Limit}}</td><td>{{.T.Outcome}}</td><td>{{.T.Healthy}}</td><td>{{printf "%.0f" .T.RPS}}</td><td>{{printf "%.1f" .T.P99}}</td><td>{{.Peak}}</td><td>{{.Cache}}</td><td>{{.T.MajorFaults}}</td><td>{{.T.Detail}}</td></tr>{{end}}
</table></details>
{{if .R.Targets}}<h2>Requests per target</h2>
<p class="meta">Over every CPU window (seed {{.R.Lab.Seed}}).</p>
<table><tr><th>method</th><th>URL</th><th>requests</th><th>status</th><th>p50 ms</th><th>p99 ms</th></tr>
{{range .R.Targets}}<tr><td>{{.Method}}</td><td><code>{{.URL}}</code></td><td>{{.Requests}}</td><td>{{statuses .Status}}</td><td>{{printf "%.2f" .P50}}</td><td>{{printf "%.2f" .P99}}</td></tr>{{end}}
</table>{{end}}
<p class="meta">The lab: {{.R.Lab.Trials}} trials in {{printf "%.0f" .R.Lab.WallSeconds}} s; the load generator used {{printf "%.1f" .R.Lab.GeneratorCPUSeconds}} CPU-seconds outside the target's cgroup. {{.R.Lab.Undecided}} comparisons stayed undecided.</p>
</body></html>
`))

type floorRow struct {
	Setting, Floor, Healthy string
	Survival, Health        int  // limited trials each floor rests on
	Short                   bool // a floor not found: bounded, above or not measured
}

type memTrialRow struct {
	Setting, Search, Limit, Peak, Cache string
	T                                   result.MemTrial
}

// renderHTML renders report.html.
func renderHTML(r *result.Results) ([]byte, error) {
	d := struct {
		R                       *result.Results
		Tables                  []verdictTable
		Placement               bool
		Overlap                 string
		CPUPlots, MemPlots      []template.HTML
		HDRPlot                 template.HTML
		SmallestQuota, ProbeCPU string
		Peak                    string
		Floors                  []floorRow
		MemTrials               []memTrialRow
	}{R: r, Tables: verdictTables(r), Placement: r.Placement != nil, ProbeCPU: result.CPULabel(r.Target.ProbeCPU), Peak: result.PeakLabel(r)}
	if r.Placement != nil && len(r.Placement.Generator) > 0 {
		var xs []float64
		for _, c := range r.CPU {
			if c.OverlapShare != nil {
				xs = append(xs, *c.OverlapShare)
			}
		}
		if len(xs) > 0 {
			s := stats.SpreadOf(xs)
			d.Overlap = fmt.Sprintf("the target spent %.0f%% (median; %.0f–%.0f%%) of its CPU time on the generator's CPU %s.", s.Median*100, s.Min*100, s.Max*100, result.CPUList(r.Placement.Generator))
		}
	}
	// The plots' x axis is the quota (log scale): the request row has none.
	var quotas []float64
	seen := map[float64]bool{}
	for _, s := range r.CPUSummary {
		if s.QuotaCores > 0 && !seen[s.QuotaCores] {
			seen[s.QuotaCores] = true
			quotas = append(quotas, s.QuotaCores)
		}
	}
	sort.Float64s(quotas)
	qx := axisSpec{label: "CPU quota (log scale)", log: true, ticks: quotaTicks(quotas)}
	// One line per setting, through every cell it names (a cell shared by
	// two settings is on both lines).
	cpuLines := func(mode result.Mode, f func(result.CPUSummary) pt) []line {
		var out []line
		for _, setting := range []string{result.SetGoDefault, result.SetGofit, result.SetProcs1, result.SetProcsNCPU} {
			var pts []pt
			for _, s := range r.CPUSummary {
				if s.Mode == mode && s.QuotaCores > 0 && s.Is(setting) {
					pts = append(pts, f(s))
				}
			}
			if len(pts) > 0 {
				out = append(out, line{setting, pts})
			}
		}
		return out
	}
	d.CPUPlots = []template.HTML{
		template.HTML(chartSVG("p99 latency, open loop at equal offered load", qx, axisSpec{label: "p99 (ms, log scale)", log: true},
			cpuLines(result.Open, func(s result.CPUSummary) pt {
				return pt{s.QuotaCores, s.P99.Value, s.P99.CILow, s.P99.CIHigh, s.Saturated}
			}))),
		template.HTML(chartSVG("Throughput, closed loop", qx, axisSpec{label: "requests/s"},
			cpuLines(result.Closed, func(s result.CPUSummary) pt { return pt{s.QuotaCores, s.RPS.Value, s.RPS.CILow, s.RPS.CIHigh, false} }))),
		template.HTML(chartSVG("Throttled time per window, open loop (median, min–max)", qx, axisSpec{label: "throttled seconds"},
			cpuLines(result.Open, func(s result.CPUSummary) pt {
				return pt{s.QuotaCores, s.ThrottledSeconds.Median, s.ThrottledSeconds.Min, s.ThrottledSeconds.Max, s.Saturated}
			}))),
		template.HTML(chartSVG("CPU used ÷ quota, closed loop (median, min–max)", qx, axisSpec{label: "CPU efficiency"},
			cpuLines(result.Closed, func(s result.CPUSummary) pt {
				return pt{s.QuotaCores, s.CPUEfficiency.Median, s.CPUEfficiency.Min, s.CPUEfficiency.Max, false}
			}))),
	}
	if len(quotas) > 0 {
		d.SmallestQuota = result.Millicores(quotas[0])
		var ls []line
		for _, s := range r.CPUSummary {
			if s.Mode != result.Open || s.QuotaCores != quotas[0] {
				continue
			}
			var pts []pt
			for _, p := range s.Percentiles {
				pts = append(pts, pt{percentileX(p.Percentile), p.Ms, p.Ms, p.Ms, s.Saturated})
			}
			ls = append(ls, line{result.SummaryLabel(s), pts})
		}
		sort.Slice(ls, func(i, j int) bool { return result.SettingRank(ls[i].name) < result.SettingRank(ls[j].name) })
		d.HDRPlot = template.HTML(chartSVG("Latency by percentile at "+d.SmallestQuota+", open loop", axisSpec{label: "percentile", ticks: percentileTicks()},
			axisSpec{label: "latency (ms, log scale)", log: true}, ls))
	}
	// Memory.
	var surv, thr, hl []line
	var floors, tested []float64
	for _, m := range r.Memory {
		row := floorRow{Setting: m.Setting, Survival: m.SurvivalFinding.Trials, Health: m.HealthyFinding.Trials,
			Short: m.SurvivalFinding.Status != result.FloorFound || m.HealthyFinding.Status != result.FloorFound}
		row.Floor, row.Healthy = m.FloorLabels()
		if m.FloorBytes != nil {
			floors = append(floors, mibf(*m.FloorBytes))
		}
		if m.HealthyFloorBytes != nil {
			floors = append(floors, mibf(*m.HealthyFloorBytes))
		}
		d.Floors = append(d.Floors, row)
		var sp []pt
		for _, s := range m.Survival {
			y := float64(s.Passed) / float64(s.Runs)
			sp = append(sp, pt{mibf(s.LimitBytes), y, y, y, false})
			tested = append(tested, mibf(s.LimitBytes))
		}
		surv = append(surv, line{m.Setting, sp})
		var hp []pt
		for _, t := range m.HealthyTrials {
			if r := t.P99Ratio; t.Outcome == result.OK && r != nil {
				hp = append(hp, pt{mibf(t.LimitBytes), r.Value, r.Low, r.High, false})
			}
		}
		hl = append(hl, line{m.Setting, hp})
		var tp []pt
		for _, t := range r.Throughput {
			if t.Setting == m.Setting && t.Outcome == result.OK {
				tp = append(tp, pt{mibf(t.LimitBytes), t.P99, t.P99, t.P99, false})
			}
		}
		thr = append(thr, line{m.Setting, tp})
		for _, t := range m.Trials {
			d.MemTrials = append(d.MemTrials, memTrialRow{m.Setting, "survival", fit.FormatBytes(t.LimitBytes), fit.FormatBytes(int64(t.PeakBytes)), fit.FormatBytes(int64(t.PageCacheBytes)), t})
		}
		for _, t := range m.HealthyTrials {
			d.MemTrials = append(d.MemTrials, memTrialRow{m.Setting, "healthy", fit.FormatBytes(t.LimitBytes), fit.FormatBytes(int64(t.PeakBytes)), fit.FormatBytes(int64(t.PageCacheBytes)), t})
		}
	}
	var multLimits []float64
	for _, t := range r.Throughput {
		multLimits = append(multLimits, mibf(t.LimitBytes))
	}
	mx := axisSpec{label: "memory limit (MiB, log scale); labelled: floors found or bounded", log: true, ticks: mibTicks(floors, tested)}
	d.MemPlots = []template.HTML{
		template.HTML(chartSVG("Survival against memory limit", mx, axisSpec{label: "share of runs that survived", min: -0.05, max: 1.1}, surv)),
		template.HTML(chartSVG("Health trials: p99 ÷ unlimited p99 (healthy ≤ 2)", mx, axisSpec{label: "p99 ratio (log scale), 97% interval", log: true}, hl)),
		template.HTML(chartSVG("p99 at multiples of the no-knob floor", axisSpec{label: "memory limit (MiB, log scale)", log: true, ticks: mibTicks(multLimits, nil)}, axisSpec{label: "p99 (ms, log scale)", log: true}, thr)),
	}
	var buf bytes.Buffer
	if err := reportTmpl.Execute(&buf, d); err != nil {
		return nil, fmt.Errorf("report.html: %w", err)
	}
	return buf.Bytes(), nil
}

func mibf(b int64) float64 { return float64(b) / (1 << 20) }

// Summary prints the terminal summary: the verdicts and the
// recommendation first.
func Summary(w io.Writer, r *result.Results) {
	where := ""
	if r.Machine.Host != "" {
		where = " on " + r.Machine.Host
	}
	if r.Machine.CPUModel != "" {
		where += " (" + r.Machine.CPUModel + ")"
	}
	fmt.Fprintf(w, "\ngofit lab%s: %d CPUs, cgroup v%d, %s, kernel %s, load average %s\n", where, r.Machine.CPUs, r.Machine.CgroupVersion, r.Machine.GoVersion, r.Machine.Kernel, r.Machine.LoadAvg)
	if r.Machine.Where != "" {
		fmt.Fprintf(w, "trials: %s\n", r.Machine.Where)
	}
	fmt.Fprintf(w, "target: %s\n", r.Target.Command)
	if r.Target.Image != "" {
		fmt.Fprintf(w, "image: %s\n", r.Target.Image)
	}
	if r.Lab.Failed != "" {
		fmt.Fprintf(w, "\n!! NOT TRUSTWORTHY: %s\n", r.Lab.Failed)
	}
	if r.Placement != nil {
		fmt.Fprintf(w, "isolation: %s\n", r.Placement.Note)
	}
	for _, t := range verdictTables(r) {
		if len(t.Rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: estimate [95%% CI] verdict vs go-default\n", t.What)
		fmt.Fprintf(w, "  %-16s", "setting")
		for _, q := range t.Quotas {
			fmt.Fprintf(w, " %-30s", q)
		}
		fmt.Fprintln(w)
		for _, row := range t.Rows {
			fmt.Fprintf(w, "  %-16s", row.Label)
			for _, c := range row.Cells {
				fmt.Fprintf(w, " %-30s", strings.TrimSpace(c.Text+" "+c.Interval+" "+c.Verdict))
			}
			fmt.Fprintln(w)
		}
	}
	if len(r.Memory) > 0 {
		fmt.Fprintf(w, "\nMemory floors at %s CPU (page cache %s at start; peak without a limit %s; unlimited %.0f rps, p99 %.1fms; health judged at %.0f rps against the same setting without a limit)\n",
			result.CPULabel(r.Target.ProbeCPU), r.Target.PageCache, result.PeakLabel(r), r.Target.ProbeRPS, r.Target.ProbeP99, r.Target.HealthRPS)
		fmt.Fprintf(w, "  non-Go memory: %s\n", result.NonGoLabel(r.Target.NonGo))
		for _, m := range r.Memory {
			f, h := m.FloorLabels()
			fmt.Fprintf(w, "  %-26s survival floor %s\n  %-26s healthy floor  %s\n", m.Setting, f, "", h)
		}
	}
	conf := ""
	if !r.Recommendation.Confident {
		conf = " (not confident)"
	}
	fmt.Fprintf(w, "\nRecommendation%s\n", conf)
	for _, s := range r.Recommendation.Reasons {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	if c := r.Recommendation.Check; c != nil {
		fmt.Fprintf(w, "  - check trial (the pair together): %s\n", c.Verdict())
	}
	fmt.Fprintf(w, "\n%s\n", r.Recommendation.YAML)
	for _, x := range r.Lab.Warnings {
		fmt.Fprintf(w, "warning: %s\n", x)
	}
	if len(r.Targets) > 1 || len(r.Targets) == 1 && len(r.Targets[0].Status) > 1 {
		fmt.Fprintf(w, "requests per target (every CPU window, seed %d):\n", r.Lab.Seed)
		for _, t := range r.Targets {
			fmt.Fprintf(w, "  %-6s %-50s %8d requests  p50 %7.2fms  p99 %7.2fms  %s\n", t.Method, t.URL, t.Requests, t.P50, t.P99, statuses(t.Status))
		}
	}
	for _, x := range r.Lab.BudgetNotes {
		fmt.Fprintf(w, "budget_limited: %s\n", x)
	}
	fmt.Fprintf(w, "lab: %d trials in %.0fs (budget %.0fs); %d comparisons undecided; load generator used %.1f CPU-seconds\n", r.Lab.Trials, r.Lab.WallSeconds, r.Lab.BudgetSeconds, r.Lab.Undecided, r.Lab.GeneratorCPUSeconds)
}

// statuses formats status counts, commonest first: "950 × 200, 3 × 503".
func statuses(m map[string]int) string { return load.Kinds(m) }
