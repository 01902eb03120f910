package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// failOpen is one admission call the API server let through unmutated
// (failurePolicy Ignore), as its log tells it.
type failOpen struct {
	Hook   string
	Reason string // the call's error, as logged
	// Slow is a call that outlasted its timeout; otherwise the replica
	// was lost (refused, reset, unreachable) or the answer was bad.
	Slow bool
}

// failOpenLine is what the API server's mutating dispatcher logs for a
// call it fails open (k8s.io/apiserver, admission/plugin/webhook/mutating:
// "Failed calling webhook, failing open NAME: ERROR").
var failOpenLine = regexp.MustCompile(`Failed calling webhook, failing open ([^:\s]+): (.*)$`)

// slowReasons are the errors of a call that ran out of time: the webhook's
// own timeoutSeconds, the client's deadline, a read that waited too long.
var slowReasons = []string{"context deadline exceeded", "Client.Timeout exceeded", "i/o timeout", "timeout awaiting response headers"}

// parseFailOpen finds the calls failed open in an API server log. A call
// whose error names the lost replica's address (victim, may be empty)
// is a loss whatever its error: a deleted pod's address often answers
// nothing, and the call then ends at its deadline like a slow one.
func parseFailOpen(log, victim string) []failOpen {
	var out []failOpen
	for _, line := range strings.Split(log, "\n") {
		m := failOpenLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		f := failOpen{Hook: m[1], Reason: m[2]}
		if victim != "" && strings.Contains(m[2], victim+":") {
			out = append(out, f)
			continue
		}
		for _, r := range slowReasons {
			if strings.Contains(m[2], r) {
				f.Slow = true
				break
			}
		}
		out = append(out, f)
	}
	return out
}

// logMark remembers how far each API server log had grown, so that a step
// reads only what was written after it (the host's control-plane logs,
// shared live as /mnt/control: kube-apiserver.log, and
// kube-apiserver-N.log after a restart).
type logMark map[string]int64

func markLogs(dir string) logMark {
	m := logMark{}
	files, _ := filepath.Glob(filepath.Join(dir, "kube-apiserver*.log"))
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			m[f] = st.Size()
		}
	}
	return m
}

// since is what the API server logged after the mark.
func (m logMark) since(dir string) (string, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "kube-apiserver*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if off := m[f]; off <= int64(len(data)) {
			data = data[off:]
		}
		b.Write(data)
	}
	return b.String(), nil
}

func TestParseFailOpen(t *testing.T) {
	log := `I1206 06:10:01.000000      12 controller.go:10] something else
W1206 06:10:02.123456      12 dispatcher.go:210] Failed calling webhook, failing open fit.gofit.dev: failed calling webhook "fit.gofit.dev": failed to call webhook: Post "https://10.244.0.7:8443/mutate?timeout=2s": context deadline exceeded
W1206 06:10:02.200000      12 dispatcher.go:210] Failed calling webhook, failing open fit.gofit.dev: failed calling webhook "fit.gofit.dev": failed to call webhook: Post "https://10.244.0.8:8443/mutate?timeout=2s": dial tcp 10.244.0.8:8443: connect: connection refused
W1206 06:10:02.300000      12 dispatcher.go:210] Failed calling webhook, failing open fit.gofit.dev: failed calling webhook "fit.gofit.dev": failed to call webhook: Post "https://10.244.0.8:8443/mutate?timeout=2s": net/http: request canceled (Client.Timeout exceeded while awaiting headers)
W1206 06:10:02.400000      12 dispatcher.go:210] Failed calling webhook, failing open fit.gofit.dev: failed calling webhook "fit.gofit.dev": failed to call webhook: Post "https://10.244.0.8:8443/mutate?timeout=2s": EOF
W1206 06:10:02.500000      12 dispatcher.go:210] Failed calling webhook, failing open fit.gofit.dev: failed calling webhook "fit.gofit.dev": failed to call webhook: Post "https://gofit-webhook.gofit-system.svc:443/mutate?timeout=2s": dial tcp 10.244.0.9:8443: i/o timeout
`
	got := parseFailOpen(log, "10.244.0.9")
	// The last timed out, but on the lost replica's address: lost.
	want := []bool{true, false, true, false, false}
	if len(got) != len(want) {
		t.Fatalf("%d calls failed open, want %d: %+v", len(got), len(want), got)
	}
	for i, f := range got {
		if f.Hook != "fit.gofit.dev" || f.Slow != want[i] {
			t.Errorf("call %d: %+v, want hook fit.gofit.dev slow=%v", i, f, want[i])
		}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "kube-apiserver.log")
	os.WriteFile(f, []byte("old\n"), 0o644)
	m := markLogs(dir)
	os.WriteFile(f, []byte("old\nnew\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "kube-apiserver-2.log"), []byte("restarted\n"), 0o644)
	s, err := m.since(dir)
	if err != nil || len(s) != len("new\nrestarted\n") || !strings.Contains(s, "new\n") || !strings.Contains(s, "restarted\n") {
		t.Errorf("since the mark: %q, %v; want the new lines of both logs", s, err)
	}
}
