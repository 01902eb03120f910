package fit_test

import (
	"fmt"
	"log"

	"github.com/gofit-dev/gofit/fit"
)

// A container with a 500m CPU limit and 256 MiB of memory, before any
// process runs: what the admission webhook asks for each container.
func ExamplePolicy_PlanContainer() {
	pol, err := fit.New(fit.Options{MemoryRatio: 0.9, Rounding: fit.Floor}) // once, from flags; fit.Policy{} is the default
	if err != nil {
		log.Fatal(err) // names the bad option
	}
	p := pol.PlanContainer(fit.Container{
		CPULimit:    0.5,                              // resources.limits.cpu in cores; 0 when unset
		MemoryLimit: 256 << 20,                        // resources.limits.memory in bytes; 0 when unset
		NonGo:       0,                                // declared memory outside the Go heap; 0: the ratio
		Vars:        map[string]string{"GOGC": "200"}, // the container's literal env
	})
	fmt.Println(p.Environ(nil)) // the env to add, each variable once, GOFIT_RUN included
	fmt.Println(p.GOMAXPROCSReason, p.GOMEMLIMITReason)
	// Output:
	// [GOFIT_RUN=GOMAXPROCS=1,GOMEMLIMIT=241591910 GOMAXPROCS=1 GOMEMLIMIT=241591910]
	// cpu_limit ratio
}

// Validation fails with an error that names the option.
func ExampleNew() {
	_, err := fit.New(fit.Options{MemoryRatio: 1.5})
	fmt.Println(err)
	// Output:
	// bad option: memory ratio 1.5: want a number between 0 and 1, such as 0.9
}
