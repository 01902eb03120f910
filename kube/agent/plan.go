package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// PlanWrite is one value plan mode would write.
type PlanWrite struct {
	Cgroup string `json:"cgroup"` // path under the memory controller's mount
	File   string `json:"file"`
	Value  string `json:"value"` // decimal bytes or "max"
	Reason string `json:"reason"`
}

// Plan is the output of `gofit node plan`.
type Plan struct {
	CgroupVersion int         `json:"cgroup_version"`
	Driver        string      `json:"driver"`
	Writes        []PlanWrite `json:"writes"`
	// Kubelet is what the kubelet's own Memory QoS writes and how that was
	// found; Deferred the files, per level, the agent leaves to it and why.
	Kubelet  string   `json:"kubelet,omitempty"`
	Deferred []string `json:"deferred"`
	Warnings []string `json:"warnings"`
}

// PlanOf turns a dry-run report into plan output: the files whose value
// would change, in the order they would be written.
func (a *Agent) PlanOf(rep Report) Plan {
	p := Plan{CgroupVersion: a.layout.Version, Driver: a.layout.Driver, Writes: []PlanWrite{}, Warnings: append([]string{}, rep.Warnings...),
		Kubelet: rep.Kubelet, Deferred: append([]string{}, rep.Deferred...)}
	if rep.SkipReason != "" {
		p.Warnings = append(p.Warnings, rep.SkipReason)
	}
	for _, c := range rep.Apply.Changed {
		p.Writes = append(p.Writes, PlanWrite{Cgroup: a.files.cgroupPath(c.Dir), File: c.File, Value: manage.FormatValue(c.Value.Value), Reason: c.Reason})
	}
	for _, e := range rep.Apply.Errors {
		p.Warnings = append(p.Warnings, e.Error())
	}
	return p
}

// WriteText prints a plan for people.
func (p Plan) WriteText(w io.Writer) {
	fmt.Fprintf(w, "cgroup v%d, %s driver, %d writes\n", p.CgroupVersion, p.Driver, len(p.Writes))
	for _, x := range p.Writes {
		fmt.Fprintf(w, "  %s/%s = %s\n      %s\n", x.Cgroup, x.File, x.Value, x.Reason)
	}
	if p.Kubelet != "" {
		fmt.Fprintf(w, "kubelet: %s\n", p.Kubelet)
	}
	for _, x := range p.Deferred {
		fmt.Fprintf(w, "defers to the kubelet: %s\n", x)
	}
	for _, x := range p.Warnings {
		fmt.Fprintf(w, "warning: %s\n", x)
	}
}

// maxInput bounds the pod list and config files plan mode reads.
const maxInput = 64 << 20

// ReadPodList reads a v1 PodList as `kubectl get pods -o json` prints it.
func ReadPodList(file string) ([]*corev1.Pod, error) {
	b, err := readBounded(file)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: not a v1 PodList: %w", file, err)
	}
	if list.Kind != "" && list.Kind != "PodList" && list.Kind != "List" {
		return nil, fmt.Errorf("%s: kind %q, want PodList", file, list.Kind)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
		if pods[i].UID == "" {
			return nil, fmt.Errorf("%s: items[%d] (%s/%s): no metadata.uid", file, i, pods[i].Namespace, pods[i].Name)
		}
	}
	return pods, nil
}

// ReadConfig reads the content of the resource-qos-config key. It also
// accepts a whole ConfigMap (kubectl get cm -o json), taking both the
// resource-qos-config and memory-qos keys from it.
func ReadConfig(file string) (*memqos.Config, memqos.Namespaces, error) {
	b, err := readBounded(file)
	if err != nil {
		return nil, memqos.Namespaces{}, err
	}
	var cm corev1.ConfigMap
	if json.Unmarshal(b, &cm) == nil && cm.Kind == "ConfigMap" {
		return FromConfigMap(&cm)
	}
	c, err := memqos.ParseConfig(b)
	if err != nil {
		return nil, memqos.Namespaces{}, fmt.Errorf("%s: %w", file, &ConfigError{Key: memqos.ConfigKey, Err: err})
	}
	return c, memqos.Namespaces{}, nil
}

// FromConfigMap reads the koordinator keys of a ConfigMap; a missing key
// is an empty configuration. A key that does not parse or check is an
// error (a *ConfigError per key, BadKeys lists them) and no configuration:
// the agent then keeps what it has in force, or writes nothing.
func FromConfigMap(cm *corev1.ConfigMap) (*memqos.Config, memqos.Namespaces, error) {
	c := &memqos.Config{}
	var ns memqos.Namespaces
	var errs keyErrors
	if s, ok := cm.Data[memqos.ConfigKey]; ok && strings.TrimSpace(s) != "" {
		var err error
		if c, err = memqos.ParseConfig([]byte(s)); err != nil {
			errs = append(errs, &ConfigError{Key: memqos.ConfigKey, Err: err})
		}
	}
	if s, ok := cm.Data[memqos.NamespacesKey]; ok && strings.TrimSpace(s) != "" {
		var err error
		if ns, err = memqos.ParseNamespaces([]byte(s)); err != nil {
			errs = append(errs, &ConfigError{Key: memqos.NamespacesKey, Err: err})
		}
	}
	if len(errs) > 0 {
		return nil, memqos.Namespaces{}, fmt.Errorf("configmap %s/%s: %w", cm.Namespace, cm.Name, errs)
	}
	return c, ns, nil
}

// ConfigKeys are the keys of the QoS ConfigMap the agent reads.
var ConfigKeys = []string{memqos.ConfigKey, memqos.NamespacesKey}

// ConfigError is a key of the QoS ConfigMap that does not parse or check.
type ConfigError struct {
	Key string // memqos.ConfigKey or memqos.NamespacesKey
	Err error  // names the key and the field
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// keyErrors are the errors of several keys, on one line.
type keyErrors []error

func (k keyErrors) Error() string {
	parts := make([]string, len(k))
	for i, e := range k {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (k keyErrors) Unwrap() []error { return k }

// BadKeys lists the keys an error of FromConfigMap or ReadConfig names.
func BadKeys(err error) []string {
	var keys []string
	var walk func(error)
	walk = func(e error) {
		if c, ok := e.(*ConfigError); ok {
			keys = append(keys, c.Key)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	walk(err)
	return keys
}

func readBounded(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, maxInput)
	}
	return b, nil
}

func relSlash(base, p string) (string, error) {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return "", err
	}
	if rel == "." {
		return "/", nil
	}
	return "/" + filepath.ToSlash(rel), nil
}
