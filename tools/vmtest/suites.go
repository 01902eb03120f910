package vmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Module is the root module's path; suite directories are relative to it.
const Module = "github.com/gofit-dev/gofit"

// Suite is a package whose tests run inside the VM.
type Suite struct {
	Pkg     string            // import path; any package in the workspace (go.work)
	Skip    map[Layout]string // -test.skip per layout, e.g. tests that time things TCG makes meaningless
	Timeout time.Duration     // for the whole binary inside the VM
	// MustPass lists, per layout, tests that must run and pass there: a
	// skip of one of them is a failure, so a real-kernel test cannot
	// quietly stop running.
	MustPass map[Layout][]string
}

// Dir is the package's directory relative to the repository root: the
// test binary runs there, as under `go test`, so testdata paths work.
func (s Suite) Dir() string {
	if s.Pkg == Module {
		return "."
	}
	return strings.TrimPrefix(s.Pkg, Module+"/")
}

// Name is a file name for the package's test binary.
func (s Suite) Name() string {
	if d := s.Dir(); d != "." {
		return strings.ReplaceAll(d, "/", "-") + ".test"
	}
	return "gofit.test"
}

// Suites is the one list of packages whose tests run on the VM's kernel:
// every package with tests that need real cgroups. To add one (the node
// agent's tests, for example), append it here, with the tests that must
// not skip on each layout; its tests get cgroups through cgroup/cgtest
// like the others, and run as root inside a populated, non-root cgroup
// (vmtest.service). `make test-v2` then runs it.
func Suites() []Suite {
	both := func(names ...string) map[Layout][]string {
		return map[Layout][]string{V2: names, Hybrid: names}
	}
	// The timeouts catch a hung binary: twice what each takes under TCG on
	// a loaded host, since CI boots this VM beside the e2e node's.
	return []Suite{
		{Pkg: Module + "/cgroup", Timeout: 6 * time.Minute,
			MustPass: both("TestRealLimitsInsideGroup", "TestRealNestedTighterAncestor", "TestRealThrottling",
				"TestRealOOMKill", "TestRealRemoveKillsAndDrains", "TestReadRejectsFIFO", "TestReadRejectsDevice")},
		{Pkg: Module + "/cgroup/manage", Timeout: 6 * time.Minute,
			MustPass: map[Layout][]string{
				V2: {"TestCommandStartsInsideGroup", "TestMemoryValuesV2", "TestOOMGroupKillsAll", "TestCPUPressure",
					"TestNewChildFromPopulatedCgroup", "TestNewChildControllerNotDelegated"},
				Hybrid: {"TestCommandStartsInsideGroup", "TestCPUPressure"},
			}},
		// The library following resizes of cpu.max and memory.max.
		{Pkg: Module + "/examples/service", Timeout: 6 * time.Minute,
			MustPass: both("TestFollowsResize", "TestThrottlingMetrics")},
		// gofit inspect/run in a real cgroup (inspect --pid measuring a
		// service's off-heap memory from outside its group), the lab end to end from a
		// populated non-root cgroup, and the node agent's memory-QoS
		// experiment with one repeat (function: auto's values are kept and
		// memory.high throttles the BE hog). TestLabQuick checks the lab's
		// physics and timings, which mean nothing under TCG;
		// TestLabInterrupted waits for progress with wall-clock deadlines
		// made for real CPUs; TestLabImage is two quick studies (minutes
		// each under TCG) of a binary it builds with the Go toolchain,
		// which the VM has not got. TestWebhookSelfManaged and
		// TestRolloutTemplatesOnTheirCRDs need a kube-apiserver and etcd,
		// built on the host (and the latter the Go command); TestLabErrors checks flag errors with
		// the default --out in the working directory, the read-only share here. The lab's run (about 2 minutes under
		// TCG) and the experiment's are v2's: the host runs both on v1
		// controllers already, and so the lab's signal and failing-target
		// cleanups, which the hybrid boot repeated at TCG's pace.
		// `make qos-v2` runs the whole experiment.
		{Pkg: Module + "/cmd/gofit", Timeout: 16 * time.Minute,
			Skip: map[Layout]string{
				V2:     "^(TestLabQuick|TestLabImage|TestLabInterrupted|TestLabErrors|TestWebhookSelfManaged|TestRolloutTemplatesOnTheirCRDs|TestDocs)$",
				Hybrid: "^(TestLabQuick|TestLabImage|TestLabInterrupted|TestLabErrors|TestWebhookSelfManaged|TestRolloutTemplatesOnTheirCRDs|TestLabFromPopulatedCgroup|TestNodeExperiment|TestDocs|TestLabHangupAndBrokenPipe|TestLabFailingTarget)$",
			},
			MustPass: map[Layout][]string{
				V2:     {"TestInspectRealCgroup", "TestInspectCPURequestRealCgroup", "TestInspectPIDRealCgroup", "TestRunRealCgroup", "TestLabFromPopulatedCgroup", "TestNodeExperiment"},
				Hybrid: {"TestInspectRealCgroup", "TestInspectCPURequestRealCgroup", "TestInspectPIDRealCgroup", "TestRunRealCgroup"},
			}},
		// The node agent (kube module) on a kubelet-like tree of real memory
		// cgroups with live processes: memory.min/low/high read back on v2,
		// soft limits on hybrid's v1 memory. The TestEnvtest* tests need a
		// kube-apiserver and etcd, which the VM has not got; the host runs them.
		{Pkg: Module + "/kube/agent", Timeout: 8 * time.Minute,
			Skip:     map[Layout]string{V2: "^TestEnvtest", Hybrid: "^TestEnvtest"},
			MustPass: both("TestRealCgroups", "TestRealCgroups/cgroupfs", "TestRealCgroups/systemd", "TestRealReadOnlyMount")},
	}
}

// SourceRoot is the repository root, the directory holding go.work, found
// from the working directory upwards (go test runs in the package's).
func SourceRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.work in %s or above it", dir)
		}
	}
}
