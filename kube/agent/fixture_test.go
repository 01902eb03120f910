package agent

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/kube/memqos"
)

const mi = int64(1 << 20)

// copyTree copies a fixture so a test can write to it.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func fixtureState(t testing.TB) State {
	t.Helper()
	pods, err := ReadPodList("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, ns, err := ReadConfig("testdata/resource-qos.json")
	if err != nil {
		t.Fatal(err)
	}
	return State{Pods: pods, Config: cfg, Namespaces: ns, NodeAllocatable: 4 << 30}
}

func readVal(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// TestFixtures reconciles each fixture tree (v1 and v2, both drivers,
// hybrid, containerd and CRI-O ids) and checks the files.
func TestFixtures(t *testing.T) {
	type paths struct{ burstable, besteffort, ls, lsC, be, beC, g, gC, done, doneC, orphan, orphanC string }
	sd := func(q, uid string) string {
		uid = strings.ReplaceAll(uid, "-", "_")
		if q == "" {
			return "kubepods-pod" + uid + ".slice"
		}
		return "kubepods-" + q + "-pod" + uid + ".slice"
	}
	const (
		uLS, uBE, uG   = "1111aaaa-0000-4000-8000-000000000001", "2222bbbb-0000-4000-8000-000000000002", "3333cccc-0000-4000-8000-000000000003"
		uDone, uOrphan = "4444dddd-0000-4000-8000-000000000004", "5555eeee-0000-4000-8000-000000000005"
	)
	systemd := paths{
		burstable: "kubepods.slice/kubepods-burstable.slice", besteffort: "kubepods.slice/kubepods-besteffort.slice",
		ls: "kubepods.slice/kubepods-burstable.slice/" + sd("burstable", uLS), lsC: "cri-containerd-aaa111.scope",
		be: "kubepods.slice/kubepods-besteffort.slice/" + sd("besteffort", uBE), beC: "crio-bbb222.scope",
		g: "kubepods.slice/" + sd("", uG), gC: "cri-containerd-ccc333.scope",
		done: "kubepods.slice/kubepods-burstable.slice/" + sd("burstable", uDone), doneC: "cri-containerd-ddd444.scope",
		orphan: "kubepods.slice/kubepods-burstable.slice/" + sd("burstable", uOrphan), orphanC: "cri-containerd-eee555.scope",
	}
	cgroupfs := paths{
		burstable: "kubepods/burstable", besteffort: "kubepods/besteffort",
		ls: "kubepods/burstable/pod" + uLS, lsC: "aaa111", be: "kubepods/besteffort/pod" + uBE, beC: "crio-bbb222",
		g: "kubepods/pod" + uG, gC: "ccc333", done: "kubepods/burstable/pod" + uDone, doneC: "ddd444",
		orphan: "kubepods/burstable/pod" + uOrphan, orphanC: "eee555",
	}
	for _, tc := range []struct {
		name    string
		version int
		driver  string
		p       paths
	}{
		{"v2-systemd", 2, DriverSystemd, systemd},
		{"v2-cgroupfs", 2, DriverCgroupfs, cgroupfs},
		{"v1-systemd", 1, DriverSystemd, systemd},
		{"v1-cgroupfs", 1, DriverCgroupfs, cgroupfs},
		{"hybrid-systemd", 1, DriverSystemd, systemd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t, filepath.Join("testdata", tc.name))
			l, err := Detect(root, "/")
			if err != nil {
				t.Fatal(err)
			}
			if l.Version != tc.version || l.Driver != tc.driver {
				t.Fatalf("detected v%d %s", l.Version, l.Driver)
			}
			a := New(l, Options{})
			st := fixtureState(t)
			st.Now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			rep := a.Reconcile(st)
			if len(rep.Apply.Errors) != 0 {
				t.Fatalf("errors: %v", rep.Apply.Errors)
			}
			f := func(p ...string) string { return filepath.Join(append([]string{l.Mount}, p...)...) }
			p := tc.p
			// Pods the API does not list are left as they are until they
			// have been absent for DefaultResetAfter: a lagging watch must
			// not strip them.
			for _, c := range rep.Apply.Changed {
				if strings.Contains(c.Dir, "4444dddd") || strings.Contains(c.Dir, "5555eeee") {
					t.Errorf("first pass reset %s/%s of a pod just missing from the API", c.Dir, c.File)
				}
			}
			st.Now = st.Now.Add(DefaultResetAfter - time.Second)
			if rep := a.Reconcile(st); len(rep.Apply.Changed) != 0 {
				t.Errorf("reset before DefaultResetAfter: %+v", rep.Apply.Changed[0])
			}
			st.Now = st.Now.Add(time.Second)
			if rep := a.Reconcile(st); len(rep.Apply.Errors) != 0 || len(rep.Apply.Changed) == 0 {
				t.Fatalf("after DefaultResetAfter: errors %v, %d changed", rep.Apply.Errors, len(rep.Apply.Changed))
			}
			lsHigh := "200540160" // GOMEMLIMIT 180MiB + 11.25MiB budget, above request + 60% of the way to the limit (160MiB)
			if tc.version == 2 {
				for file, want := range map[string]string{
					f(p.ls, "memory.min"):                "52428800",
					f(p.ls, "memory.low"):                "104857600",
					f(p.ls, p.lsC, "memory.min"):         "52428800",
					f(p.ls, p.lsC, "memory.low"):         "104857600",
					f(p.ls, p.lsC, "memory.high"):        lsHigh,
					f(p.be, p.beC, "memory.high"):        "1717985280", // 40% of 4Gi allocatable, page aligned
					f(p.g, p.gC, "memory.high"):          "max",        // LSR disabled: kernel default
					f(p.burstable, "memory.min"):         "52428800",
					f(p.burstable, "memory.low"):         "104857600",
					f(p.besteffort, "memory.low"):        "0",
					f("kubepods*", "memory.low"):         "104857600",
					f(p.done, "memory.min"):              "0", // finished: restored
					f(p.orphan, "memory.min"):            "0", // unknown to the API: restored
					f(p.orphan, p.orphanC, "memory.low"): "0",
				} {
					matches, _ := filepath.Glob(file)
					if len(matches) != 1 {
						t.Fatalf("%s: %d matches", file, len(matches))
					}
					if got := readVal(t, matches[0]); got != want {
						t.Errorf("%s = %s, want %s", file, got, want)
					}
				}
			} else {
				for file, want := range map[string]string{
					f(p.ls, p.lsC, "memory.soft_limit_in_bytes"):         "104857600",
					f(p.be, p.beC, "memory.soft_limit_in_bytes"):         "0",
					f(p.g, p.gC, "memory.soft_limit_in_bytes"):           "9223372036854771712", // untouched: already unlimited
					f(p.done, p.doneC, "memory.soft_limit_in_bytes"):     "-1",
					f(p.orphan, p.orphanC, "memory.soft_limit_in_bytes"): "-1",
				} {
					if got := readVal(t, file); got != want {
						t.Errorf("%s = %s, want %s", file, got, want)
					}
				}
				if _, err := os.Stat(f(p.ls, p.lsC, "memory.min")); err == nil {
					t.Error("memory.min created on v1")
				}
			}
			var missing []string
			for _, w := range rep.Warnings {
				if strings.HasSuffix(w, "not on this kernel; skipped") {
					missing = append(missing, strings.Fields(w)[0])
				}
			}
			wantMissing := "memory.wmark_ratio:"
			if tc.version == 1 {
				wantMissing = "memory.high: memory.low: memory.min: memory.wmark_ratio:"
			}
			if got := strings.Join(missing, " "); got != wantMissing {
				t.Errorf("missing %q, want %q", got, wantMissing)
			}
			// Nothing left to do on the next pass.
			if rep := a.Reconcile(st); len(rep.Apply.Changed) != 0 {
				t.Errorf("second pass changed %d values: %+v", len(rep.Apply.Changed), rep.Apply.Changed[0])
			}
		})
	}
}

