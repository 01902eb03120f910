package admission

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/internal/qty"
)

// FuzzCreate: whatever the limits and the user's Go variables, the pod is
// admitted, GOMAXPROCS is at least 1 and at most the CPU limit (rounded
// up), GOMEMLIMIT stays under the memory limit and at or above a quarter
// of it, user values are kept, and a second pass changes nothing.
func FuzzCreate(f *testing.F) {
	for _, s := range [][4]string{
		{"250m", "1Gi", "", ""}, {"1.5", "1e9", "4", ""}, {"2000m", "128974848", "", "900MiB"},
		{"1", "1G", "x", "off"}, {"100", "64Mi", "", "lots"}, {"1m", "4Mi", "0", "1"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	for _, s := range [][2]string{{"1Ei", "16Ei"}, {"1e30", "99999999999999999999"}, {"9000", "1Ei"}, {"8192", "1e18"}} {
		f.Add(s[0], s[1], "", "")
	}
	h := newHandler(f, fit.Options{})
	f.Fuzz(func(t *testing.T, cpu, mem, userProcs, userLimit string) {
		if !utf8.ValidString(userProcs) || !utf8.ValidString(userLimit) {
			return // the API server sends valid UTF-8 JSON only
		}
		c := corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		// Any quantity a tenant can write, absurd ones included: Kubernetes
		// admits limits far beyond any node.
		if qty.Stalls(cpu) || qty.Stalls(mem) {
			return // the API server's own decoder stalls on these
		}
		cq, cerr := sent(cpu)
		if cerr == nil {
			c.Resources.Limits[corev1.ResourceCPU] = cq
		}
		mq, merr := sent(mem)
		if merr == nil {
			c.Resources.Limits[corev1.ResourceMemory] = mq
		}
		cpuOK := cerr == nil && cq.Sign() > 0 && qty.Tame(cq) && cq.Cmp(maxCPU) <= 0 && cq.MilliValue() > 0
		memOK := merr == nil && mq.Sign() > 0 && qty.Tame(mq) && mq.Cmp(maxMemory) <= 0 && mq.Value() >= 4<<20
		if userProcs != "" {
			c.Env = append(c.Env, env("GOMAXPROCS", userProcs))
		}
		if userLimit != "" {
			c.Env = append(c.Env, env("GOMEMLIMIT", userLimit))
		}
		pod := podOf("f", c)
		got, resp := admit(t, h, pod)
		e := envOf(got.Spec.Containers[0])
		if userProcs != "" && e["GOMAXPROCS"] != userProcs || userLimit != "" && e["GOMEMLIMIT"] != userLimit {
			t.Fatalf("user values changed: %v", e)
		}
		if userProcs == "" {
			v, set := e["GOMAXPROCS"]
			n, err := strconv.Atoi(v)
			switch {
			case !cpuOK && set:
				t.Fatalf("cpu %q beyond any machine: GOMAXPROCS=%q, want none", cpu, v)
			case cpuOK && (err != nil || n < 1 || float64(n) > math.Ceil(float64(cq.MilliValue())/1000)):
				t.Fatalf("cpu %s: GOMAXPROCS=%q", cq.String(), v)
			}
		}
		if userLimit == "" {
			v, set := e["GOMEMLIMIT"]
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case !memOK && set && (merr != nil || mq.Sign() <= 0 || !qty.Tame(mq) || mq.Cmp(maxMemory) > 0):
				t.Fatalf("memory %q: GOMEMLIMIT=%q, want none", mem, v)
			case memOK && (err != nil || n >= mq.Value() || n < mq.Value()/4):
				t.Fatalf("memory %s: GOMEMLIMIT=%q", mq.String(), v)
			}
		}
		// The marker names exactly the values the webhook added.
		var added []string
		for _, name := range []string{"GOMAXPROCS", "GOMEMLIMIT"} {
			if v, ok := e[name]; ok && (name == "GOMAXPROCS" && userProcs == "" || name == "GOMEMLIMIT" && userLimit == "") {
				added = append(added, name+"="+v)
			}
		}
		if e[fit.MarkerVar] != strings.Join(added, ",") {
			t.Fatalf("marker %q, added %v", e[fit.MarkerVar], added)
		}
		if _, resp2 := admit(t, h, got); len(resp2.Patch) != 0 {
			t.Fatalf("second pass patched %s (first %s)", resp2.Patch, resp.Patch)
		}
	})
}

// FuzzBody: any body gets an answer, never a panic: 200 with allowed true,
// or a 4xx with a message.
func FuzzBody(f *testing.F) {
	f.Add(string(review(f, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")))
	f.Add(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"spec":{"containers":[{"name":"a","resources":{"limits":{"cpu":"-1"}}}]}}}}`)
	f.Add(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"version":"v1","resource":"pods"},"operation":"UPDATE","subResource":"resize","object":{"metadata":{"annotations":{"gofit.dev/plan":"{\"containers\":[{\"name\":\"a\",\"env\":{\"GOMAXPROCS\":\"1\"}}]}"}},"spec":{"containers":[{"name":"a","env":[{"name":"GOMAXPROCS","value":"1"}]}]}}}}`)
	f.Add(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"metadata":{"annotations":{"gofit.dev/containers":"*=auto,a=off,=x"}}}}}`)
	f.Add("null")
	h := newHandler(f, fit.Options{})
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/mutate", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == 200:
			if !strings.Contains(rec.Body.String(), `"allowed":true`) {
				t.Fatalf("200 without allowed: %s", rec.Body.String())
			}
		case rec.Code >= 400 && rec.Code < 500 && rec.Body.Len() > 1:
		default:
			t.Fatalf("status %d %q", rec.Code, rec.Body.String())
		}
	})
}

// sent is the quantity s as the webhook receives it: the API server
// decodes what the tenant wrote and encodes it again for the review (and
// for etcd). The two differ at times: apimachinery encodes "1000E" as
// "1", so the pod the kubelet runs has a limit of 1 CPU, and the webhook
// rightly fits it to that.
func sent(s string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, err
	}
	b, err := q.MarshalJSON()
	if err != nil {
		return q, err
	}
	var out resource.Quantity
	return out, out.UnmarshalJSON(b)
}
