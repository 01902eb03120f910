package nongo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/target"
)

// maxSmaps bounds a read of /proc/PID/smaps: about 1 KiB per mapping, and
// a Go service has a few hundred.
const maxSmaps = 32 << 20

// ReadProcess gathers the evidence /proc holds on process pid under root:
// its mappings, the Go version built into its executable and how long it
// has run. The caller adds the cgroup's kernel memory, the runtime's own
// figures and the window where it knows better.
func ReadProcess(root string, pid int) (Evidence, error) {
	dir := filepath.Join(root, "proc", strconv.Itoa(pid))
	var ev Evidence
	file := filepath.Join(dir, "smaps")
	text, ok, err := cgroup.ReadBounded(file, maxSmaps)
	if err != nil {
		return ev, fmt.Errorf("%s: %w", file, err)
	}
	if !ok {
		return ev, fmt.Errorf("%s: no such process, or a kernel without smaps", file)
	}
	if ev.Maps, err = ParseSmaps(text); err != nil {
		return ev, fmt.Errorf("%s: %w", file, err)
	}
	// Through the exe link: the binary the process runs, even from
	// another mount namespace.
	if b, err := target.Read(filepath.Join(dir, "exe")); err == nil {
		ev.GoVersion = b.GoVersion
	}
	if up, err := uptime(root, dir); err == nil {
		ev.Window = up
	}
	return ev, nil
}

// uptime is how long the process has run: /proc/uptime less the start
// time in /proc/PID/stat (field 22, in clock ticks of 100 Hz, which Linux
// reports whatever its internal HZ).
func uptime(root, dir string) (time.Duration, error) {
	stat, _, err := cgroup.ReadBounded(filepath.Join(dir, "stat"), 4<<10)
	if err != nil {
		return 0, err
	}
	up, _, err := cgroup.ReadBounded(filepath.Join(root, "proc", "uptime"), 4<<10)
	if err != nil {
		return 0, err
	}
	return parseUptime(stat, up)
}

func parseUptime(stat, up string) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted after its last ')'.
	i := strings.LastIndexByte(stat, ')')
	f := strings.Fields(stat[i+1:])
	u := strings.Fields(up)
	if i < 0 || len(f) < 20 || len(u) < 1 {
		return 0, errors.New("malformed /proc/PID/stat or /proc/uptime")
	}
	ticks, err1 := strconv.ParseUint(f[19], 10, 64)
	secs, err2 := strconv.ParseFloat(u[0], 64)
	if err1 != nil || err2 != nil || ticks > 1<<50 {
		return 0, errors.New("malformed /proc/PID/stat or /proc/uptime")
	}
	return max(time.Duration((secs-float64(ticks)/100)*float64(time.Second)), 0), nil
}

// ClearRefs clears the referenced bits of process pid's pages
// (/proc/PID/clear_refs, the working-set estimate's first step): the file
// pages referenced after it are the ones the process uses. It needs the
// same permission as ptrace, and nudges the kernel's page aging a little.
func ClearRefs(root string, pid int) error {
	file := filepath.Join(root, "proc", strconv.Itoa(pid), "clear_refs")
	if err := os.WriteFile(file, []byte("1"), 0); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// FetchRuntime reads the runtime's own figures from url: Prometheus text
// (a /metrics endpoint) or expvar JSON (/debug/vars).
func FetchRuntime(ctx context.Context, url string) (Runtime, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Runtime{}, fmt.Errorf("%s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Runtime{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Runtime{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return Runtime{}, fmt.Errorf("%s: %w", url, err)
	}
	var r Runtime
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "{") {
		r, err = ParseExpvar(b)
	} else {
		r, err = ParseMetrics(string(b))
	}
	if err != nil {
		return Runtime{}, fmt.Errorf("%s: %w", url, err)
	}
	return r, nil
}
