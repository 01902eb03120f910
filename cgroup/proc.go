package cgroup

// Parsers for /proc/<pid>/cgroup and /proc/<pid>/mountinfo.
//
// /proc/<pid>/cgroup (one line per hierarchy):
//
//	4:memory:/kubepods/burstable/pod1/abc     v1: id:controllers:path
//	0::/system.slice/foo.service              v2: id 0, no controllers
//
// /proc/<pid>/mountinfo (proc(5)):
//
//	35 24 0:30 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
//	id parent maj:min root mountpoint options [optional...] - fstype source superoptions

import (
	"errors"
	"strconv"
	"strings"
)

type procEntry struct {
	controllers []string // empty for the v2 entry
	path        string
}

func parseProcCgroup(s string) ([]procEntry, error) {
	var out []procEntry
	err := eachLine(s, func(line int, l string) error {
		id, rest, ok1 := strings.Cut(l, ":")
		ctrls, path, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || !strings.HasPrefix(path, "/") {
			return lineErr(line, l, errors.New("want \"id:controllers:/path\""))
		}
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			return lineErr(line, l, errors.New("hierarchy id is not a number"))
		}
		e := procEntry{path: path}
		if ctrls != "" {
			e.controllers = strings.Split(ctrls, ",")
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

type mount struct {
	root        string // path inside the hierarchy that is mounted
	point       string // where it is mounted
	v2          bool
	controllers []string // v1 only, from the super options
}

func (m mount) has(ctrl string) bool {
	for _, c := range m.controllers {
		if c == ctrl {
			return true
		}
	}
	return false
}

// parseMountinfo returns the cgroup and cgroup2 mounts, in file order.
func parseMountinfo(s string) ([]mount, error) {
	var out []mount
	err := eachLine(s, func(line int, l string) error {
		pre, post, ok := strings.Cut(l, " - ")
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 2 {
			return lineErr(line, l, errors.New("want \"id parent maj:min root mountpoint options ... - fstype source superoptions\""))
		}
		fstype := g[0]
		if fstype != "cgroup" && fstype != "cgroup2" {
			return nil
		}
		m := mount{root: unescapeOctal(f[3]), point: unescapeOctal(f[4]), v2: fstype == "cgroup2"}
		if !m.v2 && len(g) >= 3 {
			for _, o := range strings.Split(g[2], ",") {
				switch o {
				case "rw", "ro", "":
				default:
					m.controllers = append(m.controllers, o)
				}
			}
		}
		out = append(out, m)
		return nil
	})
	return out, err
}

// unescapeOctal undoes the kernel's \NNN escaping of spaces, tabs,
// newlines and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
