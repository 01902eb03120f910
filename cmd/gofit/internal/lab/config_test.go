package lab

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/local"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
)

// What newLab used to clamp in silence (repeats under 1, max-repeats
// under repeats, no resamples) is an error naming the flag or field, and
// runStudy refuses it before opening a runner.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"repeats 0", func(c *Config) { c.MinRepeats = 0 }, "--repeats 0"},
		{"max under min", func(c *Config) { c.MinRepeats, c.MaxRepeats = 4, 2 }, "--max-repeats 2 is under --repeats 4"},
		{"no resamples", func(c *Config) { c.Resamples = 0 }, "Config.Resamples 0"},
		{"no quotas", func(c *Config) { c.Quotas = nil }, "--quotas: no quota"},
		{"quota NaN", func(c *Config) { c.Quotas = []float64{0.5, 0} }, "--quotas: 0 is not"},
		{"request NaN", func(c *Config) { c.CPURequest = math.NaN() }, "Config.CPURequest NaN"},
		{"unknown cpu setting", func(c *Config) { c.CPUSettings = []string{"gomaxprocs=3"} }, `unknown setting "gomaxprocs=3"`},
		{"unknown mem setting", func(c *Config) { c.MemSettings = []string{"ratio"} }, `unknown setting "ratio"`},
		{"open fraction", func(c *Config) { c.OpenFraction = 1.5 }, "--open-fraction 1.5"},
		{"budget", func(c *Config) { c.Budget = 0 }, "--budget 0s"},
		{"slo alone", func(c *Config) { c.SLOP99 = time.Millisecond }, "needs --target-rps"},
		{"confirm", func(c *Config) { c.ConfirmNeed, c.ConfirmOf = 3, 2 }, "Config.ConfirmNeed 3 is over Config.ConfirmOf 2"},
		{"resolution", func(c *Config) { c.Resolution = 0 }, "Config.Resolution 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(false)
			cfg.Target = sandbox.Target{Path: "/bin/true", URL: "http://127.0.0.1:{port}/"}
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v; want a usage error naming %q", err, tc.want)
			}
			// No runner: runStudy must refuse before opening one.
			if _, _, err := runStudy(context.Background(), &cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("runStudy: %v; want the same error", err)
			}
		})
	}
	for _, quick := range []bool{false, true} {
		if err := defaultConfig(quick).Validate(); err != nil {
			t.Errorf("defaultConfig(%v): %v", quick, err)
		}
	}
}