// TestStaleView: a pod the kubelet still runs (processes in its cgroup)
// but the API's view lacks, as behind a lagging watch, used to be reset to
// kernel defaults on the next pass. It keeps its values, however long the
// view lags, and the lag is reported.
func TestStaleView(t *testing.T) {
	root := copyTree(t, "testdata/v2-cgroupfs")
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(l.Mount, "kubepods/burstable/pod5555eeee-0000-4000-8000-000000000005")
	if err := os.WriteFile(filepath.Join(orphan, "cgroup.events"), []byte("populated 1\nfrozen 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := New(l, Options{})
	st := fixtureState(t)
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, after := range []time.Duration{0, DefaultResetAfter, time.Hour} {
		st.Now = t0.Add(after)
		rep := a.Reconcile(st)
		for _, c := range rep.Apply.Changed {
			if strings.HasPrefix(c.Dir, orphan) {
				t.Errorf("after %v: %s/%s of a running pod reset", after, c.Dir, c.File)
			}
		}
		if rep.Unknown != 1 || rep.ViewLag != after {
			t.Errorf("after %v: unknown %d, lag %v", after, rep.Unknown, rep.ViewLag)
		}
	}
	if got := readVal(t, filepath.Join(orphan, "memory.min")); got == "0" {
		t.Error("running pod's memory.min reset")
	}
	if text, err := a.Health(time.Now(), time.Hour); err != nil || !strings.Contains(text, "runs 1 pod(s) missing from the API") {
		t.Errorf("health %q, %v: lag not said", text, err)
	}
}

// TestPlanDryRun checks plan output on a fixture and that it writes nothing.
func TestPlanDryRun(t *testing.T) {
	root := copyTree(t, "testdata/v2-systemd")
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	a := New(l, Options{DryRun: true, Policy: memqos.PolicyAuto})
	plan := a.PlanOf(a.Reconcile(fixtureState(t)))
	if plan.CgroupVersion != 2 || plan.Driver != "systemd" {
		t.Fatalf("%+v", plan)
	}
	found := false
	for _, w := range plan.Writes {
		if w.Cgroup == "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1111aaaa_0000_4000_8000_000000000001.slice/cri-containerd-aaa111.scope" &&
			w.File == "memory.low" && w.Value == "104857600" && strings.Contains(w.Reason, "auto") {
			found = true
		}
	}
	if !found {
		t.Errorf("no memory.low write for the LS container: %+v", plan.Writes)
	}
	matches, _ := filepath.Glob(filepath.Join(l.Mount, "kubepods.slice/kubepods-burstable.slice/*1111*/*/memory.low"))
	if len(matches) != 1 || readVal(t, matches[0]) != "0" {
		t.Errorf("dry run wrote: %v", matches)
	}
}

func TestDetectErrors(t *testing.T) {
	if _, err := Detect(t.TempDir(), "/"); err == nil || !strings.Contains(err.Error(), "sys/fs/cgroup") {
		t.Errorf("empty root: %v", err)
	}
	root := copyTree(t, "testdata/v2-cgroupfs")
	if _, err := Detect(root, "/elsewhere"); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Errorf("wrong cgroup root: %v", err)
	}
	if _, err := Detect(root, "../x"); err == nil {
		t.Error("relative cgroup root accepted")
	}
}

func TestContainerPathRejectsBadIDs(t *testing.T) {
	root := copyTree(t, "testdata/v2-cgroupfs")
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "containerd://", "containerd://../x", "nope", "containerd://a/b"} {
		if p, ok := l.ContainerPath("/kubepods", id); ok {
			t.Errorf("%q: found %s", id, p)
		}
	}
}
