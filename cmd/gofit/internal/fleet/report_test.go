package fleet

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReport renders the table, report.html and the files of a fleet of
// an unfitted workload, a fitted one and one with too little data.
func TestReport(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	unfitted := shape{cpu: 0.1, wave: 0.03, throttled: 0.3, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 4, gomemlimit: 1 << 62, gogc: 100,
		req: Resources{0.25, 256 * mib}, lim: Resources{0.25, 256 * mib}}
	fitted := shape{cpu: 0.5, wave: 0.1, gc: 0.02, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gomemlimit: 0.9 * 400 * mib, gogc: 100,
		req: Resources{0.65, 400 * mib}, lim: Resources{1, 400 * mib}}
	in := input(week, step, unfitted.pod("web-1", week, step), unfitted.pod("web-2", week, step))
	in.Groups = append(in.Groups,
		Group{Workload: Workload{Namespace: "shop", Kind: "StatefulSet", Name: "cart"}, Container: "app", Pods: []Pod{fitted.pod("cart-0", week, step)}},
		Group{Workload: Workload{Namespace: "shop", Kind: "Deployment", Name: "new"}, Container: "app", Pods: []Pod{fitted.pod("new-1", 10, step)}})
	in.Sources = map[string]string{"cpu": "container_cpu_usage_seconds_total (cAdvisor)"}
	r := Analyze(in, Options{})
	var tab bytes.Buffer
	WriteTable(&tab, r)
	for _, want := range []string{"shop/Deployment/web", "gomaxprocs_above_limit,gomemlimit_unset", "not_enough_data: not enough data: missing history"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	dir := os.Getenv("GOFIT_FLEET_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	files, _, err := WriteFiles(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	// Patches for the two with figures (kubectl's and kustomize's, two
	// kustomization.yaml); none for the one without.
	if len(files) != 2+4+4+2 {
		t.Errorf("files %q", files)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), "<svg"); n != 6 {
		t.Errorf("%d plots, want 2 per container", n)
	}
	js, _ := os.ReadFile(filepath.Join(dir, "results.json"))
	var back Results
	if err := json.Unmarshal(js, &back); err != nil || len(back.Containers) != 3 || back.Containers[0].Gofit.CPURequest.Valid() || back.Containers[0].Workload.Name != "new" {
		t.Errorf("results.json: %v, %d containers", err, len(back.Containers))
	}
}
