package lab

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gofit-dev/gofit/fit"
)

// headroom above the measured floor for the recommended memory limit:
// floors move with traffic mix and Go versions.
const memHeadroom = 1.25

// p99Slack is how far above the best p99 a quota may be and still count as
// good enough: short open-loop runs on a small machine vary by this much
// between identical configurations.
const p99Slack = 10.0

func (l *Lab) recommend() Recommendation {
	var rec Recommendation
	// CPU: the smallest quota whose open-loop p99 under gofit's plan stays
	// within twice (or p99Slack ms of) the best p99 seen at any quota.
	byQuota := map[float64]CPUSummary{}
	for _, s := range l.res.CPUSummary {
		if s.Mode == "open" && s.Setting == SetGofit {
			byQuota[s.QuotaCores] = s
		}
	}
	if len(byQuota) > 0 {
		best := math.Inf(1)
		for _, s := range byQuota {
			best = math.Min(best, s.P99.Median)
		}
		var quotas []float64
		for q := range byQuota {
			quotas = append(quotas, q)
		}
		sort.Float64s(quotas)
		for _, q := range quotas {
			if byQuota[q].P99.Median <= max(2*best, best+p99Slack) {
				s := byQuota[q]
				rec.CPURequestCores, rec.CPULimitCores = q, q
				rec.Reasons = append(rec.Reasons, fmt.Sprintf("CPU %s: the smallest quota tested whose open-loop p99 with gofit's plan (%.1fms at %.0f rps offered) is within 2x or 10ms of the best p99 at any quota (%.1fms)",
					millicores(q), s.P99.Median, l.offered(q), best))
				break
			}
		}
		rec.Reasons = append(rec.Reasons, l.cpuVerdicts()...)
	}
	// Memory: the floor under gofit's plan (else without knobs), plus headroom.
	floor, from := int64(0), ""
	for _, want := range []string{SetGofit, SetNone} {
		for _, m := range l.res.Memory {
			if m.Setting == want && m.FloorBytes != nil && floor == 0 {
				floor, from = *m.FloorBytes, want
			}
		}
	}
	if floor > 0 {
		const step = 4 << 20
		rec.MemoryLimitBytes = int64(math.Ceil(float64(floor)*memHeadroom/step)) * step
		rec.MemoryRequestBytes = rec.MemoryLimitBytes
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("memory %s: the floor with setting %q (%s) plus %.0f%% headroom; request = limit so the pod is not reclaimed before others",
			mebi(rec.MemoryLimitBytes), from, fit.FormatBytes(floor), (memHeadroom-1)*100))
		rec.Reasons = append(rec.Reasons, l.memVerdicts()...)
	}
	env, plan := l.planEnv(rec.CPULimitCores, rec.MemoryLimitBytes)
	delete(env, "GODEBUG") // the sample's lab setting, not advice
	rec.Env = env
	for _, r := range plan.Reasons {
		rec.Reasons = append(rec.Reasons, "env: "+r)
	}
	rec.YAML = deploymentYAML(rec)
	return rec
}

func (l *Lab) offered(q float64) float64 {
	var xs []float64
	for _, c := range l.res.CPU {
		if c.QuotaCores == q && c.Setting == SetGofit && c.Mode == "open" {
			xs = append(xs, c.OfferedRPS)
		}
	}
	return Summarize(xs).Median
}

// cpuVerdicts compares the settings at each quota by open-loop p99.
func (l *Lab) cpuVerdicts() []string {
	var out []string
	byQuota := map[float64][]CPUSummary{}
	var quotas []float64
	for _, s := range l.res.CPUSummary {
		if s.Mode != "open" {
			continue
		}
		if _, ok := byQuota[s.QuotaCores]; !ok {
			quotas = append(quotas, s.QuotaCores)
		}
		byQuota[s.QuotaCores] = append(byQuota[s.QuotaCores], s)
	}
	sort.Float64s(quotas)
	for _, q := range quotas {
		ss := byQuota[q]
		sort.Slice(ss, func(i, j int) bool { return ss[i].P99.Median < ss[j].P99.Median })
		parts := make([]string, len(ss))
		for i, s := range ss {
			parts[i] = fmt.Sprintf("%s (GOMAXPROCS %d) %.1fms", s.Setting, s.GOMAXPROCS, s.P99.Median)
		}
		out = append(out, fmt.Sprintf("at %s open-loop p99, best first: %s", millicores(q), strings.Join(parts, ", ")))
	}
	return out
}

func (l *Lab) memVerdicts() []string {
	var parts []string
	for _, m := range l.res.Memory {
		f := "none found"
		if m.FloorBytes != nil {
			f = fit.FormatBytes(*m.FloorBytes)
		}
		parts = append(parts, fmt.Sprintf("%s %s (%d trials)", m.Setting, f, len(m.Trials)))
	}
	return []string{"memory floors: " + strings.Join(parts, ", ")}
}

