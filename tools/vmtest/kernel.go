// Package vmtest boots a Debian kernel under QEMU (TCG, no KVM needed) with
// a busybox initramfs, mounts cgroups as v2 or hybrid, and runs statically
// built Go test binaries inside it, so that every real-cgroup test also
// runs on kernels and layouts the host does not have. Its own test
// (vmtest_test.go) is what `make test` and `make test-v2` run; Suites lists
// the packages it runs inside.
//
// Everything it downloads is cached by version under $GOFIT_CACHE (default
// ~/.cache/gofit)/vm: the kernel comes from `apt-get download
// linux-image-<version>-amd64` and `dpkg-deb -x`, never from installing a
// kernel package, which would upgrade the host's.
package vmtest

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// DefaultKernel is the Debian kernel ABI booted unless GOFIT_VM_KERNEL says
// otherwise. When the archive no longer has it, the newest 6.1.0-N that it
// has is used instead.
const DefaultKernel = "6.1.0-47"

// shareModules are the kernel modules that give the guest a 9p share over
// virtio (Debian builds them as modules); they are loaded in an order that
// satisfies their "depends=" lines.
func shareModules() []string {
	return []string{"virtio", "virtio_ring", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci",
		"netfs", "fscache", "9pnet", "9pnet_virtio", "9p"}
}

// Kernel is an unpacked kernel ready to boot.
type Kernel struct {
	Version string   // ABI, e.g. "6.1.0-47"
	VMLinux string   // the uncompressed kernel (boots ~3x faster under TCG than vmlinuz)
	Modules []string // .ko files in load order
}

// CacheDir is $GOFIT_CACHE, or ~/.cache/gofit.
func CacheDir() (string, error) {
	if d := os.Getenv("GOFIT_CACHE"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no cache dir: set GOFIT_CACHE: %w", err)
	}
	return filepath.Join(home, ".cache", "gofit"), nil
}

// FetchKernel returns the kernel version from the cache, fetching and
// unpacking it first if needed. logf reports slow steps.
func FetchKernel(ctx context.Context, cache, version string, logf func(string, ...any)) (*Kernel, error) {
	return FetchKernelWith(ctx, cache, version, nil, logf)
}

// NodeModules are the modules a Kubernetes node needs beside the share's:
// the CNI bridge plugin's Linux bridge (with its stp and llc) and the veth
// pairs that join each pod to it, and the virtio network card (with the
// failover modules it depends on) that joins the guest to the control
// plane on the host. Debian builds them as modules.
func NodeModules() []string {
	return []string{"llc", "stp", "bridge", "veth", "failover", "net_failover", "virtio_net"}
}

