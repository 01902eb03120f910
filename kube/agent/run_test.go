package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestConfigMapListHiccup: a transient error listing the QoS ConfigMap
// (429 from API priority and fairness here) used to end the agent's wait,
// and the first pass ran on the defaults, every class disabled: memory.min
// and memory.low of every pod went to 0. Now nothing is written until the
// ConfigMap is listed, and /healthz says why.
func TestConfigMapListHiccup(t *testing.T) {
	root := copyTree(t, "testdata/v2-cgroupfs")
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	// What the agent wrote before its restart, from the ConfigMap.
	pod := filepath.Join(l.Mount, "kubepods/burstable/pod1111aaaa-0000-4000-8000-000000000001")
	for file, v := range map[string]string{"memory.min": "52428800", "memory.low": "104857600"} {
		if err := os.WriteFile(filepath.Join(pod, file), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pods, err := ReadPodList("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	qos, err := os.ReadFile("testdata/resource-qos.json")
	if err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "slo-controller-config", Namespace: "koordinator-system", ResourceVersion: "1"},
			Data: map[string]string{"resource-qos-config": string(qos)}},
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	cs := fake.NewClientset(objs...)
	var failing atomic.Bool
	failing.Store(true)
	cs.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, apierrors.NewTooManyRequests("the API server is busy", 1)
		}
		return false, nil, nil
	})

	a := New(l, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, cs, Source{NodeName: "node-a", Interval: time.Second, SyncTimeout: time.Second})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	// Past the sync timeout and a few intervals: nothing written, and
	// the health check says what is missing.
	time.Sleep(3 * time.Second)
	if got := readVal(t, filepath.Join(pod, "memory.min")); got != "52428800" {
		t.Fatalf("memory.min %s while the ConfigMap could not be listed: protection dropped", got)
	}
	if _, err := a.Health(time.Now(), time.Minute); err == nil || !strings.Contains(err.Error(), "configmap koordinator-system/slo-controller-config") {
		t.Errorf("health while the ConfigMap is not listed: %v", err)
	}

	// Once it is listed, passes run with it.
	failing.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if text, err := a.Health(time.Now(), time.Minute); err == nil {
			t.Logf("health: %s", text)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pass after the ConfigMap was listed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := readVal(t, filepath.Join(pod, "memory.min")); got != "52428800" {
		t.Errorf("memory.min %s after the ConfigMap was listed, want 52428800", got)
	}
}

// TestPassSpacing: every pod event started a full pass with no gap
// between them; a burst of events is now folded into a few passes.
func TestPassSpacing(t *testing.T) {
	root := copyTree(t, "testdata/v2-cgroupfs")
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ReadPodList("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}}}}
	for _, p := range pods {
		objs = append(objs, p)
	}
	cs := fake.NewClientset(objs...)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a := New(l, Options{Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, cs, Source{NodeName: "node-a", NoConfigMap: true, Interval: time.Hour, MinGap: 500 * time.Millisecond, SyncTimeout: 5 * time.Second})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	passes := func() uint64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "gofit_node_reconcile_duration_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return 0
	}
	for deadline := time.Now().Add(10 * time.Second); passes() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no first pass")
		}
	}
	before := passes()
	// 100 pod updates over about a second.
	start := time.Now()
	for i := range 100 {
		p, err := cs.CoreV1().Pods("shop").Get(ctx, "ls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["rev"] = fmt.Sprint(i)
		if _, err := cs.CoreV1().Pods("shop").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond)
	n, took := passes()-before, time.Since(start)
	if limit := uint64(took/(500*time.Millisecond)) + 2; n > limit || n == 0 {
		t.Errorf("%d passes for 100 events in %v, want 1 to %d", n, took.Round(time.Millisecond), limit)
	}
}

