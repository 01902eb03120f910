// Command shrink measures what happens to a Go service when its memory
// limit is lowered in place while its heap grows (Kubernetes 1.35 in-place
// resize: the kubelet lowers memory.max only while usage is below the new
// limit, but the heap may still be growing toward the goal the old limit
// allowed).
//
//	go run ./tools/shrink -cycles 20            # or: make shrink
//
// For each setting it creates a real cgroup under its own, starts a child
// Go process in it (this binary again) and runs cycles: limit 256 MiB,
// the child grows its live set (20 MiB/s up to 100 MiB) under steady
// garbage (about 150 MiB/s), and as soon as the cgroup's usage passes
// 136 MiB (below 160 MiB) the limit is lowered to 160 MiB in place. The
// child keeps growing for 5 s; then it drops its live set and the next
// cycle starts. An OOM kill ends the cycle and a new child is started.
//
// Settings: gofit (the runtime library, at each -refresh interval), ratio
// (GOMEMLIMIT = 0.9 × limit, set once at start as automemlimit does by
// default, and refreshed at each -refresh interval) and none. It needs
// root and a writable memory cgroup (v1 or v2); it removes its cgroups and
// children on exit, on error and on Ctrl-C.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

const (
	mib       = 1 << 20
	highLimit = 256 * mib
	lowLimit  = 160 * mib
	trigger   = 136 * mib // lower the limit once usage passes this (< lowLimit)
	liveMax   = 100 * mib
	liveRate  = 20 * mib // per second
	hold      = 5 * time.Second
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		if err := child(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "shrink child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shrink:", err)
		os.Exit(1)
	}
}

// setting is one way of running the child.
type setting struct {
	mode    string        // gofit, ratio, none
	refresh time.Duration // 0: set once at start (ratio), n/a (none)
}

func (s setting) String() string {
	switch {
	case s.mode == "none":
		return "none"
	case s.mode == "ratio" && s.refresh == 0:
		return "ratio 0.9, set once (automemlimit's default)"
	case s.mode == "gofit":
		return fmt.Sprintf("gofit, refresh %v, memory watch %v", s.refresh, gofit.MemoryWatch)
	}
	return fmt.Sprintf("%s, refresh %v", s.mode, s.refresh)
}

type result struct {
	setting            setting
	decreases, skipped int
	oomKills           int
	maxUsage           uint64
	lags               []time.Duration // from the decrease until the child's GOMEMLIMIT was below the new limit
}

