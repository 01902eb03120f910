package manage

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// moveThenExec is run by /bin/sh: it writes its own PID into each
// directory's cgroup.procs, then execs the command, which keeps the PID. The
// command's runtime therefore starts inside the group and sees its limits.
const moveThenExec = `n=$1; shift
while [ "$n" -gt 0 ]; do
	echo $$ > "$1/cgroup.procs" || exit 126
	shift; n=$((n-1))
done
exec "$@"`

// Command returns an *exec.Cmd that runs name with args inside the group
// from its first instruction. Callers set Env, Stdout and so on as usual;
// cmd.Process.Pid is the command's own PID once started.
//
// Where the group lives in one cgroup v2 hierarchy and the kernel has
// clone3 (Linux 5.7+, not filtered by seccomp), the process is created in
// the group directly (SysProcAttr.UseCgroupFD, CLONE_INTO_CGROUP), and
// cmd.Path is name itself. Elsewhere (v1, hybrid) a /bin/sh trampoline
// moves itself into each hierarchy and then execs name. cmd.SysProcAttr is
// always set: add to its fields, do not replace it.
func (g *Group) Command(name string, args ...string) *exec.Cmd {
	if fd, ok := g.cgroupFD(); ok {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		return cmd
	}
	shArgs := []string{"-c", moveThenExec, "gofit-cgexec", strconv.Itoa(len(g.dirs))}
	shArgs = append(shArgs, g.dirs...)
	shArgs = append(shArgs, name)
	shArgs = append(shArgs, args...)
	cmd := exec.Command("/bin/sh", shArgs...)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	return cmd
}

// cgroupFD returns a descriptor of the group's directory for
// CLONE_INTO_CGROUP, kept open until Remove, when the group is one v2
// directory and the kernel takes clone3.
func (g *Group) cgroupFD() (int, bool) {
	if len(g.dirs) != 1 || g.Cgroups == nil || g.Memory == nil || g.Memory.Version != 2 || !hasClone3() {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cgfd == nil {
		f, err := os.Open(g.dirs[0])
		if err != nil {
			return 0, false // the trampoline will report the problem
		}
		g.cgfd = f
	}
	return int(g.cgfd.Fd()), true
}

// hasClone3 asks the kernel whether clone3 exists, with arguments too short
// to be valid: a kernel that has it answers EINVAL without creating anything;
// an old kernel, or a seccomp profile that hides it, says ENOSYS (or EPERM).
func hasClone3() bool {
	_, _, errno := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	return errors.Is(errno, unix.EINVAL)
}
