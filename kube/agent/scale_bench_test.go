package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"golang.org/x/sys/unix"

	"github.com/gofit-dev/gofit/kube/kubetest"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// BenchmarkNode1000Churn runs the real agent (`gofit node`, built from
// cmd/gofit, with the shipped DaemonSet's GOMEMLIMIT and arguments, but
// --policy=auto so that every pod gets values written) against envtest's
// kube-apiserver holding 1,000 pods of a usual size on its node, each with
// its pod and container cgroup in a cgroup v2 fixture tree, as the kubelet
// would make them. Once the agent has listed them and passed over them, pods
// churn for GOFIT_SCALE_CHURN (2m, say; unset, the benchmark is skipped):
// every 200 ms one pod is replaced (deleted with its cgroup; created, given
// a running status and a cgroup) and two pods get an annotation changed,
// i.e. 5 creations, 5 deletions and 10 updates a second besides the 5
// status writes.
//
// It samples the agent's VmRSS every 100 ms and reads its VmHWM at the end,
// takes the heap from the runtime's gctrace, and fails when the peak RSS
// reaches the DaemonSet's memory limit or when the last pods created do not
// get their values. Run it alone, once:
//
//	KUBEBUILDER_ASSETS=... GOFIT_SCALE_CHURN=2m go test -run '^$' -bench Node1000Churn -benchtime 1x -timeout 30m ./kube/agent
func BenchmarkNode1000Churn(b *testing.B) {
	s := os.Getenv("GOFIT_SCALE_CHURN")
	if s == "" {
		b.Skip("set GOFIT_SCALE_CHURN (2m, say) to run it: it takes minutes, past make bench's timeout")
	}
	churnFor, err := time.ParseDuration(s)
	if err != nil {
		b.Fatalf("GOFIT_SCALE_CHURN %q: %v", s, err)
	}
	limit, gomemlimit, args := shippedAgent(b)
	if s := os.Getenv("GOFIT_SCALE_LIMIT"); s != "" {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			b.Fatalf("GOFIT_SCALE_LIMIT %q: %v", s, err)
		}
		limit = q.Value()
	}

	dir := b.TempDir()
	exe := filepath.Join(dir, "gofit")
	// As make image builds it.
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", exe, ".")
	build.Dir = "../../cmd/gofit"
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build cmd/gofit: %v\n%s", err, out)
	}
	// Out of the page cache: the agent's first touch of each page of its
	// executable then charges it to the agent's cgroup, as a container's
	// first start from its image does, not to the build's.
	// GOFIT_SCALE_WARM=1 leaves it there, charged to the build: the
	// agent's own charge is then what it allocates.
	if os.Getenv("GOFIT_SCALE_WARM") != "1" {
		if err := dropCache(exe); err != nil {
			b.Fatal(err)
		}
	}

	env := &envtest.Environment{}
	cfg := kubetest.Start(b, env)
	cfg.QPS, cfg.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const node = "node-a"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if n, err = cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("1000")}
	n.Status.Capacity = n.Status.Allocatable
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}

	k := &kubeletSim{cs: cs, node: node, mount: filepath.Join(dir, "root/sys/fs/cgroup"), log: b}
	k.init()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				k.start(ctx, i)
			}
		}()
	}
	for i := range 1000 {
		next <- i
	}
	close(next)
	wg.Wait()
	if k.failed.Load() {
		b.FailNow()
	}
	b.Logf("1,000 pods created, running and given cgroups in %v", time.Since(start).Round(time.Second))

	port := freePort(b)
	argv := append([]string{exe}, append(args, "--root="+filepath.Join(dir, "root"), "--node-name="+node, "--kubeconfig="+kubeconfig,
		"--policy=auto", "--metrics-addr=127.0.0.1:"+port)...)
	// Under the DaemonSet's limit, as the kubelet would run it: in a memory
	// cgroup of its own below this process's, which the shell joins before
	// it becomes the agent.
	mcg := newMemoryCgroup(b, limit)
	cmd := exec.Command(argv[0], argv[1:]...)
	if mcg != nil {
		cmd = exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, mcg.procs}, argv...)...)
	}
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+gomemlimit, "GODEBUG=gctrace=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var heap heapTrace
	exited := make(chan struct{})
	go func() { heap.read(stderr); cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}
	defer stop()
	var rss rssSampler
	go rss.run(cmd.Process.Pid)
	defer rss.stop()

	metrics := "http://127.0.0.1:" + port
	if err := waitHealthy(metrics, 5*time.Minute, exited); err != nil {
		b.Fatalf("agent never healthy: %v\n%s", err, heap.tail())
	}
	passes0, secs0 := passCount(b, metrics)
	b.Logf("agent healthy after its first pass over 1,000 pods, %v after start; RSS %.1f MiB", time.Since(start).Round(time.Second), rss.peakMiB())

	// Churn.
	b.ResetTimer()
	r := rand.New(rand.NewPCG(27, 1000))
	oldest, nextPod := 0, 1000
	var ops int
	for range b.N {
		end := time.Now().Add(churnFor)
		tick := time.NewTicker(200 * time.Millisecond)
		for time.Now().Before(end) {
			<-tick.C
			k.stop(ctx, oldest)
			oldest++
			k.start(ctx, nextPod)
			nextPod++
			for range 2 {
				k.touch(ctx, oldest+r.IntN(nextPod-oldest))
			}
			ops++
			if k.failed.Load() {
				b.FailNow()
			}
		}
		tick.Stop()
	}
	b.StopTimer()

	// The newest pods get their values: the agent kept up.
	last := nextPod - 1
	want := k.wantLow(last)
	var got string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		got = strings.TrimSpace(fileText(filepath.Join(k.containerDir(last), memqos.FileLow)))
		if got == want {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got != want {
		b.Errorf("pod %d, created last: container memory.low %q, want %s", last, got, want)
	}
	passes1, secs1 := passCount(b, metrics)
	passes := passes1 - passes0
	hwm := rss.hwm(cmd.Process.Pid)
	stop()
	rss.stop()
	peak := max(hwm, rss.peak.Load())
	b.ReportMetric(float64(peak)/(1<<20), "MiB-peak-rss")
	b.ReportMetric(float64(rss.anon.Load())/(1<<20), "MiB-peak-rss-anon")
	b.ReportMetric(float64(rss.file.Load())/(1<<20), "MiB-peak-rss-file")
	b.ReportMetric(float64(limit)/(1<<20), "MiB-limit")
	b.ReportMetric(heap.peakMiB(), "MiB-peak-heap")
	b.ReportMetric(heap.liveMiB(), "MiB-peak-live-heap")
	b.ReportMetric(float64(passes), "passes")
	if passes > 0 {
		b.ReportMetric((secs1-secs0)/float64(passes)*1000, "ms/pass")
	}
	b.Logf("churn: %d rounds over %v (%d pods replaced, %d updates); %d passes; peak RSS %.1f MiB of the %.0f MiB limit (anonymous %.1f, file %.1f); heap peak %.0f MiB, live %.0f MiB (gctrace, GOMEMLIMIT=%s)",
		ops, churnFor, ops, 2*ops, passes, float64(peak)/(1<<20), float64(limit)/(1<<20), float64(rss.anon.Load())/(1<<20), float64(rss.file.Load())/(1<<20),
		heap.peakMiB(), heap.liveMiB(), gomemlimit)
	if mcg == nil {
		if peak >= limit {
			b.Errorf("peak RSS %d bytes reaches the DaemonSet's memory limit %d", peak, limit)
		}
		return
	}
	st := mcg.stats()
	b.ReportMetric(float64(st.peak)/(1<<20), "MiB-cgroup-peak")
	b.ReportMetric(float64(st.oomKills), "oom-kills")
	b.ReportMetric(float64(st.failcnt), "limit-hits")
	b.Logf("in a memory cgroup limited to %.0f MiB: peak usage %.1f MiB (page cache included), the limit hit %d times, %d OOM kills",
		float64(limit)/(1<<20), float64(st.peak)/(1<<20), st.failcnt, st.oomKills)
	if st.oomKills > 0 {
		b.Errorf("the agent was OOM-killed %d times under the DaemonSet's limit", st.oomKills)
	}
	// What the kernel cannot drop must fit: the anonymous part (no swap).
	if a := rss.anon.Load(); a >= limit {
		b.Errorf("anonymous RSS %d bytes reaches the DaemonSet's memory limit %d", a, limit)
	}
}

