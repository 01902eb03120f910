// Package kubetest starts a real kube-apiserver and etcd for tests, through
// controller-runtime's envtest. The binaries are built from the Go module
// proxy by kube/hack/envtest-assets.sh on first use and cached by version,
// because setup-envtest's downloads are not reachable everywhere.
package kubetest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// Assets returns the directory holding kube-apiserver and etcd: the
// KUBEBUILDER_ASSETS environment variable when set, otherwise what the
// build script prints (building the binaries on first use, ~6-9 minutes on
// 2 cores, cached after that). It fails the test when they cannot be had.
func Assets(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	assetsOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "envtest-assets.sh")
		cmd := exec.Command("bash", script)
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr // progress lines while the cold build runs
		if assetsErr = cmd.Run(); assetsErr != nil {
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		assetsDir = lines[len(lines)-1]
	})
	if assetsErr != nil {
		t.Fatalf("build kube-apiserver and etcd for envtest: %v", assetsErr)
	}
	return assetsDir
}

// Start runs a kube-apiserver and etcd for the test and stops them when it
// ends. env may carry webhook options and CRDs; nil means a plain server.
func Start(t testing.TB, env *envtest.Environment) *rest.Config {
	t.Helper()
	if env == nil {
		env = &envtest.Environment{}
	}
	env.BinaryAssetsDirectory = Assets(t)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
	return cfg
}
