package agent

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gofit-dev/gofit/cgroup/manage"
)

// TestReset: after the agent's passes, Reset leaves the kernel defaults in
// every memory.min, memory.low, memory.high and v1 soft limit at every
// level; dry-run plans the same writes and makes none.
func TestReset(t *testing.T) {
	for _, tree := range []string{"v2-cgroupfs", "v2-systemd", "v1-cgroupfs", "hybrid-systemd"} {
		t.Run(tree, func(t *testing.T) {
			root := copyTree(t, filepath.Join("testdata", tree))
			l, err := Detect(root, "/")
			if err != nil {
				t.Fatal(err)
			}
			if rep := New(l, Options{}).Reconcile(fixtureState(t)); len(rep.Apply.Changed) == 0 || len(rep.Apply.Errors) > 0 {
				t.Fatalf("reconcile: %d changed, errors %v", len(rep.Apply.Changed), rep.Apply.Errors)
			}
			dry := New(l, Options{DryRun: true}).Reset()
			if len(dry.Apply.Changed) == 0 || len(dry.Apply.Errors) > 0 {
				t.Fatalf("dry run: %d changes, errors %v", len(dry.Apply.Changed), dry.Apply.Errors)
			}
			if nonDefault(t, l) == 0 {
				t.Fatal("dry run wrote the defaults")
			}
			rep := New(l, Options{}).Reset()
			if len(rep.Apply.Errors) > 0 || len(rep.Apply.Changed) != len(dry.Apply.Changed) {
				t.Fatalf("reset: %d changed (dry run planned %d), errors %v", len(rep.Apply.Changed), len(dry.Apply.Changed), rep.Apply.Errors)
			}
			if n := nonDefault(t, l); n != 0 {
				t.Errorf("%d files still away from the kernel default", n)
			}
			if again := New(l, Options{}).Reset(); len(again.Apply.Changed) != 0 {
				t.Errorf("second reset changed %d values", len(again.Apply.Changed))
			}
		})
	}
}

// nonDefault counts the memory files under kubepods that are not at the
// kernel default, logging each.
func nonDefault(t *testing.T, l *Layout) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(l.dir(l.Kubepods), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		want := int64(-2)
		switch d.Name() {
		case "memory.min", "memory.low":
			want = 0
		case "memory.high", "memory.soft_limit_in_bytes":
			want = manage.Unlimited
		}
		if want == -2 {
			return nil
		}
		v, err := manage.ReadValue(p)
		if err != nil {
			return err
		}
		if v >= 1<<62 || v == -1 { // v1 takes "unlimited" as -1
			v = manage.Unlimited
		}
		if v != want {
			t.Logf("%s = %d", p, v)
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUninstalling tells an uninstall (the DaemonSet gone, being deleted,
// recreated, or its RBAC gone) from a rolling update, a drain or a
// restart, where every value must stay.
func TestUninstalling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := metav1.Now()
	ds := func(uid string, deleting bool) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "gofit-node", Namespace: "gofit-node", UID: ktypes.UID("ds-" + uid)}}
		if deleting {
			d.DeletionTimestamp = &now
			d.Finalizers = []string{"foregroundDeletion"}
		}
		return d
	}
	fail := func(err error) k8stesting.ReactionFunc {
		return func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err }
	}
	gr := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		reactor k8stesting.ReactionFunc
		want    bool
	}{
		{"rolling update", []runtime.Object{ds("1", false)}, nil, false},
		{"deleted", nil, nil, true},
		{"being deleted", []runtime.Object{ds("1", true)}, nil, true},
		{"recreated", []runtime.Object{ds("2", false)}, nil, true},
		{"RBAC gone", []runtime.Object{ds("1", false)}, fail(apierrors.NewForbidden(gr, "gofit-node", nil)), true},
		{"token gone", []runtime.Object{ds("1", false)}, fail(apierrors.NewUnauthorized("no such service account")), true},
		{"API hiccup", []runtime.Object{ds("1", false)}, fail(apierrors.NewTooManyRequests("busy", 1)), false},
		{"API down", []runtime.Object{ds("1", false)}, fail(apierrors.NewInternalError(context.DeadlineExceeded)), false},
		{"namespace deleted", []runtime.Object{ds("1", false), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gofit-node",
			DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}}}}, nil, true},
	} {
		cs := fake.NewClientset(tc.objs...)
		if tc.reactor != nil {
			cs.PrependReactor("get", "daemonsets", tc.reactor)
		}
		got, why := Uninstalling(ctx, cs, "gofit-node", "gofit-node", "ds-1")
		if got != tc.want || !strings.Contains(why, "gofit-node") {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// TestResetLeavesTiered: Reset zeroed the pod-level memory.min and
// memory.low that the kubelet's TieredReservation owns when the agent had
// not been told of it. It now recognises TieredReservation in the tree as
// a pass does (a Guaranteed pod's memory.min with memory.low below it, a
// pair the agent never leaves) and leaves the kubelet's files alone; the
// agent's own pair is still reset.
func TestResetLeavesTiered(t *testing.T) {
	for _, tc := range []struct {
		name     string
		low      string // the Guaranteed pod's memory.low beside memory.min 512Mi
		kubelets bool
	}{{"kubelet's pair", "0", true}, {"agent's pair", "536870912", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := nodeFixture(t)
			write := func(rel, v string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(l.Mount, rel), []byte(v+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(guaranteeed+"/memory.min", "536870912")
			write(guaranteeed+"/memory.low", tc.low)
			write(staticDir+"/memory.low", "104857600")           // a Burstable pod's request
			write(sidecarDir+"/ddd000/memory.high", "2147483648") // the agent's BE throttle
			before := snapshot(t, l.Mount)
			rep := New(l, Options{}).Reset()
			if len(rep.Apply.Errors) > 0 {
				t.Fatal(rep.Apply.Errors)
			}
			after := snapshot(t, l.Mount)
			changed := func(rel string) bool {
				p := filepath.Join(l.Mount, rel)
				return before[p] != after[p]
			}
			for _, rel := range []string{guaranteeed + "/memory.min", staticDir + "/memory.low"} {
				if changed(rel) == tc.kubelets {
					t.Errorf("%s: %q then %q: want it changed only when it is the agent's", rel, before[filepath.Join(l.Mount, rel)], after[filepath.Join(l.Mount, rel)])
				}
			}
			if tc.kubelets && (len(rep.Deferred) == 0 || !strings.Contains(rep.Kubelet, "TieredReservation")) {
				t.Errorf("deferred %q, kubelet %q", rep.Deferred, rep.Kubelet)
			}
			if got := readVal(t, filepath.Join(l.Mount, sidecarDir, "ddd000", "memory.high")); got != "max" {
				t.Errorf("container memory.high %s: the agent's, reset either way", got)
			}
		})
	}
}
