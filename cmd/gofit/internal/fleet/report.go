package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	labreport "github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
)

// WriteTable prints the terminal table, then each container's findings
// and the reasons for gofit's figures.
func WriteTable(w io.Writer, r *Results) {
	fmt.Fprintf(w, "gofit fleet: %d Go containers in %d workload containers, %s to %s, steps of %s (%d containers without go_* series left out)\n",
		podCount(r), len(r.Containers), r.Start.UTC().Format("2006-01-02 15:04"), r.End.UTC().Format("2006-01-02 15:04 MST"),
		fmtDuration(secs(r.StepSeconds)), r.NonGo)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCONTAINER\tPODS\tCPU REQ/LIM\tMEM LIM\tGOMAXPROCS\tGOMEMLIMIT\tCPU P95\tTHROTTLED\tGC\tLIVE HEAP MAX\tWS MAX\t│ GOFIT CPU\tMEM\tGOMAXPROCS\tGOMEMLIMIT\t│ KRR CPU\tMEM\t│ VPA CPU\tMEM\tFINDINGS")
	for _, c := range r.Containers {
		o, g := c.Observed, c.Gofit
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t│ %s\t%s\t%s\t%s\t│ %s\t%s\t│ %s\t%s\t%s\n",
			c.Workload, c.Container, len(c.Pods), cores0(o.Requests.CPU), cores0(o.Limits.CPU), bytes0(o.Limits.Memory),
			num(o.GOMAXPROCS, "%.0f"), gomemlimit(o.GOMEMLIMIT), coresN(o.CPU.P95), pct(o.ThrottledShare), pct(o.GCShare),
			bytesN(o.LiveHeap.Max), bytesN(o.WorkingSet.Max),
			recCPU(g), bytesN(g.Memory), intOr(g.GOMAXPROCS, g.Enough()), bytesOr(g.GOMEMLIMIT, g.Enough()),
			recCPU(c.KRR), bytesN(c.KRR.Memory), coresN(c.VPA.CPURequest), bytesN(c.VPA.Memory), findingCodes(c))
	}
	tw.Flush()
	for _, c := range r.Containers {
		if len(c.Findings) == 0 && len(c.Gaps) == 0 && !c.Gofit.Enough() {
			continue
		}
		fmt.Fprintf(w, "\n%s %s:\n", c.Workload, c.Container)
		for _, f := range c.Findings {
			fmt.Fprintf(w, "  ! %s: %s\n", f.Code, f.Text)
		}
		for _, s := range c.Gofit.Reasons {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		for _, g := range c.Gaps {
			fmt.Fprintf(w, "  ? %s: %s\n", g.Code, g.Text)
		}
	}
	if len(r.Unread) > 0 || len(r.Gaps) > 0 {
		fmt.Fprintf(w, "\nNot read, or read with assumptions:\n")
		for _, k := range sortedKeys(r.Unread) {
			fmt.Fprintf(w, "  %d %s: left out\n", r.Unread[k], k)
		}
		for _, k := range sortedKeys(r.Gaps) {
			fmt.Fprintf(w, "  %d workload containers: %s\n", r.Gaps[k], k)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func podCount(r *Results) int {
	n := 0
	for _, c := range r.Containers {
		n += len(c.Pods)
	}
	return n
}

func findingCodes(c Container) string {
	var s []string
	for _, f := range c.Findings {
		s = append(s, f.Code)
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func recCPU(r Recommendation) string {
	if !r.CPURequest.Valid() {
		return "–"
	}
	lim := "none"
	if r.CPULimit.Valid() {
		lim = fmtCores(float64(r.CPULimit))
	}
	return fmtCores(float64(r.CPURequest)) + "/" + lim
}

func cores0(c float64) string {
	if c == 0 {
		return "none"
	}
	return fmtCores(c)
}

func bytes0(b float64) string {
	if b == 0 {
		return "none"
	}
	return fmtBytes(b)
}

func coresN(n Num) string {
	if !n.Valid() {
		return "–"
	}
	return fmtCores(float64(n))
}

func bytesN(n Num) string {
	if !n.Valid() {
		return "–"
	}
	return fmtBytes(float64(n))
}

func num(n Num, format string) string {
	if !n.Valid() {
		return "–"
	}
	return fmt.Sprintf(format, float64(n))
}

func pct(n Num) string {
	if !n.Valid() {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n))
}

func gomemlimit(n Num) string {
	switch {
	case !n.Valid():
		return "–"
	case n == 0:
		return "unset"
	}
	return fmtBytes(float64(n))
}

func intOr(v int, ok bool) string {
	if !ok || v == 0 {
		return "–"
	}
	return fmt.Sprint(v)
}

func bytesOr(v int64, ok bool) string {
	if !ok || v == 0 {
		return "–"
	}
	return fmtBytes(float64(v))
}

// Failing lists the findings whose code is in codes, for --fail-on.
func Failing(r *Results, codes []string) []string {
	var out []string
	for _, c := range r.Containers {
		for _, f := range c.Findings {
			for _, want := range codes {
				if f.Code == want {
					out = append(out, fmt.Sprintf("%s %s: %s", c.Workload, c.Container, f.Code))
				}
			}
		}
	}
	return out
}

// WriteFiles writes results.json, report.html, the patches (patches/,
// for kubectl) and the same as kustomize patches (kustomize/env/ and
// kustomize/webhook/, each with its kustomization.yaml) into dir; skipped
// says which workloads got no patch and why (also in patches/skipped.txt).
// Every file lands inside dir: a name that would not is an error.
func WriteFiles(dir string, r *Results) (files, skipped []string, err error) {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encode results: %w", err)
	}
	html, err := RenderHTML(r)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string][]byte{"results.json": append(js, '\n'), "report.html": html}
	patches, skipped, err := Patches(r)
	if err != nil {
		return nil, nil, err
	}
	kust := map[string][]string{}
	for _, p := range patches {
		byName[filepath.Join("patches", p.File)] = p.Body
		byName[filepath.Join("kustomize", p.Mode, p.File)] = p.Kustomize
		kust[p.Mode] = append(kust[p.Mode], p.File)
	}
	for mode, names := range kust {
		var b strings.Builder
		b.WriteString("# gofit fleet: add these patches to an overlay whose resources hold the workloads\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\npatches:\n")
		for _, n := range names {
			fmt.Fprintf(&b, "- path: %s\n", n)
		}
		byName[filepath.Join("kustomize", mode, "kustomization.yaml")] = []byte(b.String())
	}
	if len(skipped) > 0 {
		byName[filepath.Join("patches", "skipped.txt")] = []byte(strings.Join(skipped, "\n") + "\n")
	}
	for name, b := range byName {
		if !filepath.IsLocal(name) {
			return nil, nil, fmt.Errorf("write %s into %s: not a name inside it", name, dir)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, nil, fmt.Errorf("report directory: %w", err)
		}
		if err := labreport.WriteAtomic(p, b); err != nil {
			return nil, nil, err
		}
		files = append(files, p)
	}
	sort.Strings(files)
	removed, err := pruneStale(dir, byName)
	for _, r := range removed {
		skipped = append(skipped, "removed "+r+": an earlier run's, not in this one")
	}
	return files, skipped, err
}

// pruneStale removes from a reused --out the patches and kustomize files
// an earlier run wrote that this one did not: applied with the rest, a
// stale patch would undo a newer one. Only files gofit fleet writes are
// removed (its header, or patches/skipped.txt); anything else is left.
func pruneStale(dir string, written map[string][]byte) ([]string, error) {
	var removed []string
	for _, sub := range []string{"patches", "kustomize"} {
		err := filepath.WalkDir(filepath.Join(dir, sub), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			if _, ok := written[rel]; ok {
				return nil
			}
			ours := rel == filepath.Join("patches", "skipped.txt")
			if !ours {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				head := make([]byte, len("# gofit fleet: "))
				n, _ := io.ReadFull(f, head)
				f.Close()
				ours = string(head[:n]) == "# gofit fleet: "
			}
			if ours {
				if err := os.Remove(p); err != nil {
					return err
				}
				removed = append(removed, rel)
			}
			return nil
		})
		if err != nil {
			return removed, fmt.Errorf("remove stale files from %s: %w", dir, err)
		}
	}
	return removed, nil
}

var tmpl = template.Must(template.New("fleet").Funcs(template.FuncMap{
	"cores": coresN, "bytes": bytesN, "pct": pct, "rec": recCPU, "gml": gomemlimit, "num": num,
	"cores0": cores0, "bytes0": bytes0,
	"int":    func(v int, r Recommendation) string { return intOr(v, r.Enough()) },
	"bytesI": func(v int64, r Recommendation) string { return bytesOr(v, r.Enough()) },
	"anchor": anchor,
	"span":   func(s float64) string { return fmtDuration(secs(s)) },
	"list":   func(rs ...Recommendation) []Recommendation { return rs },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gofit fleet</title>
<style>
{{.CSS}}
.find{color:#a40000}.ok{color:#2a7a2a}
</style></head><body>
<h1>gofit fleet</h1>
<p class="meta">{{len .R.Containers}} workload containers with go_* series, from {{.R.Start.UTC.Format "2006-01-02 15:04"}} to {{.R.End.UTC.Format "2006-01-02 15:04 MST"}} in steps of {{printf "%.0f" .R.StepSeconds}} s; {{.R.NonGo}} containers without go_* series left out. Recommendations are per container (per pod); nothing here is applied: the patches are in patches/.</p>
{{range .R.Notes}}<div class="warn">{{.}}</div>{{end}}
{{range $k, $v := .R.Unread}}<div class="warn">{{$v}} {{$k}}: left out</div>{{end}}
{{range $k, $v := .R.Gaps}}<div class="warn">{{$v}} workload containers: {{$k}}</div>{{end}}
<h2>Summary</h2>
<table><tr><th rowspan="2">workload · container</th><th colspan="4">observed</th><th colspan="2">gofit</th><th>KRR simple</th><th>VPA</th><th rowspan="2">findings</th></tr>
<tr><th>CPU req/lim<br>memory limit</th><th>GOMAXPROCS<br>GOMEMLIMIT</th><th>CPU p95<br>throttled · GC</th><th>live heap max<br>working set max</th>
<th>CPU req/lim<br>memory</th><th>GOMAXPROCS<br>GOMEMLIMIT</th><th>CPU req/lim<br>memory</th><th>CPU<br>memory</th></tr>
{{range .R.Containers}}<tr><td><a href="#{{anchor .}}">{{.Workload}}</a><br>{{.Container}} ({{len .Pods}} pods)</td>
<td>{{cores0 .Observed.Requests.CPU}}/{{cores0 .Observed.Limits.CPU}}<br>{{bytes0 .Observed.Limits.Memory}}</td><td>{{num .Observed.GOMAXPROCS "%.0f"}}<br>{{gml .Observed.GOMEMLIMIT}}</td>
<td>{{cores .Observed.CPU.P95}}<br>{{pct .Observed.ThrottledShare}} · {{pct .Observed.GCShare}}</td><td>{{bytes .Observed.LiveHeap.Max}}<br>{{bytes .Observed.WorkingSet.Max}}</td>
<td>{{rec .Gofit}}<br>{{bytes .Gofit.Memory}}</td><td>{{int .Gofit.GOMAXPROCS .Gofit}}<br>{{bytesI .Gofit.GOMEMLIMIT .Gofit}}</td>
<td>{{rec .KRR}}<br>{{bytes .KRR.Memory}}</td><td>{{cores .VPA.CPURequest}}<br>{{bytes .VPA.Memory}}</td>
<td style="text-align:left">{{range .Findings}}<span class="find">{{.Code}}</span><br>{{else}}<span class="ok">none</span>{{end}}</td></tr>
{{end}}</table>
{{range $i, $c := .R.Containers}}
<h2 id="{{anchor $c}}">{{$c.Workload}} · {{$c.Container}}</h2>
<p class="meta">Pods: {{range $c.Pods}}{{.}} {{end}}· {{$c.Observed.Samples}} samples over {{span $c.Observed.SpanSeconds}} · Go {{or $c.Observed.GoVersion "unknown"}} · GOGC {{num $c.Observed.GOGC "%.0f"}} · CPU p50/p95/p99/max {{cores $c.Observed.CPU.P50}}/{{cores $c.Observed.CPU.P95}}/{{cores $c.Observed.CPU.P99}}/{{cores $c.Observed.CPU.Max}} · live heap p99/max {{bytes $c.Observed.LiveHeap.P99}}/{{bytes $c.Observed.LiveHeap.Max}} ({{$c.Observed.LiveHeapSource}}) · working set p99/max {{bytes $c.Observed.WorkingSet.P99}}/{{bytes $c.Observed.WorkingSet.Max}} · outside the heap {{bytes $c.Observed.NonHeap}} · OOM kills {{$c.Observed.OOMKills}} · restarts {{$c.Observed.Restarts}}</p>
{{range $c.Findings}}<div class="alert"><b>{{.Code}}</b>: {{.Text}}</div>{{end}}
{{range $c.Gaps}}<div class="warn"><b>{{.Code}}</b>: {{.Text}}</div>{{end}}
<div class="top">{{index $.Plots $i}}</div>
<table><tr><th>method</th><th>CPU req/lim</th><th>memory</th><th>why</th></tr>
{{range (list $c.Gofit $c.KRR $c.VPA)}}<tr><td>{{.Method}}</td><td>{{rec .}}</td><td>{{bytes .Memory}}</td><td style="text-align:left">{{range .Reasons}}{{.}}<br>{{end}}{{if .Env}}env: {{range $k, $v := .Env}}{{$k}}={{$v}} {{end}}{{end}}</td></tr>{{end}}
</table>
{{end}}
<h2>Sources</h2>
<table>{{range $k, $v := .R.Sources}}<tr><td>{{$k}}</td><td style="text-align:left">{{$v}}</td></tr>{{end}}</table>
</body></html>
`))

func anchor(c Container) string {
	return strings.NewReplacer("/", "-", ":", "-", " ", "-").Replace(c.Workload.String() + "-" + c.Container)
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// RenderHTML renders report.html: the summary table, then per workload
// container its figures, plots of usage against each method's figures,
// and every method's reasons.
func RenderHTML(r *Results) ([]byte, error) {
	var plots []template.HTML
	for _, c := range r.Containers {
		// Each point is the peak of its run of steps (Series), plotted at
		// the run's end.
		per := max(1, c.Series.Per)
		hours := make([]float64, len(c.Series.CPU))
		for i := range hours {
			hours[i] = float64((i+1)*per) * r.StepSeconds / 3600
		}
		flat := func(name string, v Num) (labreport.ChartLine, bool) {
			if !v.Valid() || len(hours) == 0 {
				return labreport.ChartLine{}, false
			}
			return labreport.ChartLine{Name: name, X: []float64{hours[0], hours[len(hours)-1]}, Y: []float64{float64(v), float64(v)}}, true
		}
		cpu := []labreport.ChartLine{{Name: "CPU used (busiest pod)", X: hours, Y: c.Series.CPU}}
		for _, l := range []struct {
			name string
			v    Num
		}{{"gofit request", c.Gofit.CPURequest}, {"gofit limit", c.Gofit.CPULimit}, {"KRR request", c.KRR.CPURequest}, {"VPA target", c.VPA.CPURequest}} {
			if cl, ok := flat(l.name, l.v); ok {
				cpu = append(cpu, cl)
			}
		}
		mib := func(s []float64) []float64 {
			out := make([]float64, len(s))
			for i, v := range s {
				out[i] = v / (1 << 20)
			}
			return out
		}
		mem := []labreport.ChartLine{{Name: "working set (peak pod)", X: hours, Y: mib(c.Series.WorkingSet)}, {Name: "live heap (peak pod)", X: hours, Y: mib(c.Series.LiveHeap)}}
		for _, l := range []struct {
			name string
			v    Num
		}{{"gofit memory", c.Gofit.Memory}, {"KRR memory", c.KRR.Memory}, {"VPA memory", c.VPA.Memory}} {
			if cl, ok := flat(l.name, l.v/(1<<20)); ok {
				mem = append(mem, cl)
			}
		}
		plots = append(plots, labreport.ChartSVG("CPU against the recommendations", "hours from the start", "cores", false, cpu)+
			labreport.ChartSVG("memory against the recommendations", "hours from the start", "MiB", false, mem))
	}
	var buf bytes.Buffer
	err := tmpl.Execute(&buf, struct {
		R     *Results
		CSS   template.CSS
		Plots []template.HTML
	}{r, template.CSS(labreport.CSS), plots})
	if err != nil {
		return nil, fmt.Errorf("render report.html: %w", err)
	}
	return buf.Bytes(), nil
}