func millicores(c float64) string { return fmt.Sprintf("%dm", int(math.Round(c*1000))) }
func mebi(b int64) string         { return fmt.Sprintf("%dMi", (b+(1<<20)-1)>>20) }

func deploymentYAML(r Recommendation) string {
	var b strings.Builder
	b.WriteString("# container spec fragment from gofit lab\nresources:\n")
	for _, part := range []string{"requests", "limits"} {
		fmt.Fprintf(&b, "  %s:\n", part)
		cpu := r.CPURequestCores
		if part == "limits" {
			cpu = r.CPULimitCores
		}
		if cpu > 0 {
			fmt.Fprintf(&b, "    cpu: %s\n", millicores(cpu))
		}
		if r.MemoryLimitBytes > 0 {
			fmt.Fprintf(&b, "    memory: %s\n", mebi(r.MemoryLimitBytes))
		}
	}
	if len(r.Env) > 0 {
		b.WriteString("env:\n")
		keys := make([]string, 0, len(r.Env))
		for k := range r.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  - name: %s\n    value: %q\n", k, r.Env[k])
		}
	}
	return b.String()
}

// WriteFiles writes results.json and report.html into dir.
func WriteFiles(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, "results.json"), append(b, '\n')); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "report.html"), []byte(HTML(r)))
}

