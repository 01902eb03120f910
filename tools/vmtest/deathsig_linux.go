package vmtest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill QEMU when the test process dies: a test
// binary killed by go test's -timeout (or by CI's own limit) runs no
// deferred cleanup, and an orphaned TCG guest would go on burning both CPUs.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
