package vmtest

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrCannot means this machine cannot run the VM at all (not root, not a
// Debian-like host with apt, no x86-64): the one reason to skip.
var ErrCannot = errors.New("cannot run the test VM here")

// Tools are the host programs the VM needs.
type Tools struct {
	QEMU    string // qemu-system-x86_64
	Busybox string // a statically linked busybox
}

// debPackages are installed when a tool is missing: QEMU, a static busybox
// for the initramfs, xz to unpack the kernel.
func debPackages() []string { return []string{"qemu-system-x86", "busybox-static", "xz-utils"} }

// FindTools finds QEMU and a static busybox, installing the Debian packages
// that provide them (apt-get, as root) when they are missing.
func FindTools(ctx context.Context, logf func(string, ...any)) (*Tools, error) {
	t, err := lookTools()
	if err == nil {
		return t, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: %v, and installing it needs root", ErrCannot, err)
	}
	if _, lerr := exec.LookPath("apt-get"); lerr != nil {
		return nil, fmt.Errorf("%w: %v, and there is no apt-get to install %s", ErrCannot, err, strings.Join(debPackages(), " "))
	}
	logf("%v: apt-get install %s", err, strings.Join(debPackages(), " "))
	install := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-q", "--no-install-recommends"}, debPackages()...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if out, ierr := install(); ierr != nil {
		// A fresh machine has no package lists yet.
		if uout, uerr := exec.CommandContext(ctx, "apt-get", "update", "-q").CombinedOutput(); uerr != nil {
			return nil, fmt.Errorf("apt-get update: %w: %s", uerr, lastLines(uout, 3))
		}
		if out, ierr = install(); ierr != nil {
			return nil, fmt.Errorf("apt-get install %s: %w: %s", strings.Join(debPackages(), " "), ierr, lastLines(out, 3))
		}
	}
	return lookTools()
}

func lookTools() (*Tools, error) {
	q, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, errors.New("no qemu-system-x86_64")
	}
	if _, err := exec.LookPath("xz"); err != nil {
		return nil, errors.New("no xz")
	}
	for _, b := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if isStatic(b) {
			return &Tools{QEMU: q, Busybox: b}, nil
		}
	}
	return nil, errors.New("no statically linked busybox")
}