// writeAtomic writes via a temporary file, so an interrupted run never
// leaves a half-written report behind.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".gofit-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// WriteSummary prints the terminal summary.
func WriteSummary(w io.Writer, r *Results) {
	fmt.Fprintf(w, "\ngofit lab: %d CPUs, cgroup v%d, %s, kernel %s\n", r.Machine.CPUs, r.Machine.CgroupVersion, r.Machine.GoVersion, r.Machine.Kernel)
	fmt.Fprintf(w, "target: %s\n", r.Target.Command)
	if len(r.CPUSummary) > 0 {
		fmt.Fprintf(w, "\nCPU (median of repeats; open loop at a share of closed-loop capacity)\n")
		fmt.Fprintf(w, "  %-6s %-16s %5s %10s %10s %11s %10s %9s\n", "quota", "setting", "procs", "closed rps", "open p99", "throttled s", "cpu ms/req", "")
		for _, s := range r.CPUSummary {
			if s.Mode != "closed" {
				continue
			}
			var open CPUSummary
			for _, o := range r.CPUSummary {
				if o.Mode == "open" && o.QuotaCores == s.QuotaCores && o.Setting == s.Setting {
					open = o
				}
			}
			fmt.Fprintf(w, "  %-6s %-16s %5d %10.0f %8.1fms %11.2f %10.2f\n", millicores(s.QuotaCores), s.Setting, s.GOMAXPROCS, s.RPS.Median, open.P99.Median, open.ThrottledSeconds.Median, s.CPUMsPerRequest.Median)
		}
	}
	if len(r.Memory) > 0 {
		fmt.Fprintf(w, "\nMemory floors (page cache %s at start; peak without a limit %s)\n", r.Target.PageCache, fit.FormatBytes(int64(r.Target.PeakBytes)))
		for _, m := range r.Memory {
			f := "none up to the largest limit tried"
			if m.FloorBytes != nil {
				f = fit.FormatBytes(*m.FloorBytes)
			}
			fmt.Fprintf(w, "  %-26s %-12s %d trials\n", m.Setting, f, len(m.Trials))
		}
	}
	if len(r.Throughput) > 0 {
		fmt.Fprintf(w, "\nThroughput at multiples of the no-knob floor\n")
		for _, t := range r.Throughput {
			fmt.Fprintf(w, "  %-26s %4gx %-9s %-10s %7.0f rps  p99 %.1fms\n", t.Setting, t.Multiple, fit.FormatBytes(t.LimitBytes), t.Outcome, t.RPS, t.P99)
		}
	}
	fmt.Fprintf(w, "\nRecommendation\n")
	for _, s := range r.Recommendation.Reasons {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	fmt.Fprintf(w, "\n%s\n", r.Recommendation.YAML)
	fmt.Fprintf(w, "lab: %d trials in %.0fs; load generator used %.1f CPU-seconds\n", r.Lab.Trials, r.Lab.WallSeconds, r.Lab.GeneratorCPUSeconds)
}

// --- HTML report with inline SVG plots (no scripts, no external files) ---

type point struct{ x, y, lo, hi float64 }

type series struct {
	name   string
	points []point
}

type marker struct {
	x     float64
	label string
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// chart draws a line chart with min–max whiskers; markers are vertical
// lines labelled at the top.
func chart(title, xLabel, yLabel string, ss []series, markers []marker) string {
	return chartY(title, xLabel, yLabel, ss, markers, 0)
}

// chartY is chart with a fixed top of the y axis (0: fit the data).
func chartY(title, xLabel, yLabel string, ss []series, markers []marker, yTop float64) string {
	const w, h, ml, mr, mt, mb = 700.0, 340.0, 64.0, 230.0, 36.0, 48.0
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for _, p := range s.points {
			xmin, xmax = math.Min(xmin, p.x), math.Max(xmax, p.x)
			ymax = math.Max(ymax, math.Max(p.y, p.hi))
		}
	}
	for _, m := range markers {
		xmin, xmax = math.Min(xmin, m.x), math.Max(xmax, m.x)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure><svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, w, h, w, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="15" font-weight="bold">%s</text>`, ml, html.EscapeString(title))
	if math.IsInf(xmin, 1) {
		b.WriteString(`<text x="60" y="120">no data</text></svg></figure>`)
		return b.String()
	}
	if xmax == xmin {
		xmin, xmax = xmin*0.9-0.01, xmax*1.1+0.01
	}
	ymax = niceCeil(ymax * 1.05)
	if yTop > 0 {
		ymax = yTop
	}
	if ymax == 0 {
		ymax = 1
	}
	pw, ph := w-ml-mr, h-mt-mb
	X := func(x float64) float64 { return ml + (x-xmin)/(xmax-xmin)*pw }
	Y := func(y float64) float64 { return mt + ph - y/ymax*ph }
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, ml, mt, pw, ph)
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`,
			ml, ml+pw, Y(y), Y(y), ml-4, Y(y)+4, fmtNum(y))
	}
	for i := 0; i <= 4; i++ {
		x := xmin + (xmax-xmin)*float64(i)/4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`, X(x), mt+ph+16, fmtNum(x))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">%s</text>`, ml+pw/2, h-10, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="14" y="%.1f" font-size="12" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`, mt+ph/2, mt+ph/2, html.EscapeString(yLabel))
	for i, m := range markers {
		c := palette[i%len(palette)]
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="%s" stroke-dasharray="4 3"/><text x="%.1f" y="%.0f" font-size="10" fill="%s">%s</text>`,
			X(m.x), X(m.x), mt, mt+ph, c, X(m.x)+3, mt+12+float64(i)*12, c, html.EscapeString(m.label))
	}
	for i, s := range ss {
		c := palette[i%len(palette)]
		pts := append([]point(nil), s.points...)
		sort.Slice(pts, func(a, b int) bool { return pts[a].x < pts[b].x })
		var path []string
		for _, p := range pts {
			path = append(path, fmt.Sprintf("%.1f,%.1f", X(p.x), Y(p.y)))
			if p.hi > p.lo {
				fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, X(p.x), X(p.x), Y(p.lo), Y(p.hi), c)
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, X(p.x), Y(p.y), c)
		}
		fmt.Fprintf(&b, `<polyline class="series" fill="none" stroke="%s" stroke-width="2" points="%s"/>`, c, strings.Join(path, " "))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s"/><text x="%.0f" y="%.0f" font-size="12">%s</text>`,
			w-mr+12, mt+float64(i)*18, c, w-mr+28, mt+10+float64(i)*18, html.EscapeString(s.name))
	}
	b.WriteString(`</svg></figure>`)
	return b.String()
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func cpuSeries(r *Results, mode string, f func(CPUSummary) Summary) []series {
	by := map[string][]point{}
	var names []string
	for _, s := range r.CPUSummary {
		if s.Mode != mode {
			continue
		}
		if _, ok := by[s.Setting]; !ok {
			names = append(names, s.Setting)
		}
		v := f(s)
		by[s.Setting] = append(by[s.Setting], point{s.QuotaCores, v.Median, v.Min, v.Max})
	}
	sort.Strings(names)
	out := make([]series, len(names))
	for i, n := range names {
		out[i] = series{n, by[n]}
	}
	return out
}

