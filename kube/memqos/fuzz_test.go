package memqos

import (
	"encoding/binary"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/kube/podplan"
)

// fuzzBytes hands out the fuzzer's bytes as small choices and numbers;
// past the end everything is zero.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	v := f.b[0]
	f.b = f.b[1:]
	return v
}

func (f *fuzzBytes) pick(n int) int { return int(f.byte()) % n }

func (f *fuzzBytes) int64() int64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = f.byte()
	}
	return int64(binary.LittleEndian.Uint64(buf[:]))
}

// bytesChoice is a memory amount: the sizes that broke the arithmetic
// before (1Ei, 2^62, the int64 edge), ordinary ones, or any int64.
func (f *fuzzBytes) bytesChoice() int64 {
	table := []int64{0, 1, 4095, 100 << 20, 1 << 30, 16 << 30, 1 << 60, 1 << 62, 1<<63 - 1, -1}
	if i := f.pick(len(table) + 1); i < len(table) {
		return table[i]
	}
	return f.int64()
}

func (f *fuzzBytes) pct() *int64 {
	if f.pick(3) == 0 {
		return nil
	}
	v := int64(f.pick(101))
	return &v
}

// FuzzCompute plans random pods (hostile sizes, env, annotations, labels,
// sidecars, static pods) on random nodes and checks the rule every plan
// keeps (checkRule).
func FuzzCompute(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{7, 255, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzInput(data)
		res, err := Compute(in)
		if err != nil {
			t.Fatalf("valid input refused: %v", err)
		}
		if err := checkRule(in, res); err != nil {
			t.Fatal(err)
		}
		if err := sameButReasons(in, res); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzInput builds a node and its pods from the fuzzer's bytes.
func fuzzInput(data []byte) Input {
	fb := &fuzzBytes{b: data}
	in := Input{
		NodeAllocatable:   []int64{1 << 20, 16 << 30, 1 << 60, 4096}[fb.pick(4)],
		MaxProtectedRatio: []float64{0, 0.1, 0.8, 1}[fb.pick(4)],
		CgroupVersion:     1 + fb.pick(2),
		Policy:            []Policy{"", PolicyDefault, PolicyAuto}[fb.pick(3)],
		KernelRelease:     []string{"", "5.4.0-150-generic", "6.1.0-13-amd64"}[fb.pick(3)],
	}
	if fb.pick(2) == 1 {
		in.NodeAllocatable = max(1, fb.int64()&(1<<60-1))
	}
	enable := true
	class := func() *ResourceQOS {
		return &ResourceQOS{MemoryQOS: &MemoryQOSCfg{Enable: &enable, MemoryQOS: MemoryQOS{
			MinLimitPercent: fb.pct(), LowLimitPercent: fb.pct(), ThrottlingPercent: fb.pct()}}}
	}
	in.Strategy = Strategy{LSRClass: class(), LSClass: class(), BEClass: class()}
	always := corev1.ContainerRestartPolicyAlways
	for i := range 1 + fb.pick(6) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i), Namespace: "ns", UID: types.UID(fmt.Sprint("uid-", i)),
			Labels: map[string]string{}, Annotations: map[string]string{}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if l := []string{"", "LSE", "LSR", "LS", "BE", "SYSTEM", "GOLD"}[fb.pick(7)]; l != "" {
			p.Labels[LabelQoSClass] = l
		}
		switch fb.pick(4) {
		case 1:
			p.Annotations[AnnotationMemoryQOS] = `{"policy":"auto"}`
		case 2:
			p.Annotations[AnnotationMemoryQOS] = fmt.Sprintf(`{"minLimitPercent":%d,"lowLimitPercent":%d,"throttlingPercent":%d}`, fb.pick(101), fb.pick(101), fb.pick(101))
		case 3:
			p.Annotations[AnnotationMemoryQOS] = `{"policy":"none"}`
		}
		if fb.pick(4) == 0 {
			p.Annotations[AnnotationMirror] = fmt.Sprintf("%032x", i)
		}
		p.Status.QOSClass = []corev1.PodQOSClass{"", corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort}[fb.pick(4)]
		for j := range 1 + fb.pick(3) {
			c := corev1.Container{Name: fmt.Sprint("c", j), Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}}
			res := corev1.ResourceMemory
			if fb.pick(4) == 0 {
				res = ResourceBatchMemory
			}
			if fb.pick(3) > 0 {
				c.Resources.Requests[res] = *resource.NewQuantity(fb.bytesChoice(), resource.BinarySI)
			}
			if fb.pick(3) > 0 {
				c.Resources.Limits[res] = *resource.NewQuantity(fb.bytesChoice(), resource.BinarySI)
			}
			for range fb.pick(3) {
				v := []string{"1TiB", "100MiB", "bad", fmt.Sprint(fb.bytesChoice()), "9223372036854775807"}[fb.pick(5)]
				c.Env = append(c.Env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: v})
			}
			if fb.pick(4) == 0 {
				p.Annotations[podplan.Annotation] = fmt.Sprintf(`{"containers":[{"name":%q,"env":{"GOMEMLIMIT":"%d"}}]}`, c.Name, fb.bytesChoice())
			}
			id := fmt.Sprintf("containerd://%d-%d", i, j)
			if fb.pick(4) == 0 {
				c.RestartPolicy = &always
				p.Spec.InitContainers = append(p.Spec.InitContainers, c)
				p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name, ContainerID: id})
				continue
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, ContainerID: id})
		}
		in.Pods = append(in.Pods, p)
	}
	return in
}