// TestBadConfigAfterRestart: after a restart, a resource-qos-config or
// memory-qos that does not parse or check made the agent plan on an empty
// configuration: memory.min and memory.low 0 and memory.high max on every
// pod, with /healthz at 200. Now it is treated like a failed read: nothing
// under kubepods changes, /healthz is 503 naming the key and the error,
// and gofit_node_config_valid says which key. Once fixed, passes run; a
// later bad version keeps the last good configuration in force.
func TestBadConfigAfterRestart(t *testing.T) {
	good, err := os.ReadFile("testdata/resource-qos.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key string
		data      map[string]string
		want      string // in the error
	}{
		{"unparseable resource-qos-config", "resource-qos-config",
			map[string]string{"resource-qos-config": `{"clusterStrategy": {"lsClass": `}, "resource-qos-config: unexpected end of JSON input"},
		{"invalid resource-qos-config", "resource-qos-config",
			map[string]string{"resource-qos-config": `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":150}}}}`},
			"resource-qos-config: clusterStrategy.lsClass.memoryQOS.minLimitPercent: 150 is not a percentage"},
		{"unparseable memory-qos", "memory-qos",
			map[string]string{"resource-qos-config": string(good), "memory-qos": `{"disabledNamespaces": "kube-system"}`}, "memory-qos: json: cannot unmarshal"},
		{"invalid memory-qos", "memory-qos",
			map[string]string{"resource-qos-config": string(good), "memory-qos": `{"disabledNamespaces": ["kube system"]}`},
			`memory-qos: disabledNamespaces[0]: "kube system" is not a namespace name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := copyTree(t, "testdata/v2-cgroupfs")
			l, err := Detect(root, "/")
			if err != nil {
				t.Fatal(err)
			}
			// What the agent wrote before its restart, from a good ConfigMap.
			before := New(l, Options{})
			if rep := before.Reconcile(fixtureState(t)); rep.Skip != "" || len(rep.Apply.Changed) == 0 {
				t.Fatalf("the pass before the restart: skip %q, %d changed", rep.SkipReason, len(rep.Apply.Changed))
			}
			kubepods := filepath.Join(l.Mount, "kubepods")
			snap := snapshot(t, kubepods)
			pods, err := ReadPodList("testdata/pods.json")
			if err != nil {
				t.Fatal(err)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "slo-controller-config", Namespace: "koordinator-system", ResourceVersion: "1"},
				Data: tc.data}
			objs := []runtime.Object{cm, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"},
				Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}}}}
			for _, p := range pods {
				objs = append(objs, p)
			}
			cs := fake.NewClientset(objs...)
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			a := New(l, Options{Metrics: m})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- a.Run(ctx, cs, Source{NodeName: "node-a", Interval: time.Second, SyncTimeout: 5 * time.Second})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			}()
			metric := func(name string, labels ...string) float64 {
				mfs, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				for _, mf := range mfs {
					if mf.GetName() != name {
						continue
					}
				next:
					for _, mm := range mf.GetMetric() {
						for i, lp := range mm.GetLabel() {
							if i*2+1 >= len(labels) || lp.GetName() != labels[i*2] || lp.GetValue() != labels[i*2+1] {
								continue next
							}
						}
						if mm.GetGauge() != nil {
							return mm.GetGauge().GetValue()
						}
						return mm.GetCounter().GetValue()
					}
				}
				return -1
			}
			// A few intervals: nothing written, and every sign says why.
			for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if metric("gofit_node_skipped_reconciles_total", "reason", SkipBadConfig) >= 3 {
					break
				}
			}
			if n := metric("gofit_node_skipped_reconciles_total", "reason", SkipBadConfig); n < 3 {
				t.Errorf("%v passes counted as skipped for bad_config, want 3 or more", n)
			}
			after := snapshot(t, kubepods)
			for p, v := range snap {
				if after[p] != v {
					t.Errorf("%s changed from %q to %q under a bad ConfigMap", strings.TrimPrefix(p, l.Mount), v, after[p])
				}
			}
			_, herr := a.Health(time.Now(), time.Minute)
			if herr == nil || !strings.Contains(herr.Error(), "configmap koordinator-system/slo-controller-config: "+tc.want) {
				t.Errorf("health under a bad ConfigMap: %v, want an error with %q", herr, tc.want)
			}
			for _, k := range ConfigKeys {
				want := 1.0
				if k == tc.key {
					want = 0
				}
				if got := metric("gofit_node_config_valid", "key", k); got != want {
					t.Errorf("gofit_node_config_valid{key=%q} = %v, want %v", k, got, want)
				}
			}
			if tc.name != "unparseable resource-qos-config" {
				return
			}

			// Fixed: passes run with it.
			cm.Data, cm.ResourceVersion = map[string]string{"resource-qos-config": string(good)}, "2"
			if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if _, err := a.Health(time.Now(), time.Minute); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no pass after the ConfigMap was fixed")
				}
			}
			if got := metric("gofit_node_config_valid", "key", tc.key); got != 1 {
				t.Errorf("fixed: gofit_node_config_valid %v", got)
			}
			// Bad again: the good one stays in force, and /healthz says so.
			cm.Data, cm.ResourceVersion = tc.data, "3"
			if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); metric("gofit_node_config_valid", "key", tc.key) != 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second bad version not seen")
				}
			}
			time.Sleep(1500 * time.Millisecond)
			text, err := a.Health(time.Now(), time.Minute)
			if err != nil || !strings.Contains(text, tc.want) || !strings.Contains(text, "the last good configuration stays in force") {
				t.Errorf("health with a last good configuration: %q, %v", text, err)
			}
			after = snapshot(t, kubepods)
			for p, v := range snap {
				if after[p] != v {
					t.Errorf("%s changed from %q to %q with the last good configuration in force", strings.TrimPrefix(p, l.Mount), v, after[p])
				}
			}
		})
	}
}
