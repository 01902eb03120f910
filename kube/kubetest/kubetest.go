// Package kubetest starts a real kube-apiserver and etcd for tests, through
// controller-runtime's envtest. The binaries are built from the Go module
// proxy by kube/hack/envtest-assets.sh on first use and cached by version,
// because setup-envtest's downloads are not reachable everywhere.
package kubetest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
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
	return Hack(t, "envtest-assets.sh", "kube-apiserver and etcd for envtest")
}

// hack holds each kube/hack script's one run in this test binary.
var hack struct {
	mu   sync.Mutex
	runs map[string]func() (string, error)
}

// Hack runs the script kube/hack/NAME, once per test binary, and returns
// the last line it prints: the path of what it built (or found cached).
// Its progress lines go to stderr while a cold build runs. It fails the
// test, naming what, when the script fails.
func Hack(t testing.TB, name, what string) string {
	t.Helper()
	hack.mu.Lock()
	run, ok := hack.runs[name]
	if !ok {
		run = sync.OnceValues(func() (string, error) {
			_, file, _, _ := runtime.Caller(0)
			cmd := exec.Command("bash", filepath.Join(filepath.Dir(file), "..", "hack", name))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			if err := cmd.Run(); err != nil {
				return "", err
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			return lines[len(lines)-1], nil
		})
		if hack.runs == nil {
			hack.runs = map[string]func() (string, error){}
		}
		hack.runs[name] = run
	}
	hack.mu.Unlock()
	out, err := run()
	if err != nil {
		t.Fatalf("build %s: %v", what, err)
	}
	return out
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

// ModuleDir downloads module@version into the module cache (once; go mod
// download is a no-op after) and returns its directory: the CRDs of the
// tools gofit's manifests are made for, from their own modules. It fails
// the test when the module cannot be had.
func ModuleDir(t testing.TB, module, version string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir() // outside any module: nothing is added to go.mod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if err != nil || json.Unmarshal(out, &mod) != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s\n%s%s", module, version, err, mod.Error, out, stderr.Bytes())
	}
	return mod.Dir
}

// clusterScoped are the kinds CreateFile creates without a namespace.
var clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "Namespace": true, "CustomResourceDefinition": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true}

// CreateFile creates every object of the YAML (or JSON) file path through
// dyn with opts (a dry run, strict field validation), each in its own
// namespace or else in ns, and counts them by kind into kinds. resources
// maps each kind the file may hold to its resource; another kind, or an
// object that does not decode, fails the test, and a refused create is
// reported as an error naming the file and the object.
func CreateFile(ctx context.Context, t testing.TB, dyn dynamic.Interface, path, ns string, resources map[string]string, opts metav1.CreateOptions, kinds map[string]int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	name := filepath.Base(path)
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 64<<10)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if obj.Object == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(obj.GetAPIVersion())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		res, ok := resources[obj.GetKind()]
		if !ok {
			t.Fatalf("%s: %s %s: a kind this test does not know", name, obj.GetKind(), obj.GetName())
		}
		all := dyn.Resource(gv.WithResource(res))
		var ri dynamic.ResourceInterface = all
		if !clusterScoped[obj.GetKind()] {
			ri = all.Namespace(cmp.Or(obj.GetNamespace(), ns))
		}
		if _, err := ri.Create(ctx, &obj, opts); err != nil {
			t.Errorf("%s: %s %s: %v", name, obj.GetKind(), obj.GetName(), err)
		}
		kinds[obj.GetKind()]++
	}
}
