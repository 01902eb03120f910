// Package promtest runs a real Prometheus for tests: it installs the
// prometheus and promtool binaries once (Debian's package, pinned by
// version and cached under ~/.cache/gofit), starts a server that scrapes
// the targets a test names, with the labels it gives them, evaluates rule
// files, and answers queries and alerts through the HTTP API. The
// monitoring tests (kube/monitoring) use it to prove alerts and dashboard
// queries on real processes; an experiment's test can use it to scrape
// labelled arms.
package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DebianVersion is the Debian (bookworm) prometheus package the binaries
// come from: Prometheus and promtool 2.42. Change it when the archive
// moves on; the cache directory is named after it.
const DebianVersion = "2.42.0+ds-5+deb12u1"

// Binaries are the paths of prometheus and promtool.
type Binaries struct {
	Prometheus string
	Promtool   string
}

// ErrNoInstaller means the binaries are not cached and this machine has
// no apt-get or dpkg-deb to fetch them with.
var ErrNoInstaller = errors.New("no apt-get and dpkg-deb to install the prometheus package")

var installMu sync.Mutex

// Install returns the binaries, fetching the package into the cache the
// first time: `apt-get download prometheus=DebianVersion` and `dpkg-deb
// -x`, nothing run from it and nothing installed system-wide. With
// GOFIT_PROMETHEUS_DIR set, the binaries are taken from that directory.
func Install() (Binaries, error) {
	if d := os.Getenv("GOFIT_PROMETHEUS_DIR"); d != "" {
		b := Binaries{filepath.Join(d, "prometheus"), filepath.Join(d, "promtool")}
		for _, f := range []string{b.Prometheus, b.Promtool} {
			if _, err := os.Stat(f); err != nil {
				return Binaries{}, fmt.Errorf("GOFIT_PROMETHEUS_DIR: %w", err)
			}
		}
		return b, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	home, err := os.UserHomeDir()
	if err != nil {
		return Binaries{}, fmt.Errorf("find the cache: %w", err)
	}
	dir := filepath.Join(home, ".cache", "gofit", "prometheus-"+DebianVersion)
	b := Binaries{filepath.Join(dir, "usr", "bin", "prometheus"), filepath.Join(dir, "usr", "bin", "promtool")}
	if _, err := os.Stat(b.Promtool); err == nil {
		return b, nil
	}
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Binaries{}, ErrNoInstaller
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return Binaries{}, fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".prometheus-*")
	if err != nil {
		return Binaries{}, fmt.Errorf("create a download directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	download := func() ([]byte, error) {
		get := exec.Command("apt-get", "download", "-q", "prometheus="+DebianVersion)
		get.Dir = tmp
		return get.CombinedOutput()
	}
	out, err := download()
	if err != nil && os.Geteuid() == 0 {
		// A fresh machine has no package lists yet: fetch them once.
		if upd, uerr := exec.Command("apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
			return Binaries{}, fmt.Errorf("apt-get update: %w\n%s", uerr, upd)
		}
		out, err = download()
	}
	if err != nil {
		return Binaries{}, fmt.Errorf("apt-get download prometheus=%s (move promtest.DebianVersion to what apt-cache policy prometheus offers): %w\n%s", DebianVersion, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "prometheus_*.deb"))
	if len(debs) != 1 {
		return Binaries{}, fmt.Errorf("apt-get download prometheus=%s left %d packages in %s", DebianVersion, len(debs), tmp)
	}
	root := filepath.Join(tmp, "root")
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("dpkg-deb -x %s: %w\n%s", debs[0], err, out)
	}
	if err := os.Rename(root, dir); err != nil {
		return Binaries{}, fmt.Errorf("move the package into %s: %w", dir, err)
	}
	return b, nil
}