// memoryCgroup is a memory cgroup made below this process's own, limited
// to the DaemonSet's memory limit (cgroup v1 or v2); removed when the
// benchmark ends.
type memoryCgroup struct {
	dir, procs string
	v2         bool
}

type cgroupStats struct{ peak, failcnt, oomKills int64 }

// newMemoryCgroup makes it, or says why not and returns nil (the agent
// then runs unconfined and only its RSS is compared with the limit).
func newMemoryCgroup(b testing.TB, limit int64) *memoryCgroup {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		b.Logf("no memory cgroup: %v", err)
		return nil
	}
	var m memoryCgroup
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+f[1]+",", ",memory,"):
			m.dir = filepath.Join("/sys/fs/cgroup/memory", f[2])
		case f[0] == "0" && f[1] == "" && m.dir == "":
			m.dir, m.v2 = filepath.Join("/sys/fs/cgroup", f[2]), true
		}
	}
	if m.dir == "" {
		b.Log("no memory cgroup in /proc/self/cgroup")
		return nil
	}
	m.dir = filepath.Join(m.dir, fmt.Sprintf("gofit-scale-%d", os.Getpid()))
	limitFile := "memory.limit_in_bytes"
	if m.v2 {
		limitFile = "memory.max"
	}
	if err := os.Mkdir(m.dir, 0o755); err != nil {
		b.Logf("no memory cgroup of its own (%v): the agent runs unconfined", err)
		return nil
	}
	b.Cleanup(func() {
		if err := os.Remove(m.dir); err != nil {
			b.Errorf("remove %s: %v", m.dir, err)
		}
	})
	if err := os.WriteFile(filepath.Join(m.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		b.Fatalf("%s: %v", filepath.Join(m.dir, limitFile), err)
	}
	m.procs = filepath.Join(m.dir, "cgroup.procs")
	return &m
}

