package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestDaemonSet renders deploy/node (cgroupfs driver) and its systemd
// component and checks the agent's mounts: the cgroup tree read-only, only
// the pod subtree of the driver named in --cgroup-driver writable, the
// runtime's seccomp profile, no capabilities.
func TestDaemonSet(t *testing.T) {
	for _, tc := range []struct{ name, components, driver, subtree string }{
		{"cgroupfs", "", DriverCgroupfs, "kubepods"},
		{"systemd", "components: [../node/systemd]\n", DriverSystemd, "kubepods.slice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// An overlay beside a copy of deploy/node, as a user's would be.
			base := t.TempDir()
			if err := os.CopyFS(filepath.Join(base, "node"), os.DirFS("../../deploy/node")); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(base, "overlay")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			k := "resources: [../node]\n" + tc.components
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
			if err != nil {
				t.Fatalf("kustomize build: %v", err)
			}
			var ds appsv1.DaemonSet
			for _, r := range m.Resources() {
				if r.GetKind() != "DaemonSet" {
					continue
				}
				b, err := r.AsYAML()
				if err != nil {
					t.Fatal(err)
				}
				if err := yaml.Unmarshal(b, &ds); err != nil {
					t.Fatal(err)
				}
			}
			spec := ds.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("containers: %d", len(spec.Containers))
			}
			c := spec.Containers[0]
			sc := c.SecurityContext
			if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != "RuntimeDefault" || sc.Privileged != nil && *sc.Privileged ||
				sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
				t.Errorf("security context %+v", sc)
			}
			if !strings.Contains(strings.Join(c.Args, " "), "--cgroup-driver="+tc.driver) {
				t.Errorf("args %v: no --cgroup-driver=%s", c.Args, tc.driver)
			}
			hostPaths := map[string]string{}
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = v.HostPath.Path
				}
			}
			var writable []string
			for _, vm := range c.VolumeMounts {
				hp := hostPaths[vm.Name]
				switch {
				case hp == "/sys/fs/cgroup":
					if !vm.ReadOnly || vm.MountPath != "/host/sys/fs/cgroup" {
						t.Errorf("cgroup tree mounted %+v, want read-only at /host/sys/fs/cgroup", vm)
					}
				case !vm.ReadOnly:
					writable = append(writable, hp+" at "+vm.MountPath)
				}
			}
			want := "/sys/fs/cgroup/" + tc.subtree + " at /host/sys/fs/cgroup/" + tc.subtree
			if len(writable) != 1 || writable[0] != want {
				t.Errorf("writable mounts %v, want only %s", writable, want)
			}
		})
	}
}
