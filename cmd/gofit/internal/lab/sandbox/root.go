package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecCommand is the hidden gofit subcommand that starts an image's
// process in its root filesystem: `gofit lab-exec ROOT UID GID CWD PATH
// ARGV...`. The sandbox runs it (this very binary) inside the trial's
// cgroups; it gives itself a private mount namespace with /proc, /sys
// and /dev in the root, changes root, directory and user, and execs the
// image's command, which keeps its PID, its cgroups and its environment.
// Nothing it mounts is seen outside, and all of it goes with the process.
const ExecCommand = "lab-exec"

// Shown is the target's executable as its user knows it: inside the
// image for an image's target.
func (t Target) Shown() string {
	if t.Root == nil {
		return t.Path
	}
	if rel, err := filepath.Rel(t.Root.Dir, t.Path); err == nil {
		return "/" + rel
	}
	return t.Path
}

// rootCommand is the command line that runs t (Path inside t.Root.Dir)
// with args through ExecCommand.
func rootCommand(t Target, args []string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find gofit's own binary to start the image with: %w", err)
	}
	rel, err := filepath.Rel(t.Root.Dir, t.Path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("%s is not inside the image's root %s", t.Path, t.Root.Dir)
	}
	cwd := t.Root.Cwd
	if cwd == "" {
		cwd = "/"
	}
	return append([]string{self, ExecCommand, t.Root.Dir, strconv.Itoa(t.Root.UID), strconv.Itoa(t.Root.GID), cwd, "/" + rel}, args...), nil
}

// MaybeExec runs ExecCommand when os.Args asks for it, and never returns
// then; otherwise it returns at once. gofit's main calls it first, as do
// the TestMains of tests that start images.
func MaybeExec() {
	if len(os.Args) < 2 || os.Args[1] != ExecCommand {
		return
	}
	err := execInRoot(os.Args[2:])
	fmt.Fprintf(os.Stderr, "gofit %s: %v\n", ExecCommand, err)
	os.Exit(127)
}

// execInRoot does ExecCommand's work; it returns only on failure.
func execInRoot(args []string) error {
	if len(args) < 5 {
		return errors.New("want ROOT UID GID CWD PATH [ARG...]")
	}
	root, cwd, path := args[0], args[3], args[4]
	uid, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("uid %q: %w", args[1], err)
	}
	gid, err := strconv.Atoi(args[2])
	if err != nil {
		return fmt.Errorf("gid %q: %w", args[2], err)
	}
	// The mount namespace and the root belong to this thread, which
	// then execs: the new program has them, and the Go runtime's other
	// threads end with the exec.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("a mount namespace of its own: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	mounts := []struct {
		src, dir, fstype string
		flags            uintptr
	}{
		{"proc", "proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"/sys", "sys", "", unix.MS_BIND | unix.MS_REC}, // cgroupfs too: the runtime reads its limits there
		{"/dev", "dev", "", unix.MS_BIND | unix.MS_REC},
	}
	for _, m := range mounts {
		dir := filepath.Join(root, m.dir)
		if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("/%s in the image: %w", m.dir, err)
			}
		}
		if err := unix.Mount(m.src, dir, m.fstype, m.flags, ""); err != nil {
			return fmt.Errorf("mount %s on /%s: %w", m.src, m.dir, err)
		}
	}
	// /sys read-only, as a container runtime gives it.
	_ = unix.Mount("", filepath.Join(root, "sys"), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
	if err := unix.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := unix.Chdir(cwd); err != nil {
		return fmt.Errorf("working directory %s: %w", cwd, err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	// A change of user clears the parent-death signal: set it again, so
	// the target dies with the lab as any trial does.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	argv := append([]string{path}, args[5:]...)
	if err := unix.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s in the image: %w", path, err)
	}
	return nil
}
