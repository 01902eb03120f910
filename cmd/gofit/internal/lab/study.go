package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// study runs a study: it decides which trials to run, has its runner
// run them, and appends what they measured to its records. What the
// trials mean is the analysis's (analysis.go): where the study needs a
// verdict to go on (a floor, a health verdict, a CPU comparison's), it
// asks the analysis's own functions of the records so far.
type study struct {
	cfg     Config
	run     trial.Runner
	rec     Records
	done    int
	total   int
	started time.Time
	rng     *rand.Rand
	now     func() time.Time
	// plan is the budget planner (budget.go): what the study can afford.
	plan *planner
}

// errTargetFailed means the target crashed or answered with errors where
// the recommendation would rest; the results say where.
var errTargetFailed = errors.New("the target failed")

// runStudy runs a study of cfg on the runner op opens (op prepared:
// its target settled): the one entry point for every runner. It stops
// early, returning ctx's error and what was measured so far, when ctx
// ends. The caller closes op.
func runStudy(ctx context.Context, cfg *Config, op trial.Opener) (*result.Results, *Records, error) {
	if err := cfg.Validate(); err != nil {
		return &result.Results{}, &Records{}, err
	}
	// The runner may fit the study to where its trials run (a cluster's
	// nodes' CPUs, not this machine's): cfg is then the study that ran,
	// which records.json must hold for a replay.
	r, err := op.Open(ctx, &cfg.Study)
	if err != nil {
		return &result.Results{}, &Records{}, err
	}
	l, err := newStudy(*cfg)
	if err != nil {
		return &result.Results{}, &Records{}, err
	}
	info := r.Info()
	if info.NCPU > 0 {
		l.rec.NCPU = info.NCPU
	}
	l.rec.Placement = info.Placement
	l.rec.Binary, l.rec.Target.BinaryBytes = info.Binary, info.BinaryBytes
	if info.BinaryErr != nil {
		l.rec.Lab.Warnings = append(l.rec.Lab.Warnings, info.BinaryErr.Error())
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "gofit lab: warning: %v\n", info.BinaryErr)
		}
	}
	l.run = r
	return l.execute(ctx)
}

// newStudy checks cfg and starts the records of a study of it.
func newStudy(cfg Config) (*study, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := newLab(cfg)
	l.rec.Machine = machine()
	l.rec.Target = result.TargetInfo{Command: strings.Join(append([]string{cfg.Target.Shown()}, cfg.Target.Args...), " "), URL: cfg.Target.URL, Sample: cfg.Sample, Image: cfg.Image, PageCache: "cold"}
	if cfg.Sample {
		l.rec.Target.GoDefaultNote = "the sample runs with GODEBUG=" + sampleGODEBUG + ": the default of a main module at go 1.25 or later on " + runtime.Version()
	} else {
		l.rec.Target.GoDefaultNote = "whatever the target's build gives (its go.mod go line decides containermaxprocs)"
	}
	return l, nil
}

// execute runs the study's parts with l.run, then analyses the records.
func (l *study) execute(ctx context.Context) (*result.Results, *Records, error) {
	l.plan.rows.parallel = parallelism(l.run)
	l.plan.costs.startHint = l.run.Info().StartCost
	genStart := load.SelfCPU()
	err := l.cpuStudy(ctx)
	if err == nil {
		err = l.memoryStudy(ctx)
	}
	l.rec.Lab.Trials = l.done
	if err == nil {
		err = l.checkRecommendation(ctx)
	}
	l.rec.Lab.Trials = l.done
	l.rec.Lab.WallSeconds = time.Since(l.started).Seconds()
	l.rec.Lab.GeneratorCPUSeconds = (load.SelfCPU() - genStart).Seconds()
	l.record(l.run.Where())
	res := analyse(l.cfg, l.rec)
	if err == nil && res.Lab.Failed != "" {
		err = fmt.Errorf("%w: %s", errTargetFailed, res.Lab.Failed)
	}
	return &res, &l.rec, err
}

// parallelism is how many trials r runs at once: 1 unless it says more.
func parallelism(r trial.Runner) int { return max(r.Info().Parallel, 1) }

// record says in the records where the trials ran: the runner's line,
// and where they ran elsewhere (a cluster's nodes), the first trial
// node's facts as the machine, the load's placement, the target as it
// ran there.
func (l *study) record(w trial.Where) {
	rec := &l.rec
	rec.Runner = w.Runner
	e := w.Remote
	if e == nil {
		return
	}
	rec.Placement = e.Placement
	rec.Machine.Where = w.Runner
	if e.GeneratorCPUSeconds != nil {
		rec.Lab.GeneratorCPUSeconds = *e.GeneratorCPUSeconds // the generator is not this process
	}
	if n := e.Node; n != nil {
		rec.Machine.Host, rec.Machine.Kernel, rec.Machine.CPUModel, rec.Machine.CPUs = n.Host, n.Kernel, n.CPUModel, n.CPUs
		rec.Machine.CgroupVersion, rec.Machine.LoadAvg = n.CgroupVersion, ""
	}
	if e.NCPU > 0 {
		rec.NCPU = e.NCPU
	}
	rec.Target.Command, rec.Target.Image, rec.Target.PageCache, rec.Target.BinaryBytes = e.Command, e.Image, e.PageCache, 0
}