// Need returns the binaries or skips the test, with one line, where the
// machine cannot install them; any other failure fails the test.
func Need(t testing.TB) Binaries {
	t.Helper()
	b, err := Install()
	if errors.Is(err, ErrNoInstaller) {
		t.Skipf("skipping: %v (set GOFIT_PROMETHEUS_DIR to a directory with prometheus and promtool)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Target is one scrape target: an address serving /metrics (Path) and
// the labels its series get (namespace, pod, container, ... as a
// PodMonitor would give them).
type Target struct {
	Job    string
	Addr   string
	Path   string // default /metrics
	HTTPS  bool   // scheme https, certificate not verified
	Labels map[string]string
	// Interval, when set, is this target's scrape interval and timeout
	// (default Config.Interval): a kubelet's cAdvisor in an emulated
	// guest can take longer to answer than a service's /metrics.
	Interval time.Duration
}

// Config is what the server scrapes and evaluates.
type Config struct {
	Interval  time.Duration // scrape and rule evaluation interval (default 1s)
	RuleFiles []string
	Targets   []Target
	// Ready bounds the wait for the server to start (default 30s; an
	// emulated VM needs minutes).
	Ready time.Duration
	// Host is the address to serve on, on a free port (default
	// 127.0.0.1; a node's address for clients in pods).
	Host string
	// DataDir, when set, is the TSDB to serve (blocks written
	// beforehand); the server writes its head and compactions there.
	// Default: a new one in the test's temporary directory.
	DataDir string
	// Args are more flags for the server (retention, query limits).
	Args []string
	// QueryLog, when set, is a file the server logs every query to,
	// with its timings (Prometheus's query_log_file).
	QueryLog string
}

// Server is a running Prometheus.
type Server struct {
	URL string
	// LogFile is the server's log (warnings and errors): rule
	// evaluation results it refused to ingest are logged there.
	LogFile string
	// Stop ends the server before the test does (the test's end stops it
	// too; either may come first).
	Stop func()
	cmd  *exec.Cmd
	conf string
	cfg  Config
}

// PID is the server's process, for its resource use.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Start runs Prometheus with cfg until the test ends, and waits until it
// is ready. Its data and log stay in the test's temporary directory; the
// log is shown when the test fails.
func Start(t testing.TB, b Binaries, cfg Config) *Server {
	t.Helper()
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(configYAML(cfg)), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, err := freeAddr(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	data := cfg.DataDir
	if data == "" {
		data = filepath.Join(dir, "data")
	}
	cmd := exec.Command(b.Prometheus, append([]string{
		"--config.file=" + conf,
		"--storage.tsdb.path=" + data,
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, cfg.Args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", b.Prometheus, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s := &Server{URL: "http://" + addr, LogFile: logf.Name(), cmd: cmd, conf: conf, cfg: cfg}
	s.Stop = sync.OnceFunc(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			if out, err := os.ReadFile(logf.Name()); err == nil && len(out) > 0 {
				t.Logf("prometheus log:\n%s", tail(out, 4000))
			}
		}
	})
	if cfg.Ready <= 0 {
		cfg.Ready = 30 * time.Second
	}
	deadline := time.Now().Add(cfg.Ready)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-done:
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("prometheus exited before it was ready:\n%s", tail(out, 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready after %v", addr, cfg.Ready)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SetTargets replaces what the server scrapes (a SIGHUP reload, as a
// Prometheus in production takes a new configuration) and waits until
// every target is active: a test can start Prometheus, and what reads
// it, before the pods it will scrape exist.
func (s *Server) SetTargets(ctx context.Context, targets []Target) error {
	cfg := s.cfg
	cfg.Targets = targets
	if err := os.WriteFile(s.conf, []byte(configYAML(cfg)), 0o644); err != nil {
		return err
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload prometheus: %w", err)
	}
	s.cfg = cfg
	for {
		active, err := s.TargetHealth(ctx)
		missing := len(targets)
		if err == nil {
			missing = 0
			for _, tg := range targets {
				found := false
				for u := range active {
					found = found || strings.Contains(u, "//"+tg.Addr+"/")
				}
				if !found {
					missing++
				}
			}
			if missing == 0 && len(active) == len(targets) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("prometheus reloaded with %d targets: %d not active (%d active): %w (last error: %v)", len(targets), missing, len(active), ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freeAddr(host string) (string, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// configYAML writes cfg as prometheus.yml. JSON strings are valid YAML
// scalars, so every value is quoted with strconv.Quote's JSON-compatible
// subset.
func configYAML(cfg Config) string {
	var b strings.Builder
	iv := strconv.Quote(cfg.Interval.String())
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", iv, iv, iv)
	if cfg.QueryLog != "" {
		fmt.Fprintf(&b, "  query_log_file: %s\n", strconv.Quote(cfg.QueryLog))
	}
	if len(cfg.RuleFiles) > 0 {
		b.WriteString("rule_files:\n")
		for _, f := range cfg.RuleFiles {
			fmt.Fprintf(&b, "  - %s\n", strconv.Quote(f))
		}
	}
	b.WriteString("scrape_configs:\n")
	for i, tg := range cfg.Targets {
		job := tg.Job
		if job == "" {
			job = "target"
		}
		path := tg.Path
		if path == "" {
			path = "/metrics"
		}
		fmt.Fprintf(&b, "  - job_name: %s\n    metrics_path: %s\n", strconv.Quote(fmt.Sprintf("%s-%d", job, i)), strconv.Quote(path))
		if tg.Interval > 0 {
			tiv := strconv.Quote(tg.Interval.String())
			fmt.Fprintf(&b, "    scrape_interval: %s\n    scrape_timeout: %s\n", tiv, tiv)
		}
		if tg.HTTPS {
			b.WriteString("    scheme: https\n    tls_config:\n      insecure_skip_verify: true\n")
		}
		fmt.Fprintf(&b, "    static_configs:\n      - targets: [%s]\n        labels:\n", strconv.Quote(tg.Addr))
		keys := make([]string, 0, len(tg.Labels))
		for k := range tg.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "          %s: %s\n", "job", strconv.Quote(job))
		for _, k := range keys {
			fmt.Fprintf(&b, "          %s: %s\n", k, strconv.Quote(tg.Labels[k]))
		}
	}
	return b.String()
}

// Series is one result of an instant query.
type Series struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant query now.
func (s *Server) Query(ctx context.Context, expr string) ([]Series, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := s.get(ctx, "/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if data.ResultType != "vector" {
		if data.ResultType == "scalar" {
			return nil, fmt.Errorf("query %s: a scalar, not a vector", expr)
		}
		return nil, fmt.Errorf("query %s: result type %q", expr, data.ResultType)
	}
	out := make([]Series, 0, len(data.Result))
	for _, r := range data.Result {
		str, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q: %w", expr, str, err)
		}
		out = append(out, Series{Labels: r.Metric, Value: v})
	}
	return out, nil
}

// Alert is an alert as /api/v1/alerts lists it.
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"` // pending or firing
	Value  string            `json:"value"`
}

// Alerts lists the pending and firing alerts.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := s.get(ctx, "/api/v1/alerts", &data); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return data.Alerts, nil
}

// RuleState is one rule as /api/v1/rules lists it.
type RuleState struct {
	Group     string
	File      string
	Name      string // the record or alert name
	Type      string // "recording" or "alerting"
	Health    string // "ok", "err" or "unknown" (not evaluated yet)
	LastError string
}

// Rules lists every loaded rule with its health after its last
// evaluation.
func (s *Server) Rules(ctx context.Context) ([]RuleState, error) {
	var data struct {
		Groups []struct {
			Name  string `json:"name"`
			File  string `json:"file"`
			Rules []struct {
				Name      string `json:"name"`
				Type      string `json:"type"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := s.get(ctx, "/api/v1/rules", &data); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var out []RuleState
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			out = append(out, RuleState{Group: g.Name, File: g.File, Name: r.Name, Type: r.Type, Health: r.Health, LastError: r.LastError})
		}
	}
	return out, nil
}

// TargetHealth maps each target's scrape URL to its health ("up",
// "down", "unknown") and last error.
func (s *Server) TargetHealth(ctx context.Context) (map[string]string, error) {
	var data struct {
		ActiveTargets []struct {
			ScrapeURL string `json:"scrapeUrl"`
			Health    string `json:"health"`
			LastError string `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := s.get(ctx, "/api/v1/targets", &data); err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	out := map[string]string{}
	for _, t := range data.ActiveTargets {
		out[t.ScrapeURL] = strings.TrimSpace(t.Health + " " + t.LastError)
	}
	return out, nil
}

func (s *Server) get(ctx context.Context, path string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("HTTP %d: %w: %.200s", resp.StatusCode, err, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// Firing reports whether alert name fires for a series with all of the
// labels in match.
func Firing(alerts []Alert, name string, match map[string]string) bool {
	return find(alerts, name, match, true)
}

// Active reports whether alert name is pending or firing for a series
// with all of the labels in match.
func Active(alerts []Alert, name string, match map[string]string) bool {
	return find(alerts, name, match, false)
}

func find(alerts []Alert, name string, match map[string]string, firing bool) bool {
	for _, a := range alerts {
		if a.Labels["alertname"] != name || firing && a.State != "firing" {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// RunPromtool runs promtool with args and returns its combined output.
func (b Binaries) RunPromtool(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.Promtool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("promtool %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}