// stats reads the peak usage, how often the limit was hit, and OOM kills.
func (m *memoryCgroup) stats() cgroupStats {
	num := func(file string) int64 {
		v, _ := strconv.ParseInt(strings.TrimSpace(fileText(filepath.Join(m.dir, file))), 10, 64)
		return v
	}
	field := func(file, key string) int64 {
		for _, line := range strings.Split(fileText(filepath.Join(m.dir, file)), "\n") {
			if v, ok := strings.CutPrefix(line, key+" "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}
	if m.v2 {
		return cgroupStats{peak: num("memory.peak"), failcnt: field("memory.events", "max"), oomKills: field("memory.events", "oom_kill")}
	}
	return cgroupStats{peak: num("memory.max_usage_in_bytes"), failcnt: num("memory.failcnt"), oomKills: field("memory.oom_control", "oom_kill")}
}

// dropCache writes a file back and drops it from the page cache.
func dropCache(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise %s: %w", file, err)
	}
	return nil
}

// shippedAgent reads deploy/node/daemonset.yaml: the agent container's
// memory limit, its GOMEMLIMIT and the arguments that do not name host
// paths or the node.
func shippedAgent(b testing.TB) (limit int64, gomemlimit string, args []string) {
	raw, err := os.ReadFile("../../deploy/node/daemonset.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		b.Fatalf("deploy/node/daemonset.yaml: %v", err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	q, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		b.Fatal("deploy/node/daemonset.yaml: no memory limit")
	}
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			gomemlimit = e.Value
		}
	}
	for _, a := range c.Args {
		// Host paths, and the uninstall check (which needs the pod's
		// namespace), are the DaemonSet's own.
		if strings.HasPrefix(a, "--root") || strings.HasPrefix(a, "--kubelet-config") || strings.HasPrefix(a, "--cgroup-driver") || strings.HasPrefix(a, "--daemonset") {
			continue
		}
		args = append(args, a)
	}
	return q.Value(), gomemlimit, args
}