// elapsed is the study's wall time so far, statistics included.
func (l *study) elapsed() time.Duration { return l.now().Sub(l.started) }

func newLab(cfg Config) *study {
	l := &study{cfg: cfg, started: time.Now(), rng: rand.New(rand.NewSource(cfg.Seed)), now: time.Now}
	l.rec.NCPU = runtime.NumCPU()
	l.rec.Lab.Warnings = append([]string{}, cfg.Warnings...)
	l.rec.Lab.BudgetSeconds = cfg.Budget.Seconds()
	l.rec.Lab.BudgetNotes = []string{}
	l.rec.Lab.NotCompared = []string{}
	l.rec.Lab.Seed = cfg.Seed
	l.plan = newPlanner(&l.cfg, l.elapsed, &l.rec.Lab)
	cells := len(cfg.Quotas) * len(cfg.CPUSettings) * cfg.MinRepeats * 2
	l.total = cells + 1 + len(cfg.MemSettings)*16 + len(cfg.MemSettings)*len(cfg.Multiples) + 1
	return l
}

func machine() result.Machine {
	m := result.Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if c, err := cgroup.NewFS("/").Self(); err == nil {
		m.CgroupVersion = c.Version()
	}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.TrimSpace(string(b))
	}
	return m
}

func (l *study) progress(format string, a ...any) {
	l.done++
	if l.cfg.Progress == nil {
		return
	}
	if l.done >= l.total {
		l.total = l.done + 1
	}
	el := time.Since(l.started)
	eta := time.Duration(float64(el) / float64(l.done) * float64(l.total-l.done))
	// The planner ends the study within the budget: a count of trials
	// left at the pace so far (a slow target's long windows first) would
	// say otherwise.
	eta = max(min(eta, l.cfg.Budget-el), 0)
	fmt.Fprintf(l.cfg.Progress, "lab [%3d/%3d] %-62s elapsed %s, ETA %s\n", l.done, l.total, fmt.Sprintf(format, a...), el.Round(time.Second), eta.Round(time.Second))
}

// addNote appends line to list unless it is there already, and prints it
// as kind to progress (when not nil).
func addNote(progress io.Writer, list *[]string, kind, line string) {
	if slices.Contains(*list, line) {
		return
	}
	*list = append(*list, line)
	if progress != nil {
		fmt.Fprintf(progress, "lab: %s: %s\n", kind, line)
	}
}

// failure says why the study cannot be trusted, or "".
func (l *analysis) failure() string {
	var why []string
	if l.rec.Exited {
		why = append(why, "the target exited during a load window")
	}
	failed, total := 0, 0
	example := ""
	for _, c := range l.rec.CPU {
		total++
		if cellFailed(c) {
			failed++
			if example == "" {
				example = fmt.Sprintf("%s at %s %s-loop: %d errors in %d requests (%s)", c.Setting, result.RowLabel(c.QuotaCores, c.RequestCores), c.Mode, c.Errors, c.Errors+c.Requests, errorKinds(c.ErrorKinds))
			}
		}
	}
	if failed > 0 && failed*2 >= total {
		why = append(why, fmt.Sprintf("%d of %d CPU windows had over 1%% errors, e.g. %s", failed, total, example))
	}
	// No CPU recommendation is the target's failure only when gofit's
	// open-loop cells all failed: saturated cells (a slow machine, a
	// tiny quota) leave the recommendation out, with its reason, but
	// say nothing against the target.
	if r := l.res.Recommendation; r.CPULimitCores == 0 && len(l.rec.CPU) > 0 {
		clean := false
		for _, s := range l.res.CPUSummary {
			if s.Mode == result.Open && s.Is(result.SetGofit) && !s.Failed {
				clean = true
			}
		}
		if !clean {
			why = append(why, "no CPU quota had error-free cells to recommend")
		}
	}
	if c := l.res.Recommendation.Check; c != nil && c.Outcome != result.OK {
		why = append(why, "the check trial of the recommendation failed: "+c.Outcome+" "+c.Detail)
	}
	return strings.Join(why, "; ")
}

func errorKinds(k map[string]int) string {
	return load.Kinds(k)
}

func cellFailed(c result.CPUCell) bool {
	n := c.Requests + c.Errors
	return c.TargetExited || n == 0 || float64(c.Errors) > trial.MaxErrorShare*float64(n)
}

// baseEnv is every trial's extra environment.
func baseEnv(cfg Config) map[string]string {
	if cfg.Sample {
		return map[string]string{"GODEBUG": sampleGODEBUG}
	}
	return map[string]string{}
}