func TestOptionsConfig(t *testing.T) {
	given := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Cmd: "x", Given: given("cmd")}, "--cmd goes with --url or --targets"},
		{Options{Cmd: "x", Image: "oci:d", URL: "http://h/", Given: given("cmd", "image", "url")}, "--cmd and --image: give one"},
		{Options{Cmd: "x", Args: "-v", URL: "http://h/", Given: given("cmd", "args", "url")}, "--args goes with --image"},
		{Options{Image: "oci:d", Given: given("image")}, "--image goes with --url or --targets"},
		{Options{Kube: true, Cmd: "svc", URL: "http://h/", Given: given("kube", "cmd", "url")}, "--kube runs images"},
		{Options{Given: given("namespace")}, "--namespace goes with --kube"},
		{Options{Given: given("node-selector")}, "--node-selector goes with --kube"},
		{Options{Cmd: " ", URL: "http://h/", Given: given("cmd", "url")}, `--cmd " ": no command`},
		{Options{Cmd: "svc", URL: "ftp://h/", Given: given("cmd", "url")}, "--url"},
		{Options{Quotas: "0.5,fast", Given: given("quotas")}, `--quotas: "fast"`},
		{Options{Quotas: "NaN", Given: given("quotas")}, `--quotas: "NaN"`},
		{Options{OpenFraction: 0, Given: given("open-fraction")}, "--open-fraction 0"},
		{Options{Repeats: -1, Given: given("repeats")}, "--repeats -1"},
		{Options{Requests: 0, Given: given("requests")}, "--requests 0"},
		{Options{MaxRepeats: 1, Repeats: 3, Given: given("repeats", "max-repeats")}, "--max-repeats 1 is under --repeats 3"},
		{Options{OpenDuration: 0, Given: given("open-duration")}, "--open-duration 0s"},
		{Options{TargetRPS: -5, Given: given("target-rps")}, "--target-rps -5"},
		{Options{SLOP99: time.Millisecond, Given: given("slo-p99")}, "--slo-p99 needs --target-rps"},
		{Options{Cmd: "svc", URL: "http://h/", Targets: "t", Given: given("cmd", "url", "targets")}, "--url and --targets: give one"},
		{Options{Cmd: "svc", Targets: "testdata/missing.targets", Given: given("cmd", "targets")}, "testdata/missing.targets"},
		{Options{Cmd: "svc", Targets: "../load/testdata/body4k.bin", Given: given("cmd", "targets")}, "body4k.bin:1:"},
		{Options{Cmd: "svc", URL: "http://h/", Headers: []string{"no colon"}, Given: given("cmd", "url", "header")}, "--header"},
		{Options{Headers: []string{"A: b"}, Given: given("header")}, "--header goes with --url"},
		{Options{ReadyURL: "http://h/ready", Given: given("ready-url")}, "--ready-url and --ready-timeout go with --cmd"},
		{Options{Cmd: "svc", URL: "http://h/", ReadyURL: "h/ready", Given: given("cmd", "url", "ready-url")}, "--ready-url"},
		{Options{Cmd: "svc", URL: "http://h/", ReadyTimeout: -time.Second, Given: given("cmd", "url", "ready-timeout")}, "--ready-timeout -1s"},
	} {
		_, err := tc.o.Config()
		if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want a usage error naming %q", tc.o, err, tc.want)
		}
	}
	// Given values land in the config; --repeats alone lifts max-repeats.
	cfg, err := Options{Quick: true, Quotas: "0.5, 1", Repeats: 9, Budget: 8 * time.Minute, Cmd: "svc -p {port}", URL: "http://127.0.0.1:{port}/",
		Given: given("quotas", "repeats", "budget", "cmd", "url")}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Quotas) != 2 || cfg.Quotas[1] != 1 || cfg.MinRepeats != 9 || cfg.MaxRepeats != 9 || cfg.Budget != 8*time.Minute ||
		cfg.Target.Path != "svc" || strings.Join(cfg.Target.Args, " ") != "-p {port}" || cfg.Resolution != 4<<20 {
		t.Errorf("config %+v", cfg)
	}
	// A request mix, headers, the seed and readiness land in the target.
	cfg, err = Options{Cmd: "svc", URL: "http://127.0.0.1:{port}/api", Headers: []string{"X-Key: k", "accept: text/plain"}, Seed: 7,
		ReadyURL: "http://127.0.0.1:{port}/ready", ReadyTimeout: time.Minute, Given: given("cmd", "url", "header", "seed", "ready-url", "ready-timeout")}.Config()
	if err != nil {
		t.Fatal(err)
	}
	mix := cfg.Target.Mix()
	if cfg.Seed != 7 || len(mix) != 1 || mix[0].Header.Get("X-Key") != "k" || mix[0].Header.Get("Accept") != "text/plain" ||
		cfg.Target.Ready() != "http://127.0.0.1:{port}/ready" || cfg.Target.ReadyTimeout != time.Minute {
		t.Errorf("target %+v, seed %d", cfg.Target, cfg.Seed)
	}
	cfg, err = Options{Cmd: "svc", Targets: "../../../../examples/labservices/httpbin.targets", Given: given("cmd", "targets")}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if mix := cfg.Target.Mix(); len(mix) != 3 || mix[1].Method != "POST" || len(mix[1].Body) != 4096 || cfg.Target.Ready() != "http://127.0.0.1:{port}/get" {
		t.Errorf("httpbin mix: %+v, ready %s", mix, cfg.Target.Ready())
	}
	// A mix without --url is a target the study accepts (it refused it
	// as "no target" once, after the options had passed).
	if err := local.CheckTarget(cfg.Target); err != nil {
		t.Errorf("a --targets mix: %v", err)
	}
	if err := local.CheckTarget(sandbox.Target{Path: "svc"}); err == nil {
		t.Error("a command without a URL or a mix is a target")
	}
}
