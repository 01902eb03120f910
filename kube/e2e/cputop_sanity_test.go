package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSampleCPU(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cpu.log")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { sampleCPU(file, 200*time.Millisecond, stop); close(done) }()
	// Something busy to be named.
	end := time.Now().Add(700 * time.Millisecond)
	for time.Now().Before(end) {
	}
	close(stop)
	<-done
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 {
		t.Fatalf("%d samples in 0.7s at 0.2s: %q", len(lines), b)
	}
	if !strings.Contains(string(b), "e2e.test") {
		t.Errorf("the busy test process is not named: %s", b)
	}
	t.Logf("%s", b)
}