func run() error {
	cycles := flag.Int("cycles", 20, "in-place decreases per setting")
	refreshes := flag.String("refresh", "1s,250ms,100ms", "refresh intervals to try for gofit and the refreshed ratio")
	only := flag.String("settings", "gofit,ratio,ratio-once,none", "settings to run")
	flag.Parse()
	var settings []setting
	var intervals []time.Duration
	for _, s := range strings.Split(*refreshes, ",") {
		d, err := time.ParseDuration(s)
		if err != nil || d < gofit.MinRefresh {
			return fmt.Errorf("-refresh %q: want durations of at least %v", s, gofit.MinRefresh)
		}
		intervals = append(intervals, d)
	}
	for _, s := range strings.Split(*only, ",") {
		switch s {
		case "gofit", "ratio":
			for _, d := range intervals {
				settings = append(settings, setting{s, d})
			}
		case "ratio-once":
			settings = append(settings, setting{"ratio", 0})
		case "none":
			settings = append(settings, setting{"none", 0})
		default:
			return fmt.Errorf("-settings: unknown %q (want gofit, ratio, ratio-once, none)", s)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	self, err := cgroup.NewFS("/").Self()
	if err != nil {
		return err
	}
	defer self.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("# shrink: %d decreases 256→160 MiB per setting; cgroup v%d; %s; load %s", *cycles, self.Version(), time.Now().UTC().Format(time.RFC3339), load)
	fmt.Println("| setting | decreases | OOM kills | peak usage | GOMEMLIMIT below 160 MiB after (median / max) |")
	fmt.Println("|---|---|---|---|---|")
	for _, s := range settings {
		r, err := measure(ctx, self, exe, s, *cycles)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		fmt.Printf("| %s | %d (%d skipped) | %d | %d MiB | %s |\n", s, r.decreases, r.skipped, r.oomKills, r.maxUsage/mib, lagText(r.lags, r.decreases))
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("# done %s; load %s", time.Now().UTC().Format(time.RFC3339), load)
	return nil
}

func lagText(l []time.Duration, n int) string {
	if len(l) == 0 {
		return "never"
	}
	sorted := append([]time.Duration(nil), l...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j] < sorted[i] {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	s := fmt.Sprintf("%v / %v", sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
	if len(l) < n {
		s += fmt.Sprintf(" (%d of %d)", len(l), n)
	}
	return s
}

// proc is a running child.
type proc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
}

func start(g *manage.Group, exe string, s setting) (*proc, error) {
	cmd := g.Command(exe, "child", s.mode, s.refresh.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, in: in, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	return p, p.expect("ready", 30*time.Second)
}

func (p *proc) expect(prefix string, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return nil
			}
		case <-p.done:
			return errors.New("child exited")
		case <-t.C:
			return fmt.Errorf("no %q from the child in %v", prefix, timeout)
		}
	}
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

func measure(ctx context.Context, self *cgroup.Cgroups, exe string, s setting, cycles int) (r result, err error) {
	r.setting = s
	g, err := manage.NewChild(self, fmt.Sprintf("gofit-shrink-%d", os.Getpid()))
	if err != nil {
		return r, err
	}
	var p *proc
	defer func() {
		if p != nil {
			p.kill()
		}
		if rerr := g.Remove(context.Background()); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if err := g.SetMemoryMax(highLimit); err != nil {
		return r, err
	}
	kills := func() int {
		m, err := g.MemoryStats()
		if err != nil {
			return 0
		}
		return int(m.OOMKills)
	}
	for c := 0; c < cycles && ctx.Err() == nil; c++ {
		if err := g.SetMemoryMax(highLimit); err != nil {
			return r, err
		}
		if p == nil || !p.alive() {
			if p, err = start(g, exe, s); err != nil {
				return r, err
			}
		}
		// Let a refreshing child see the raised limit.
		time.Sleep(max(2*s.refresh, time.Second))
		before := kills()
		fmt.Fprintln(p.in, "grow")
		deadline := time.Now().Add(20 * time.Second)
		made := false
		for time.Now().Before(deadline) && p.alive() {
			m, err := g.MemoryStats()
			if err != nil {
				return r, err
			}
			if m.Usage >= trigger && m.Usage < lowLimit {
				if err := g.SetMemoryMax(lowLimit); err == nil {
					made = true
				}
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if !made {
			r.skipped++
			fmt.Fprintln(p.in, "drop")
			p.expect("dropped", 20*time.Second)
			continue
		}
		r.decreases++
		at := time.Now()
		var lag time.Duration
		fmt.Fprintln(p.in, "report")
		end := time.Now().Add(hold)
		for time.Now().Before(end) && p.alive() {
			select {
			case l := <-p.lines:
				if v, ok := strings.CutPrefix(l, "gomemlimit "); ok && lag == 0 {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil && n < lowLimit {
						lag = time.Since(at)
					}
				}
			case <-p.done:
			case <-time.After(20 * time.Millisecond):
			}
			if m, err := g.MemoryStats(); err == nil {
				r.maxUsage = max(r.maxUsage, m.Usage, m.Peak)
			}
		}
		if lag > 0 {
			r.lags = append(r.lags, lag)
		}
		if !p.alive() || kills() > before {
			r.oomKills++
			if p.alive() {
				p.kill()
			}
			p = nil
			continue
		}
		fmt.Fprintln(p.in, "drop")
		if err := p.expect("dropped", 20*time.Second); err != nil && p.alive() {
			return r, err
		}
	}
	return r, ctx.Err()
}

// child is the workload: steady garbage, a live set that grows on "grow"
// and is dropped on "drop"; on "report" it prints its GOMEMLIMIT every
// 5 ms until the next command.
func child(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: shrink child MODE REFRESH")
	}
	mode := args[0]
	refresh, err := time.ParseDuration(args[1])
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch mode {
	case "gofit":
		f, err := gofit.Start(ctx, gofit.WithRefresh(refresh))
		if err != nil {
			return err
		}
		defer f.Stop()
	case "ratio":
		if err := ratio(ctx, refresh); err != nil {
			return err
		}
	case "none":
	default:
		return fmt.Errorf("mode %q", mode)
	}

	var mu sync.Mutex
	var live [][]byte
	growing := false
	go func() { // steady load: about 150 MiB/s of short-lived garbage
		var sink []byte
		for {
			for i := 0; i < 150; i++ {
				sink = touch(make([]byte, 64<<10))
			}
			_ = sink
			time.Sleep(60 * time.Millisecond)
		}
	}()
	go func() {
		for range time.Tick(50 * time.Millisecond) {
			mu.Lock()
			if growing && len(live)*mib < liveMax {
				live = append(live, touch(make([]byte, liveRate/20)))
			}
			mu.Unlock()
		}
	}()
	var stopReport chan struct{}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if stopReport != nil {
			close(stopReport)
			stopReport = nil
		}
		switch sc.Text() {
		case "grow":
			mu.Lock()
			growing = true
			mu.Unlock()
		case "drop":
			mu.Lock()
			growing, live = false, nil
			mu.Unlock()
			runtime.GC()
			debug.FreeOSMemory()
			fmt.Println("dropped")
		case "report":
			stopReport = make(chan struct{})
			go func(stop chan struct{}) {
				t := time.NewTicker(5 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						fmt.Println("gomemlimit", debug.SetMemoryLimit(-1))
					}
				}
			}(stopReport)
		}
	}
	return sc.Err()
}

func touch(b []byte) []byte {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

// ratio sets GOMEMLIMIT to 0.9 of the cgroup's memory limit, once or every
// refresh (automemlimit's rule).
func ratio(ctx context.Context, refresh time.Duration) error {
	cg, err := cgroup.NewFS("/").Self()
	if err != nil {
		return err
	}
	set := func() {
		if l, err := cg.Limits(); err == nil && l.Memory.Effective() > 0 {
			debug.SetMemoryLimit(int64(float64(l.Memory.Effective()) * 0.9))
		}
	}
	set()
	if refresh > 0 {
		go func() {
			for range time.Tick(refresh) {
				set()
			}
		}()
	}
	return nil
}
