package fleet

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSchemaDocumented: the results.json sample in docs/fleet.md has the
// keys Results writes, no more and no fewer (maps' keys aside).
func TestSchemaDocumented(t *testing.T) {
	md, err := os.ReadFile("../../../../docs/fleet.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(md), "## results.json")
	if !ok {
		t.Fatal("docs/fleet.md: no results.json section")
	}
	_, block, _ := strings.Cut(after, "```json\n")
	block, _, _ = strings.Cut(block, "```")
	var doc any
	if err := json.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("docs/fleet.md results.json sample: %v", err)
	}
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.1, throttled: 0.3, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 4, gomemlimit: 1 << 62, gogc: 100,
		req: Resources{0.25, 256 * mib}, lim: Resources{0.25, 256 * mib}}
	r := Analyze(input(week, step, s.pod("web-1", week, step)), Options{})
	// Fields left out when empty, filled so that their keys show.
	r.Notes = []string{"a note"}
	c := &r.Containers[0]
	c.Workload.Cluster, c.Gofit.GOGC, c.Gofit.Missing = "prod", "200", []string{"x"}
	c.Gofit.CPULimitKept, c.HPA, c.Gaps = true, &HPA{Name: "web", CPU: true}, []Finding{{GapHPA, "x"}}
	r.Unread, r.Gaps = map[string]int{UnreadNoContainer: 1}, map[string]int{GapHPA: 1}
	b, _ := json.Marshal(r)
	var got any
	json.Unmarshal(b, &got)
	want, have := keys("", doc), keys("", got)
	for _, k := range want {
		if !slices.Contains(have, k) {
			t.Errorf("docs/fleet.md documents %s, which results.json does not have", k)
		}
	}
	for _, k := range have {
		if !slices.Contains(want, k) {
			t.Errorf("results.json has %s, which docs/fleet.md does not document", k)
		}
	}
}

// keys lists the key paths of v; maps of free keys (sources, env, the
// top level's unread and gaps) stop
// at their own name, and arrays are read through their first element.
func keys(prefix string, v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := prefix + "." + k
			out = append(out, p)
			if k == "sources" || k == "env" || p == ".unread" || p == ".gaps" {
				continue
			}
			out = append(out, keys(p, c)...)
		}
	case []any:
		if len(x) > 0 {
			out = append(out, keys(prefix+"[]", x[0])...)
		}
	}
	slices.Sort(out)
	return out
}
