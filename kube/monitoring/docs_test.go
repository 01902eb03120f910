package monitoring

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestAlertsDocumented: every alert has its severity, summary,
// description, a runbook_url whose section exists in docs/monitoring.md,
// and the labels of what it is about.
func TestAlertsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ +(.+)$`).FindAllStringSubmatch(string(doc), -1) {
		sections["#"+strings.ToLower(strings.TrimSpace(m[1]))] = true
	}
	gs, err := Groups(Default())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range alertRules(gs) {
		n++
		if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: severity %q, summary %q, description %q", r.Alert, r.Labels["severity"], r.Annotations["summary"], r.Annotations["description"])
		}
		u := r.Annotations["runbook_url"]
		if i := strings.Index(u, "#"); i < 0 || !sections[u[i:]] {
			t.Errorf("%s: runbook_url %s has no section in docs/monitoring.md", r.Alert, u)
		}
		// About a container, or about gofit's webhook (by name) or a
		// cluster (absent targets).
		if !strings.Contains(r.Expr, byContainer) && !strings.Contains(r.Expr, "cluster, name") && !strings.Contains(r.Expr, "by (cluster)") && !strings.Contains(r.Expr, "cluster, namespace, pod") {
			t.Errorf("%s: not aggregated by %s:\n%s", r.Alert, byContainer, r.Expr)
		}
	}
	if n < 15 {
		t.Errorf("%d alerts", n)
	}
}
