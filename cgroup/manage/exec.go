package manage

import (
	"os/exec"
	"strconv"
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
func (g *Group) Command(name string, args ...string) *exec.Cmd {
	shArgs := []string{"-c", moveThenExec, "gofit-cgexec", strconv.Itoa(len(g.dirs))}
	shArgs = append(shArgs, g.dirs...)
	shArgs = append(shArgs, name)
	shArgs = append(shArgs, args...)
	return exec.Command("/bin/sh", shArgs...)
}
