package vmtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Layout is how the guest mounts cgroups.
type Layout string

const (
	// V2 mounts the unified hierarchy at /sys/fs/cgroup, as systemd does by
	// default since v247 and every current distribution ships.
	V2 Layout = "v2"
	// Hybrid mounts the cpu,cpuacct, cpuset and memory controllers as v1
	// hierarchies and an empty v2 hierarchy at /sys/fs/cgroup/unified, as
	// systemd's hybrid mode does.
	Hybrid Layout = "hybrid"
)

// initScript is the guest's /init. It mounts what a Go test binary needs,
// loads the 9p modules, mounts the share (/share: binaries, script, results)
// and the source tree (/src, read-only: testdata), mounts cgroups as the
// kernel command line's gofit.layout says, puts itself into a delegated,
// populated, non-root cgroup (vmtest.service, as a systemd service with
// Delegate=yes runs), runs /share/run.sh and powers off. Whatever happens,
// the host reads the results from /share/out and treats a missing status
// as a failure.
const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /share /src /root
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o mode=1777 tmp /tmp
fail() { echo "vmtest-init: $*"; poweroff -f; }
for m in $(cat /modules/order); do insmod /modules/$m.ko || fail "insmod $m"; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 share /share || fail "mount share"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro src /src || fail "mount src"
ip link set lo up || fail "lo up"
layout=v2
shares=
for w in $(cat /proc/cmdline); do case "$w" in
	gofit.layout=*) layout=${w#gofit.layout=};;
	gofit.shares=*) shares=$(echo ${w#gofit.shares=} | tr , ' ');;
esac; done
for s in $shares; do
	mkdir -p /mnt/$s && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro $s /mnt/$s || fail "mount $s"
done
case "$layout" in
v2)
	mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || fail "mount cgroup2"
	# As systemd does at the root: hand the controllers down.
	echo "+cpu +cpuset +memory +io +pids" > /sys/fs/cgroup/cgroup.subtree_control || fail "root subtree_control"
	mkdir /sys/fs/cgroup/vmtest.service && echo $$ > /sys/fs/cgroup/vmtest.service/cgroup.procs || fail "enter vmtest.service"
	;;
hybrid)
	mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
	for c in cpu,cpuacct cpuset memory pids; do
		mkdir /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || fail "mount v1 $c"
	done
	ln -s cpu,cpuacct /sys/fs/cgroup/cpu && ln -s cpu,cpuacct /sys/fs/cgroup/cpuacct
	mkdir /sys/fs/cgroup/unified && mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup/unified || fail "mount cgroup2"
	for c in cpu,cpuacct memory pids unified; do
		mkdir /sys/fs/cgroup/$c/vmtest.service && echo $$ > /sys/fs/cgroup/$c/vmtest.service/cgroup.procs || fail "enter $c/vmtest.service"
	done
	;;
*) fail "unknown gofit.layout=$layout";;
esac
echo "vmtest-init: $layout ready after $(cut -d' ' -f1 /proc/uptime)s, clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
sh /share/run.sh
poweroff -f
`

// writeInitramfs writes a newc cpio archive (the format the kernel unpacks
// into its rootfs) holding busybox, the modules and /init.
func writeInitramfs(dst, busybox string, k *Kernel) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	w := &cpioWriter{w: bufio.NewWriter(f)}
	w.dir("bin")
	w.dir("modules")
	w.fileFrom("bin/busybox", busybox, 0o755)
	var order []string
	for _, m := range k.Modules {
		name := strings.TrimSuffix(filepath.Base(m), ".ko")
		order = append(order, name)
		w.fileFrom("modules/"+name+".ko", m, 0o644)
	}
	w.file("modules/order", []byte(strings.Join(order, "\n")+"\n"), 0o644)
	w.file("init", []byte(initScript), 0o755)
	w.trailer()
	if w.err != nil {
		return fmt.Errorf("write initramfs %s: %w", dst, w.err)
	}
	if err := w.w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// cpioWriter writes the "newc" format: a 110-byte ASCII header of hex
// fields, the NUL-terminated name, the data, each padded to 4 bytes.
type cpioWriter struct {
	w   *bufio.Writer
	ino int
	err error
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) dir(name string) { c.entry(name, 0o040755, nil) }

func (c *cpioWriter) file(name string, data []byte, perm uint32) {
	c.entry(name, 0o100000|perm, data)
}

func (c *cpioWriter) fileFrom(name, src string, perm uint32) {
	f, err := os.Open(src)
	if err != nil {
		c.err = err
		return
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		c.err = err
		return
	}
	c.file(name, data, perm)
}

func (c *cpioWriter) trailer() { c.entry("TRAILER!!!", 0, nil) }