// isStatic reports whether file is an ELF executable without an
// interpreter (the Debian busybox package is dynamic, busybox-static not).
func isStatic(file string) bool {
	f, err := elf.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// Binary is one test binary to run inside the VM.
type Binary struct {
	Name    string        // file name under /share/bin, and the name of its results
	Path    string        // on the host
	Dir     string        // working directory, relative to the source tree (for testdata)
	Args    []string      // test flags
	Timeout time.Duration // killed after this, and reported as failed
	// Plain is a program, not a Go test binary: it gets Args only, no
	// -test.timeout (the outer timeout still kills it).
	Plain bool
}

// Result is what one binary did inside the VM.
type Result struct {
	Name     string
	ExitCode int // -1 when it never finished (killed, or the VM died first)
	Output   string
	Seconds  float64
}

// Run is one boot.
type Run struct {
	Kernel   *Kernel
	Tools    *Tools
	Layout   Layout
	Source   string // the source tree, shared read-only at /src
	Binaries []Binary
	Memory   int           // MiB (default 1536)
	CPUs     int           // default 2
	Limit    time.Duration // for the whole boot (default: the binaries' timeouts plus a minute)
	Console  io.Writer
	// Shares are host directories shared read-only at /mnt/<tag> (tags are
	// lowercase words), e.g. prebuilt node components too big to copy.
	Shares map[string]string
	// Tap, when set, gives the guest one virtio-net card joined to this tap
	// device, which the caller has made (in a network namespace of its
	// own); otherwise the guest has no network card.
	Tap string
	// Cmdline is appended to the kernel's command line.
	Cmdline string
	// OnShare, when set, is told the share directory as soon as it
	// exists: a caller that is interrupted can remove it (Boot removes it
	// when it returns).
	OnShare func(dir string)
}

// Report is the outcome of a boot.
type Report struct {
	Results []Result
	Boot    time.Duration // from QEMU start to the guest's "ready" line
	Wall    time.Duration
	Console string // the last part of the serial console
	Err     error  // the VM itself failed (timeout, QEMU error); results may be partial
}

// Boot runs the binaries in a fresh VM and collects their results. The VM
// is killed when ctx ends or when every binary's timeout plus a minute has
// passed; binaries that did not report then count as failed.
func (r *Run) Boot(ctx context.Context) *Report {
	rep := &Report{}
	start := time.Now()
	share, err := os.MkdirTemp("", "gofit-vm-share-")
	if err != nil {
		rep.Err = err
		return rep
	}
	defer os.RemoveAll(share)
	if r.OnShare != nil {
		r.OnShare(share)
	}
	if rep.Err = r.prepare(share); rep.Err != nil {
		return rep
	}
	limit := r.Limit
	if limit == 0 {
		limit = time.Minute
		for _, b := range r.Binaries {
			limit += b.Timeout + 15*time.Second
		}
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	mem, cpus := r.Memory, r.CPUs
	if mem == 0 {
		mem = 1536
	}
	if cpus == 0 {
		cpus = 2
	}
	tags := make([]string, 0, len(r.Shares))
	for tag := range r.Shares {
		if !shareTag.MatchString(tag) {
			rep.Err = fmt.Errorf("share tag %q: want a lowercase word", tag)
			return rep
		}
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	cmdline := "console=ttyS0 quiet loglevel=0 panic=-1 gofit.layout=" + string(r.Layout)
	if len(tags) > 0 {
		cmdline += " gofit.shares=" + strings.Join(tags, ",")
	}
	if r.Cmdline != "" {
		cmdline += " " + r.Cmdline
	}
	// The CPU model stays TCG's default (qemu64). -cpu max gives Go's
	// crypto its instructions (AES-GCM 3.5×, ECDSA 8× faster in the guest)
	// but slowed the e2e node as a whole 4×: etcd up in 16.5 s instead of
	// 4.6, the images imported in 278 s instead of 78 (2026-11-28).
	args := []string{"-accel", "tcg", "-cpu", cpuModel(), "-m", strconv.Itoa(mem), "-smp", strconv.Itoa(cpus),
		"-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
		"-kernel", r.Kernel.VMLinux, "-initrd", filepath.Join(share, "initrd"),
		"-append", cmdline,
		"-virtfs", "local,path=" + share + ",security_model=none,mount_tag=share",
		"-virtfs", "local,path=" + r.Source + ",security_model=none,readonly=on,mount_tag=src",
	}
	for _, tag := range tags {
		args = append(args, "-virtfs", "local,path="+r.Shares[tag]+",security_model=none,readonly=on,mount_tag="+tag)
	}
	if r.Tap != "" {
		// A fixed MAC: the guest names its card eth0 and sets its address
		// itself (no DHCP in an initramfs).
		args = append(args, "-netdev", "tap,id=n0,ifname="+r.Tap+",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56,romfile=")
	} else {
		args = append(args, "-net", "none")
	}
	cmd := exec.CommandContext(ctx, r.Tools.QEMU, args...)
	cmd.WaitDelay = 5 * time.Second
	dieWithParent(cmd)
	con := &consoleTail{max: 64 << 10, out: r.Console, ready: func() { rep.Boot = time.Since(start) }}
	cmd.Stdout, cmd.Stderr = con, con
	// A sealed stdin: QEMU's stdio serial must not read the test's terminal.
	cmd.Stdin = bytes.NewReader(nil)
	runErr := cmd.Run()
	rep.Wall = time.Since(start)
	rep.Console = con.String()
	switch {
	case ctx.Err() != nil:
		rep.Err = fmt.Errorf("the VM did not finish within %v and was killed", limit)
	case runErr != nil:
		rep.Err = fmt.Errorf("qemu: %w", runErr)
	}
	for _, b := range r.Binaries {
		res := Result{Name: b.Name, ExitCode: -1}
		out, _ := os.ReadFile(filepath.Join(share, "out", b.Name+".log"))
		res.Output = string(out)
		if s, err := os.ReadFile(filepath.Join(share, "out", b.Name+".rc")); err == nil {
			f := strings.Fields(string(s))
			if len(f) == 2 {
				res.ExitCode, _ = strconv.Atoi(f[0])
				res.Seconds, _ = strconv.ParseFloat(f[1], 64)
			}
		}
		rep.Results = append(rep.Results, res)
	}
	return rep
}

var shareTag = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// prepare fills the share: the initramfs, the binaries and run.sh.
func (r *Run) prepare(share string) error {
	for _, d := range []string{"bin", "out"} {
		if err := os.Mkdir(filepath.Join(share, d), 0o755); err != nil {
			return err
		}
	}
	if err := writeInitramfs(filepath.Join(share, "initrd"), r.Tools.Busybox, r.Kernel); err != nil {
		return err
	}
	var sh strings.Builder
	sh.WriteString("# generated by tools/vmtest: runs each test binary, writes its log and \"status seconds\"\n")
	for _, b := range r.Binaries {
		if err := os.Link(b.Path, filepath.Join(share, "bin", b.Name)); err != nil {
			if err := copyFile(b.Path, filepath.Join(share, "bin", b.Name)); err != nil {
				return err
			}
		}
		secs := int(b.Timeout.Seconds())
		fmt.Fprintf(&sh, "echo 'vmtest: run %s'\n", b.Name)
		fmt.Fprintf(&sh, "t0=$(cut -d' ' -f1 /proc/uptime)\n")
		// -test.timeout makes Go print every goroutine's stack; the outer
		// timeout kills a binary that hangs anyway.
		args := shellJoin(b.Args)
		if !b.Plain {
			args = fmt.Sprintf("-test.timeout=%ds %s", secs, args)
		}
		fmt.Fprintf(&sh, "(cd %s && timeout -s KILL %d /share/bin/%s %s) > /share/out/%s.log 2>&1\n",
			shellQuote(filepath.Join("/src", b.Dir)), secs+10, b.Name, args, b.Name)
		fmt.Fprintf(&sh, "rc=$?; t1=$(cut -d' ' -f1 /proc/uptime)\n")
		fmt.Fprintf(&sh, "echo \"$rc $(awk \"BEGIN{print $t1-$t0}\")\" > /share/out/%s.rc\n", b.Name)
		fmt.Fprintf(&sh, "echo \"vmtest: %s exit $rc\"\n", b.Name)
		fmt.Fprintf(&sh, "sync\n")
	}
	return os.WriteFile(filepath.Join(share, "run.sh"), []byte(sh.String()), 0o644)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// consoleTail keeps the end of the serial console, passes it on to out,
// and notes when the guest says it is ready.
type consoleTail struct {
	mu    sync.Mutex
	max   int
	b     []byte
	out   io.Writer
	ready func()
	seen  bool
}

func (c *consoleTail) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b = append(c.b, p...)
	if !c.seen && bytes.Contains(c.b, []byte("vmtest-init: ")) && bytes.Contains(c.b, []byte(" ready after ")) {
		c.seen = true
		c.ready()
	}
	if len(c.b) > c.max {
		c.b = c.b[len(c.b)-c.max:]
	}
	if c.out != nil {
		c.out.Write(p)
	}
	return len(p), nil
}

func (c *consoleTail) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}

// cpuModel is QEMU's -cpu: GOFIT_VM_CPU, else qemu64.
func cpuModel() string {
	if m := os.Getenv("GOFIT_VM_CPU"); m != "" {
		return m
	}
	return "qemu64"
}