// kubeletSim plays the kubelet's part for the pods of one node: it creates
// them in the API with a running status, and their cgroups in a v2
// cgroupfs tree, and removes both.
type kubeletSim struct {
	cs     kubernetes.Interface
	node   string
	mount  string
	log    testing.TB
	failed atomic.Bool
	mu     sync.Mutex
	uids   map[int]types.UID
}

func (k *kubeletSim) fail(format string, args ...any) {
	k.log.Errorf(format, args...)
	k.failed.Store(true)
}

func (k *kubeletSim) init() {
	k.uids = map[int]types.UID{}
	must := func(p, v string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			k.log.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			k.log.Fatal(err)
		}
	}
	must(filepath.Join(k.mount, "cgroup.controllers"), "cpu memory pids\n")
	for _, d := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
		must(filepath.Join(k.mount, d, "memory.min"), "0\n")
		must(filepath.Join(k.mount, d, "memory.low"), "0\n")
	}
}

// qos is pod i's Kubernetes QoS class: a third of each.
func qosOf(i int) corev1.PodQOSClass {
	return []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort}[i%3]
}

// wantLow is auto's memory.low for pod i's container: its request for
// Guaranteed (LSR) and Burstable (LS) pods, 0 for BestEffort.
func (k *kubeletSim) wantLow(i int) string {
	switch qosOf(i) {
	case corev1.PodQOSGuaranteed:
		return strconv.Itoa(256 << 20)
	case corev1.PodQOSBurstable:
		return strconv.Itoa(128 << 20)
	}
	return "0"
}

func (k *kubeletSim) podDir(i int) string {
	k.mu.Lock()
	uid := k.uids[i]
	k.mu.Unlock()
	l := Layout{Version: 2, Driver: DriverCgroupfs, Mount: k.mount, Kubepods: "/kubepods"}
	return l.dir(l.PodPath(qosOf(i), uid))
}

func (k *kubeletSim) containerDir(i int) string {
	return filepath.Join(k.podDir(i), fmt.Sprintf("c%06d", i))
}

// start creates pod i, running, and its cgroups.
func (k *kubeletSim) start(ctx context.Context, i int) {
	env := []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "200MiB"}}
	for j := range 12 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", j), Value: fmt.Sprintf("value-of-setting-%d-for-pod-%d", j, i)})
	}
	var rr corev1.ResourceRequirements
	switch qosOf(i) {
	case corev1.PodQOSGuaranteed:
		q := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("100m")}
		rr.Requests, rr.Limits = q, q
	case corev1.PodQOSBurstable:
		rr.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
		rr.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%06d", i), Namespace: "default",
		Labels:      map[string]string{"app": fmt.Sprintf("svc-%d", i%50), "pod-template-hash": "5d8f7c9b6"},
		Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-26T12:00:00Z", "prometheus.io/scrape": "true"}},
		Spec: corev1.PodSpec{NodeName: k.node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.2.3",
			Env: env, LivenessProbe: probe, ReadinessProbe: probe, Resources: rr,
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}}}}
	p, err := k.cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		k.fail("create pod %d: %v", i, err)
		return
	}
	k.mu.Lock()
	k.uids[i] = p.UID
	k.mu.Unlock()
	// The cgroups first, as the kubelet makes them before it reports the
	// container running.
	for _, d := range []string{k.podDir(i), k.containerDir(i)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			k.fail("%v", err)
			return
		}
		files := map[string]string{"memory.min": "0\n", "memory.low": "0\n", "cgroup.events": "populated 1\nfrozen 0\n"}
		if d == k.containerDir(i) {
			files["memory.high"] = "max\n"
		}
		for f, v := range files {
			if err := os.WriteFile(filepath.Join(d, f), []byte(v), 0o644); err != nil {
				k.fail("%v", err)
				return
			}
		}
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: qosOf(i), HostIP: "10.0.0.1", PodIP: fmt.Sprintf("10.1.%d.%d", i/250%250, i%250+1),
		StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "registry.example/app:1.2.3",
			ImageID:     "registry.example/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			ContainerID: fmt.Sprintf("containerd://c%06d", i), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	if _, err := k.cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		k.fail("status of pod %d: %v", i, err)
	}
}

