package promtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A real Prometheus scrapes a real HTTP target with the labels the test
// gives it, evaluates a rule file, and answers a query and the alerts.
func TestServer(t *testing.T) {
	b := Need(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "# TYPE demo_value gauge\ndemo_value 42")
	}))
	defer srv.Close()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("groups:\n- name: demo\n  rules:\n  - alert: DemoHigh\n    expr: demo_value > 40\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := Start(t, b, Config{Interval: 200 * time.Millisecond, RuleFiles: []string{rules},
		Targets: []Target{{Job: "demo", Addr: strings.TrimPrefix(srv.URL, "http://"), Labels: map[string]string{"pod": "p1"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		got, err := s.Query(ctx, `demo_value{pod="p1", job="demo"}`)
		if err != nil {
			t.Fatal(err)
		}
		alerts, err := s.Alerts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 && got[0].Value == 42 && Firing(alerts, "DemoHigh", map[string]string{"pod": "p1"}) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no sample or no alert after 30s: %v, %v", got, alerts)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := s.Query(ctx, "vector(1"); err == nil || !strings.Contains(err.Error(), "vector(1") {
		t.Errorf("a bad query: %v", err)
	}

	// A target added after the start, by reload: scraped, and the first
	// one gone.
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "# TYPE demo_value gauge\ndemo_value 7")
	}))
	defer srv2.Close()
	if err := s.SetTargets(ctx, []Target{{Job: "demo", Addr: strings.TrimPrefix(srv2.URL, "http://"), Labels: map[string]string{"pod": "p2"}}}); err != nil {
		t.Fatal(err)
	}
	health, err := s.TargetHealth(ctx)
	if err != nil || len(health) != 1 {
		t.Fatalf("targets after the reload: %v (%v), want srv2's alone", health, err)
	}
	for {
		got, err := s.Query(ctx, `demo_value{pod="p2"}`)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 && got[0].Value == 7 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no sample from the target added by reload: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
