package agent

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gofit-dev/gofit/kube/kubetest"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// BenchmarkInformer1000 measures what the agent's pod informer holds on a
// node with 1,000 pods of a usual size (a few env vars, probes, volumes,
// the API server's managedFields), on envtest's kube-apiserver: the heap
// kept by the informer's store with whole pods and with memqos.Slim pods,
// and one plan over them, then again after 200 pods were replaced (churn).
// It is a benchmark (go test -run '^$' -bench Informer1000 ./kube/agent),
// not part of make test: creating the pods takes tens of seconds.
func BenchmarkInformer1000(b *testing.B) {
	cs, err := kubernetes.NewForConfig(kubetest.Start(b, nil))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	mk := func(i int) {
		env := []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "200MiB"}}
		for j := range 12 {
			env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", j), Value: fmt.Sprintf("value-of-setting-%d-for-pod-%d", j, i)})
		}
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%04d", i), Namespace: "default",
			Labels:      map[string]string{"app": fmt.Sprintf("svc-%d", i%50), "pod-template-hash": "5d8f7c9b6"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-26T12:00:00Z", "prometheus.io/scrape": "true"}},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.2.3",
				Env: env, LivenessProbe: probe, ReadinessProbe: probe,
				Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 1000 {
		mk(i)
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	measure := func(slim bool) (kept uint64, lister cache.Indexer, stop func()) {
		before := heap()
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "node-a").String()
		}))
		inf := f.Core().V1().Pods().Informer()
		if slim {
			if err := inf.SetTransform(slimPod); err != nil {
				b.Fatal(err)
			}
		}
		ch := make(chan struct{})
		f.Start(ch)
		if !cache.WaitForCacheSync(ch, inf.HasSynced) {
			b.Fatal("no sync")
		}
		return heap() - before, inf.GetIndexer(), func() { close(ch); f.Shutdown() }
	}
	whole, _, stopWhole := measure(false)
	stopWhole()
	slim, idx, stopSlim := measure(true)
	defer stopSlim()

	plan := func() time.Duration {
		var pods []*corev1.Pod
		for _, o := range idx.List() {
			pods = append(pods, o.(*corev1.Pod))
		}
		start := time.Now()
		if _, err := memqos.Compute(memqos.Input{Pods: pods, Policy: memqos.PolicyAuto, NodeAllocatable: 256 << 30}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	b.ResetTimer()
	var d time.Duration
	for range b.N {
		d += plan()
	}
	b.StopTimer()
	b.ReportMetric(float64(d.Microseconds())/1000/float64(b.N), "ms/plan-1000")
	b.ReportMetric(float64(whole)/(1<<20), "MiB-whole")
	b.ReportMetric(float64(slim)/(1<<20), "MiB-slim")

	// Churn: 200 pods replaced; the store settles at the same size.
	zero := int64(0)
	for i := range 200 {
		if err := cs.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("p%04d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			b.Fatal(err)
		}
		mk(1000 + i)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		objs, _ := idx.ByIndex(cache.NamespaceIndex, "default")
		if len(objs) == 1000 {
			if _, ok, _ := idx.GetByKey("default/p1199"); ok {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("store holds %d pods after churn", len(objs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.ReportMetric(float64(heap())/(1<<20), "MiB-heap-after-churn")
}