// FetchKernelWith is FetchKernel with extra modules (each listed after what
// it depends on, or an error names the missing one), cached apart from the
// plain kernel's.
func FetchKernelWith(ctx context.Context, cache, version string, extra []string, logf func(string, ...any)) (*Kernel, error) {
	kdir := kernelDir(cache, version, extra)
	if k, err := cachedKernel(kdir, version); err == nil {
		return k, nil
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: kernel %s is not cached in %s and there is no %s to fetch it", ErrCannot, version, cache, tool)
		}
	}
	tmp, err := os.MkdirTemp(cache, "kernel-fetch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	pkg := "linux-image-" + version + "-amd64"
	logf("fetching %s (apt-get download, dpkg-deb -x; cached afterwards)", pkg)
	if err := aptDownload(ctx, tmp, pkg); err != nil {
		if v, lerr := newestKernel(ctx); lerr == nil && v != version {
			logf("%v; trying %s, the newest in the archive", err, v)
			kdir = kernelDir(cache, v, extra)
			if k, err := cachedKernel(kdir, v); err == nil {
				return k, nil
			}
			version, pkg = v, "linux-image-"+v+"-amd64"
			err = aptDownload(ctx, tmp, pkg)
		}
		if err != nil {
			return nil, err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, pkg+"_*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s: want one .deb in %s, found %v", pkg, tmp, debs)
	}
	root := filepath.Join(tmp, "root")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %w: %s", debs[0], err, out)
	}
	stage := filepath.Join(tmp, "stage")
	if err := os.MkdirAll(filepath.Join(stage, "modules"), 0o755); err != nil {
		return nil, err
	}
	vmlinuz := filepath.Join(root, "boot", "vmlinuz-"+version+"-amd64")
	if err := extractVMLinux(ctx, vmlinuz, filepath.Join(stage, "vmlinux")); err != nil {
		return nil, err
	}
	modules := append(shareModules(), extra...)
	found := map[string]string{}
	filepath.WalkDir(filepath.Join(root, "lib", "modules"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			name := strings.TrimSuffix(d.Name(), ".ko")
			if slices.Contains(modules, name) {
				found[name] = p
			}
		}
		return nil
	})
	var order []string
	for _, m := range modules {
		p, ok := found[m]
		if !ok {
			return nil, fmt.Errorf("%s has no %s.ko (compressed modules are not supported)", pkg, m)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(stage, "modules", m+".ko"), b, 0o644); err != nil {
			return nil, err
		}
		order = append(order, m)
	}
	order, err = loadOrder(filepath.Join(stage, "modules"), order)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(stage, "modules.order"), []byte(strings.Join(order, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	dst := kdir
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(stage, dst); err != nil && !errors.Is(err, os.ErrExist) {
		// Another run may have won the race; its copy is as good.
		if _, cerr := cachedKernel(dst, version); cerr != nil {
			return nil, err
		}
	}
	return cachedKernel(dst, version)
}

// kernelDir is where a kernel with the share's modules and extra is cached.
func kernelDir(cache, version string, extra []string) string {
	d := filepath.Join(cache, "vm", "linux-"+version)
	if len(extra) > 0 {
		d += "+" + strings.Join(extra, "+")
	}
	return d
}

func cachedKernel(dir, version string) (*Kernel, error) {
	order, err := os.ReadFile(filepath.Join(dir, "modules.order"))
	if err != nil {
		return nil, err
	}
	k := &Kernel{Version: version, VMLinux: filepath.Join(dir, "vmlinux")}
	if _, err := os.Stat(k.VMLinux); err != nil {
		return nil, err
	}
	for _, m := range strings.Fields(string(order)) {
		k.Modules = append(k.Modules, filepath.Join(dir, "modules", m+".ko"))
	}
	return k, nil
}

// aptDownload fetches a .deb into dir, refreshing the package lists once
// when that fails: a fresh machine has none, and old lists name files the
// archive has since dropped.
func aptDownload(ctx context.Context, dir, pkg string) error {
	run := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", pkg)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	out, err := run()
	if err != nil {
		if uout, uerr := exec.CommandContext(ctx, "apt-get", "update", "-q").CombinedOutput(); uerr != nil {
			return fmt.Errorf("apt-get download %s: %w: %s; apt-get update: %v: %s", pkg, err, lastLines(out, 2), uerr, lastLines(uout, 2))
		}
		out, err = run()
	}
	if err != nil {
		return fmt.Errorf("apt-get download %s: %w: %s", pkg, err, lastLines(out, 3))
	}
	return nil
}

// newestKernel asks apt for the newest 6.1.0-N ABI it can download.
func newestKernel(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "search", "--names-only", `^linux-image-6\.1\.0-[0-9]+-amd64$`).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache search: %w", err)
	}
	re := regexp.MustCompile(`^linux-image-(6\.1\.0-([0-9]+))-amd64 `)
	best, bestN := "", -1
	for _, l := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			if n, _ := strconv.Atoi(m[2]); n > bestN {
				best, bestN = m[1], n
			}
		}
	}
	if best == "" {
		return "", errors.New("apt-cache knows no linux-image-6.1.0-N-amd64")
	}
	return best, nil
}

// extractVMLinux writes the uncompressed kernel inside a bzImage: the xz
// stream that starts after the setup code (what scripts/extract-vmlinux in
// the kernel tree does, for xz only: Debian compresses with xz).
func extractVMLinux(ctx context.Context, vmlinuz, dst string) error {
	b, err := os.ReadFile(vmlinuz)
	if err != nil {
		return err
	}
	i := bytes.Index(b, []byte("\xfd7zXZ\x00"))
	if i < 0 {
		return fmt.Errorf("%s: no xz stream found (not an xz-compressed kernel)", vmlinuz)
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(b[i:]), f, &stderr
	// xz complains about the bytes after the stream; what matters is a
	// complete ELF image, checked below.
	runErr := cmd.Run()
	if e, err := elf.Open(dst); err != nil {
		return fmt.Errorf("uncompress the kernel in %s: %v (xz: %v %s)", vmlinuz, err, runErr, stderr.String())
	} else {
		e.Close()
	}
	return f.Sync()
}

// loadOrder sorts module names so each comes after what it depends on,
// from the depends= entry of each .ko's .modinfo section.
func loadOrder(dir string, names []string) ([]string, error) {
	deps := map[string][]string{}
	for _, n := range names {
		f, err := elf.Open(filepath.Join(dir, n+".ko"))
		if err != nil {
			return nil, err
		}
		sec := f.Section(".modinfo")
		var data []byte
		if sec != nil {
			data, _ = sec.Data()
		}
		f.Close()
		for _, kv := range bytes.Split(data, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok && len(v) > 0 {
				deps[n] = strings.Split(string(v), ",")
			}
		}
	}
	var out []string
	done := map[string]bool{}
	var visit func(n string, depth int) error
	visit = func(n string, depth int) error {
		if done[n] {
			return nil
		}
		if depth > len(names) {
			return fmt.Errorf("module dependency cycle at %s", n)
		}
		d := append([]string(nil), deps[n]...)
		sort.Strings(d)
		for _, m := range d {
			if !slices.Contains(names, m) {
				return fmt.Errorf("module %s depends on %s, which is not in the set %v", n, m, names)
			}
			if err := visit(m, depth+1); err != nil {
				return err
			}
		}
		done[n] = true
		out = append(out, n)
		return nil
	}
	for _, n := range names {
		if err := visit(n, 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
