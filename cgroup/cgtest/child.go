package cgtest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup/manage"
)

// ChildVar names the child a test binary runs as instead of its tests.
const ChildVar = "GOFIT_TEST_CHILD"

// children are the processes the real-cgroup tests start inside a group:
// the test binary again, told by ChildVar which one to be.
var children = map[string]func() int{
	// spin uses a known amount of CPU however busy the machine is: a
	// second of wall time and at least 300ms of CPU time, which at 0.2
	// cores spans several periods and is throttled.
	"spin": func() int {
		Spin(time.Second, 300*time.Millisecond)
		return 0
	},
	// hog grows to 256 MiB in 4 MiB pieces, touching every page.
	"hog": func() int {
		var keep [][]byte
		for range 64 {
			b := make([]byte, 4<<20)
			for j := range b {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println(len(keep))
		return 0
	},
	// sleep waits to be killed.
	"sleep": func() int {
		time.Sleep(time.Minute)
		return 0
	},
	// cgroup prints what this process's very first look at /proc says.
	"cgroup": func() int {
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		os.Stdout.Write(b)
		return 0
	},
}

// Main is a real-cgroup test package's TestMain: run as a child (Child),
// the test binary becomes that child and exits with its status; otherwise
// it runs the tests. own adds the package's own children; an unknown
// child's name fails at once.
func Main(m *testing.M, own map[string]func() int) {
	name, ok := os.LookupEnv(ChildVar)
	if !ok {
		os.Exit(m.Run())
	}
	run := own[name]
	if run == nil {
		run = children[name]
	}
	if run == nil {
		fmt.Fprintf(os.Stderr, "%s=%q: no such test child\n", ChildVar, name)
		os.Exit(2)
	}
	os.Exit(run())
}

// Child is the test binary, to be started inside g as the child named
// name: spin, hog, sleep, cgroup, or one of the package's own given to
// Main.
func Child(g *manage.Group, name string) *exec.Cmd {
	cmd := g.Command(os.Args[0])
	cmd.Env = append(os.Environ(), ChildVar+"="+name)
	return cmd
}