// HTML renders report.html.
func HTML(r *Results) string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>gofit lab report</title><style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td:nth-child(-n+2){text-align:left}pre{background:#f6f6f6;padding:1em}
figure{display:inline-block;margin:0.5em}</style></head><body>`)
	fmt.Fprintf(&b, "<h1>gofit lab report</h1><p>%d CPUs, cgroup v%d, %s, kernel %s. Target: <code>%s</code>. %s.</p>",
		r.Machine.CPUs, r.Machine.CgroupVersion, html.EscapeString(r.Machine.GoVersion), html.EscapeString(r.Machine.Kernel),
		html.EscapeString(r.Target.Command), html.EscapeString(r.Target.GoDefaultNote))
	b.WriteString("<h2>Recommendation</h2><ul>")
	for _, s := range r.Recommendation.Reasons {
		fmt.Fprintf(&b, "<li>%s</li>", html.EscapeString(s))
	}
	fmt.Fprintf(&b, "</ul><pre>%s</pre>", html.EscapeString(r.Recommendation.YAML))

	b.WriteString("<h2>CPU</h2><p>Median of repeats, whiskers min–max. Closed loop: fixed requests at fixed concurrency. Open loop: a fixed rate at a share of the closed-loop capacity, latency from the intended send time.</p>")
	b.WriteString(chart("Throughput (closed loop)", "CPU quota (cores)", "requests/s", cpuSeries(r, "closed", func(s CPUSummary) Summary { return s.RPS }), nil))
	b.WriteString(chart("p99 latency (open loop)", "CPU quota (cores)", "p99 ms", cpuSeries(r, "open", func(s CPUSummary) Summary { return s.P99 }), nil))
	b.WriteString(chart("Throttled time (open loop)", "CPU quota (cores)", "throttled seconds", cpuSeries(r, "open", func(s CPUSummary) Summary { return s.ThrottledSeconds }), nil))
	b.WriteString(chart("CPU per request (closed loop)", "CPU quota (cores)", "CPU ms / request", cpuSeries(r, "closed", func(s CPUSummary) Summary { return s.CPUMsPerRequest }), nil))
	b.WriteString("<table><tr><th>quota</th><th>setting</th><th>mode</th><th>GOMAXPROCS</th><th>rps (min/med/max)</th><th>p99 ms (min/med/max)</th><th>throttled s</th><th>CPU ms/req</th></tr>")
	for _, s := range r.CPUSummary {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%.0f / %.0f / %.0f</td><td>%.1f / %.1f / %.1f</td><td>%.2f</td><td>%.2f</td></tr>",
			millicores(s.QuotaCores), html.EscapeString(s.Setting), s.Mode, s.GOMAXPROCS, s.RPS.Min, s.RPS.Median, s.RPS.Max, s.P99.Min, s.P99.Median, s.P99.Max, s.ThrottledSeconds.Median, s.CPUMsPerRequest.Median)
	}
	b.WriteString("</table>")

	b.WriteString("<h2>Memory</h2>")
	fmt.Fprintf(&b, "<p>Each trial starts the target with its binary's page cache %s (evicted, as in a new container), under a memory limit, and drives a fixed load. A trial fails on an OOM kill, on errors, or on a stall (no progress while major faults or limit hits climb). Peak without a limit: %s.</p>",
		r.Target.PageCache, fit.FormatBytes(int64(r.Target.PeakBytes)))
	var surv, thr []series
	var marks []marker
	for _, m := range r.Memory {
		var pts []point
		for _, s := range m.Survival {
			pts = append(pts, point{x: float64(s.LimitBytes) / (1 << 20), y: float64(s.Passed) / float64(s.Runs)})
		}
		surv = append(surv, series{m.Setting, pts})
		if m.FloorBytes != nil {
			marks = append(marks, marker{float64(*m.FloorBytes) / (1 << 20), "floor " + m.Setting + " " + fit.FormatBytes(*m.FloorBytes)})
		}
		var tp []point
		for _, t := range r.Throughput {
			if t.Setting == m.Setting {
				tp = append(tp, point{x: float64(t.LimitBytes) / (1 << 20), y: t.RPS})
			}
		}
		thr = append(thr, series{m.Setting, tp})
	}
	b.WriteString(chartY("Survival against memory limit", "memory limit (MiB)", "share of runs that survived", surv, marks, 1))
	b.WriteString(chart("Throughput against memory limit", "memory limit (MiB)", "requests/s", thr, marks))
	b.WriteString("<table><tr><th>setting</th><th>limit</th><th>outcome</th><th>rps</th><th>p99 ms</th><th>peak</th><th>page cache</th><th>major faults</th><th>resident before</th><th>detail</th></tr>")
	for _, m := range r.Memory {
		for _, t := range m.Trials {
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%.0f</td><td>%.1f</td><td>%s</td><td>%s</td><td>%d</td><td>%.0f%%</td><td>%s</td></tr>",
				html.EscapeString(m.Setting), fit.FormatBytes(t.LimitBytes), t.Outcome, t.RPS, t.P99, fit.FormatBytes(int64(t.PeakBytes)), fit.FormatBytes(int64(t.PageCacheBytes)), t.MajorFaults, t.ResidentBefore*100, html.EscapeString(t.Detail))
		}
	}
	b.WriteString("</table>")
	fmt.Fprintf(&b, "<h2>The lab itself</h2><p>%d trials in %.0f s; the load generator used %.1f CPU-seconds outside the target's cgroup.</p></body></html>\n",
		r.Lab.Trials, r.Lab.WallSeconds, r.Lab.GeneratorCPUSeconds)
	return b.String()
}
