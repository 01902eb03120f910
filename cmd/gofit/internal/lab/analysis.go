package lab

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/target"
)

// The lab is a pipeline whose results flow one way:
//
//	runner ─▶ trials ─▶ Records ─▶ analyse(Config, Records) ─▶ Results ─▶ report
//
// The study (study.go, cpustudy.go, memory.go, health.go) has its runner
// (a trial.Runner: lab/local's sandbox, lab/pods's pods, or a fake) run trials
// and appends what they measured to its Records; the budget planner
// (budget.go) decides what it can still afford. analyse is the pure half:
// the CPU summary and verdicts, the memory floors and health verdicts
// (memResults, judgeTrial) and the recommendation as a function of the
// configuration and the records, so that tests build records instead of
// running trials, and a run's records.json replays to its results.json
// (replay_test.go). Where the study needs a verdict to go on, it asks
// these same functions of its records so far. Results are plain data
// (package lab/result); the report (package lab/report) renders them.

// Records are what a study's trials produced, in the order they ran: the
// input to analyse, and records.json.
type Records struct {
	Machine    result.Machine          `json:"machine"`
	Target     result.TargetInfo       `json:"target"`
	Placement  *result.Placement       `json:"placement"`
	CPU        []result.CPUCell        `json:"cpu"`    // with each run's blocks (cpuRecord in records.json)
	Memory     []memRecord             `json:"memory"` // each setting's trials, health pairs' blocks included
	Throughput []result.ThroughputCell `json:"memory_throughput"`
	Targets    []load.TargetResult     `json:"targets"`
	Lab        result.LabInfo          `json:"lab"`
	// Check is the check trial of the recommendation, once it ran.
	Check *healthRecord `json:"check"`
	// Exited: the target exited during a CPU window (a crash).
	Exited bool `json:"exited"`
	// NCPU is the CPUs the target saw; Binary what its executable's
	// build info says (the plan depends on both).
	NCPU   int           `json:"ncpu"`
	Binary target.Binary `json:"binary"`
	// Runner is where the trials ran (trial.Where.Runner).
	Runner string `json:"runner"`
}

// analysis reads a study's configuration and records, never writing
// them; res is the Results it builds, summary first, recommendation next.
type analysis struct {
	cfg  Config
	rec  *Records
	res  *result.Results
	ncpu int
	boot *stats.Bootstrap
}

func newAnalysis(cfg Config, rec *Records) *analysis {
	res := &result.Results{Machine: rec.Machine, Target: rec.Target, Placement: rec.Placement, CPU: rec.CPU,
		Throughput: rec.Throughput, Targets: rec.Targets, Lab: rec.Lab}
	// A bootstrap of its own, seeded from the configuration: the same
	// records give the same intervals however often they are analysed.
	return &analysis{cfg: cfg, rec: rec, res: res, ncpu: rec.NCPU, boot: stats.NewBootstrap(cfg.Resamples, cfg.Seed)}
}

// analyse is results.json from a study's configuration and records.
func analyse(cfg Config, rec Records) result.Results {
	mem, warnings := memResults(cfg, &rec)
	return analyseMemory(cfg, rec, mem, warnings)
}

// analyseMemory is analyse with the memory results (and their warnings)
// given: memResults's, or a test's.
func analyseMemory(cfg Config, rec Records, mem []result.MemResult, warnings []string) result.Results {
	a := newAnalysis(cfg, &rec)
	a.res.CPUSummary = a.summarizeCPU()
	a.res.Memory = mem
	if len(warnings) > 0 {
		a.res.Lab.Warnings = append(slices.Clone(a.res.Lab.Warnings), warnings...)
	}
	a.res.Recommendation = a.recommend()
	if rec.Check != nil {
		t, _ := judgeTrial(cfg, checkKey, *rec.Check)
		a.res.Recommendation.Check = &result.CheckTrial{MemTrial: t, ProbeRPS: rec.Target.ProbeRPS, ProbeP99: rec.Target.ProbeP99}
	}
	a.res.Lab.Undecided = 0
	for _, s := range a.res.CPUSummary {
		if s.Verdict != nil && !s.Decided {
			a.res.Lab.Undecided++
		}
	}
	a.res.Lab.Failed = a.failure()
	return *a.res
}

// summarized is an analysis whose CPU summary is done: what the study
// asks of the records so far (the quota the recommendation would pick).
func summarized(cfg Config, rec *Records) *analysis {
	a := newAnalysis(cfg, rec)
	a.res.CPUSummary = a.summarizeCPU()
	return a
}

// recordsFormat is records.json's format: 2 since the memory half went
// into the records as raw trials (health pairs' blocks included).
const recordsFormat = 2

// recordsFile is records.json: the configuration and the records of one
// study, everything analyse needs to give its results.json again.
type recordsFile struct {
	Format  int             `json:"format"`
	Config  Config          `json:"config"`
	Records Records         `json:"records"`
	Blocks  [][]stats.Block `json:"cpu_blocks"` // each CPU run's blocks, in Records.CPU's order
}

// writeRecords writes records.json into dir, through a temporary file and
// a rename like the results; it returns the path.
func writeRecords(dir string, cfg Config, rec *Records) (string, error) {
	f := recordsFile{Format: recordsFormat, Config: cfg, Records: *rec, Blocks: make([][]stats.Block, len(rec.CPU))}
	for i, c := range rec.CPU {
		f.Blocks[i] = c.Blocks
	}
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "records.json")
	return p, report.WriteAtomic(p, append(b, '\n'))
}

// readRecords reads a records.json written by writeRecords, gzipped or
// not.
func readRecords(path string) (Config, Records, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, Records{}, err
	}
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return Config{}, Records{}, fmt.Errorf("%s: %w", path, err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			return Config{}, Records{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	var v struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return Config{}, Records{}, fmt.Errorf("%s: %w", path, err)
	}
	if v.Format != recordsFormat {
		return Config{}, Records{}, fmt.Errorf("%s: records of format %d, but this gofit reads format %d: replay them with the gofit that wrote them", path, v.Format, recordsFormat)
	}
	var f recordsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return Config{}, Records{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Blocks) != len(f.Records.CPU) {
		return Config{}, Records{}, fmt.Errorf("%s: %d CPU runs but %d block lists", path, len(f.Records.CPU), len(f.Blocks))
	}
	for i := range f.Records.CPU {
		f.Records.CPU[i].Blocks = f.Blocks[i]
	}
	return f.Config, f.Records, nil
}