// stop deletes pod i and its cgroups, as the kubelet does once its
// containers are gone.
func (k *kubeletSim) stop(ctx context.Context, i int) {
	zero := int64(0)
	if err := k.cs.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("p%06d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		k.fail("delete pod %d: %v", i, err)
		return
	}
	if err := os.RemoveAll(k.podDir(i)); err != nil {
		k.fail("%v", err)
	}
	k.mu.Lock()
	delete(k.uids, i)
	k.mu.Unlock()
}

// touch changes an annotation of pod i: an update event, as a controller's
// or a rollout's would be.
func (k *kubeletSim) touch(ctx context.Context, i int) {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/touched":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := k.cs.CoreV1().Pods("default").Patch(ctx, fmt.Sprintf("p%06d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		k.fail("update pod %d: %v", i, err)
	}
}

func freePort(b testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func waitHealthy(base string, within time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("the agent exited (%v)", last)
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// passCount reads how many passes the agent has made, and the seconds
// they took, from its metrics.
func passCount(b testing.TB, base string) (int, float64) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	n, secs := -1, 0.0
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "gofit_node_reconcile_duration_seconds_count "); ok {
			if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				b.Fatal(err)
			}
		}
		if v, ok := strings.CutPrefix(sc.Text(), "gofit_node_reconcile_duration_seconds_sum "); ok {
			if secs, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				b.Fatal(err)
			}
		}
	}
	if n < 0 {
		b.Fatal("no gofit_node_reconcile_duration_seconds_count in /metrics")
	}
	return n, secs
}

func fileText(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// rssSampler keeps the highest VmRSS seen, and the highest of its parts:
// anonymous memory (the heap, stacks, the runtime's own) and file pages
// (the executable's text and data, which the kernel can drop and read
// again).
type rssSampler struct {
	peak, anon, file atomic.Int64
	done             atomic.Bool
}

func (s *rssSampler) run(pid int) {
	for !s.done.Load() {
		for key, p := range map[string]*atomic.Int64{"VmRSS:": &s.peak, "RssAnon:": &s.anon, "RssFile:": &s.file} {
			if v, ok := procStatus(pid, key); ok && v > p.Load() {
				p.Store(v)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *rssSampler) stop() { s.done.Store(true) }

func (s *rssSampler) peakMiB() float64 { return float64(s.peak.Load()) / (1 << 20) }

// hwm is the kernel's high-water mark of the process's RSS.
func (s *rssSampler) hwm(pid int) int64 {
	v, _ := procStatus(pid, "VmHWM:")
	return v
}

// procStatus reads a "kB" line of /proc/PID/status, in bytes.
func procStatus(pid int, key string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n << 10, err == nil
			}
		}
	}
	return 0, false
}

// heapTrace reads the runtime's gctrace lines ("... 10->11->5 MB, 12 MB
// goal ...": the heap at the start and end of a cycle, and what stayed
// live) from the agent's stderr, and keeps the last lines of its log.
type heapTrace struct {
	mu         sync.Mutex
	peak, live int
	last       []string
}

var gcLine = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

func (h *heapTrace) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		h.mu.Lock()
		if m := gcLine.FindStringSubmatch(line); m != nil && strings.HasPrefix(line, "gc ") {
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			c, _ := strconv.Atoi(m[3])
			h.peak, h.live = max(h.peak, a, b), max(h.live, c)
		} else if h.last = append(h.last, line); len(h.last) > 20 {
			h.last = h.last[1:]
		}
		h.mu.Unlock()
	}
}

func (h *heapTrace) peakMiB() float64 { h.mu.Lock(); defer h.mu.Unlock(); return float64(h.peak) }
func (h *heapTrace) liveMiB() float64 { h.mu.Lock(); defer h.mu.Unlock(); return float64(h.live) }
func (h *heapTrace) tail() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.last, "\n")
}
