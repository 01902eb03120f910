package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gofit-dev/gofit/fit"
)

func TestBadRequests(t *testing.T) {
	h := newHandler(t, fit.Options{})
	h.maxBody = 4 << 10
	good := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")
	cases := []struct {
		name   string
		method string
		ctype  string
		body   string
		code   int
		msg    string
	}{
		{"empty", "POST", "application/json", "", 400, "empty body"},
		{"not JSON", "POST", "application/json", "{nope", 400, "decode AdmissionReview"},
		{"truncated", "POST", "application/json", string(good[:len(good)/2]), 400, "decode AdmissionReview"},
		{"wrong type", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, 400, `want admission.k8s.io/v1 AdmissionReview`},
		{"no request", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400, "no request"},
		{"no uid", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, 400, "no uid"},
		{"a field of the wrong type", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, 400, "decode AdmissionReview"},
		{"too large", "POST", "application/json", `{"apiVersion":"` + strings.Repeat("x", 5<<10) + `"}`, 413, "over 4096 bytes"},
		{"GET", "GET", "", "", 405, "POST an AdmissionReview"},
		{"YAML", "POST", "application/yaml", string(good), 415, "want application/json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, "/mutate", strings.NewReader(c.body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.msg) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), c.code, c.msg)
			}
		})
	}
}

// Anything that goes wrong inside still admits the pod, unchanged.
func TestAlwaysAllowed(t *testing.T) {
	h := newHandler(t, fit.Options{})
	body := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")

	// A pod the webhook cannot read.
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	r.Request.Object = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":"not a list"}}`)}
	bad, _ := json.Marshal(r)
	code, resp, raw := post(t, h, bad)
	if code != 200 || !resp.Allowed || len(resp.Patch) != 0 || string(resp.UID) != "uid-p" || !hasWarning(resp.Warnings, "could not read the pod") {
		t.Errorf("unreadable pod: %d %s", code, raw)
	}

	// A panic inside the mutator (a nil one panics on first use).
	broken := NewHandler(nil, HandlerOptions{Observer: &observations{}})
	code, resp, raw = post(t, broken, body)
	if code != 200 || !resp.Allowed || len(resp.Patch) != 0 || string(resp.UID) != "uid-p" {
		t.Errorf("panic: %d %s", code, raw)
	}
	if got := broken.obs.(*observations).count("CREATE", OutcomeError); got != 1 {
		t.Errorf("error outcome counted %v times", got)
	}

	// Not a pod, or not an operation it handles: admitted, untouched.
	for _, mod := range []func(*admissionv1.AdmissionRequest){
		func(q *admissionv1.AdmissionRequest) { q.Resource.Resource = "services" },
		func(q *admissionv1.AdmissionRequest) { q.Operation = admissionv1.Delete },
		func(q *admissionv1.AdmissionRequest) { q.Operation = admissionv1.Update },
		func(q *admissionv1.AdmissionRequest) { q.SubResource = "status" },
	} {
		_ = json.Unmarshal(body, &r)
		mod(r.Request)
		b, _ := json.Marshal(r)
		code, resp, raw := post(t, h, b)
		if code != 200 || !resp.Allowed || len(resp.Patch) != 0 {
			t.Errorf("ignored request: %d %s", code, raw)
		}
	}
	if got := h.obs.(*observations).count("UPDATE", OutcomeIgnored); got != 1 {
		t.Errorf("ignored UPDATEs counted %v times", got)
	}
}

// The response envelope is exactly what the API server expects.
func TestResponseEnvelope(t *testing.T) {
	h := newHandler(t, fit.Options{})
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	resp := m["response"].(map[string]any)
	if m["apiVersion"] != "admission.k8s.io/v1" || m["kind"] != "AdmissionReview" || resp["uid"] != "uid-p" ||
		resp["allowed"] != true || resp["patchType"] != "JSONPatch" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("envelope %s", rec.Body.String())
	}
}

// A client chooses the operation it writes; what the handler reports stays
// in the fixed set, so no label can grow with made-up values.
func TestOperationLabelsFixed(t *testing.T) {
	h := newHandler(t, fit.Options{})
	obs := h.obs.(*observations)
	body := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		r.Request.Operation = admissionv1.Operation(fmt.Sprintf("MADE-UP-%d", i))
		b, _ := json.Marshal(r)
		if code, resp, raw := post(t, h, b); code != 200 || !resp.Allowed || len(resp.Patch) != 0 {
			t.Fatalf("made-up operation: %d %s", code, raw)
		}
	}
	seen := map[string]bool{}
	for _, o := range obs.list {
		seen[o.op] = true
		if !slices.Contains(Operations(), o.op) {
			t.Errorf("reported operation %q, not one of %v", o.op, Operations())
		}
	}
	if got := obs.count(OperationOther, OutcomeIgnored); got != 300 {
		t.Errorf("%d made-up operations reported as %q, want 300", got, OperationOther)
	}
}

// Reviews in work at once are bounded in bytes: while one review of the
// largest size is being read, another waits for room, and is refused with
// 503 (counted as busy) when none comes within half the API server's
// timeout; once the first is done, it is served.
func TestInFlightBound(t *testing.T) {
	const maxBody = 64 << 10
	obs := &observations{}
	h := NewHandler(NewMutator(fit.Policy{}), HandlerOptions{Observer: obs, MaxBody: maxBody, MaxInFlight: 1})
	pr, pw := io.Pipe()
	big := httptest.NewRequest(http.MethodPost, "/mutate", pr)
	big.ContentLength = maxBody
	bigDone := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, big)
		bigDone <- rec.Code
	}()
	// The write returns once the handler reads: it holds its share now.
	wrote := make(chan error, 1)
	go func() { _, err := pw.Write([]byte(`{"apiVersion":`)); wrote <- err }()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case code := <-bigDone:
		t.Fatalf("the large review was answered (%d) without reading its body", code)
	}
	small := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/mutate?timeout=20ms", bytes.NewReader(small))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := send(); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a review while the budget is taken: %d %q", rec.Code, rec.Body.String())
	}
	if n := obs.count(OperationUnknown, OutcomeBusy); n != 1 {
		t.Errorf("%d busy refusals counted, want 1", n)
	}
	_ = pw.CloseWithError(io.ErrUnexpectedEOF)
	if code := <-bigDone; code != http.StatusBadRequest {
		t.Errorf("the truncated large review: %d", code)
	}
	if rec := send(); rec.Code != http.StatusOK {
		t.Errorf("a review after the budget is free: %d %q", rec.Code, rec.Body.String())
	}
}

// TestSlowClients: clients that announce a large body and trickle it held
// their share of the in-work budget until the server's read timeout, so a
// few of them made every review wait out its queue and fail open. Each
// body now has a read deadline, and reviews behind them get their turn.
func TestSlowClients(t *testing.T) {
	h := newHandler(t, fit.Options{})
	h.maxBody = 64 << 10
	h.budget = 2 * h.maxBody // two slots
	h.inWork = newBudget(h.budget)
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for i := range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /mutate?timeout=4s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", h.maxBody-int64(i))
	}
	time.Sleep(100 * time.Millisecond) // the slow ones hold the budget
	start := time.Now()
	resp, err := http.Post(srv.URL+"/mutate?timeout=4s", "application/json", bytes.NewReader(review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("review behind three slow clients: %d %s after %v", resp.StatusCode, body, time.Since(start).Round(time.Millisecond))
	}
}

// TestSystemNamespaces: kube-system and the webhook's own namespace were
// fitted whenever the configuration's selector let them through; they are
// never fitted now, whatever it says.
func TestSystemNamespaces(t *testing.T) {
	pol, err := fit.New(fit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(NewMutator(pol), HandlerOptions{Namespace: "gofit-system"})
	body := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")
	for ns, fitted := range map[string]bool{"default": true, "kube-system": false, "gofit-system": false} {
		b := bytes.Replace(body, []byte(`"namespace":"default"`), []byte(`"namespace":"`+ns+`"`), 1)
		code, resp, out := post(t, h, b)
		if code != http.StatusOK || !resp.Allowed {
			t.Fatalf("%s: %d %s", ns, code, out)
		}
		if got := len(resp.Patch) > 0; got != fitted {
			t.Errorf("namespace %s: patched %v, want %v", ns, got, fitted)
		}
	}
}

// TestStallingQuantity: a quantity whose exponent Kubernetes' decoder
// takes minutes over is not decoded; the pod is admitted unchanged with a
// warning naming it. The API server never sends one, but anyone who can
// reach the webhook's port can, and each would hold a core. Before the
// guard, the first body took 14 s and the pod was mutated.
func TestStallingQuantity(t *testing.T) {
	h := newHandler(t, fit.Options{})
	body := string(review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, ""))
	if !strings.Contains(body, `"cpu":"1"`) {
		t.Fatalf("no cpu limit to replace in %s", body)
	}
	for _, v := range []string{"1E06000020600000", `1\u0065-99999999`, ` 5e-400`} {
		code, resp, raw := post(t, h, []byte(strings.Replace(body, `"cpu":"1"`, `"cpu":"`+v+`"`, 1)))
		if code != 200 || !resp.Allowed || len(resp.Patch) != 0 || !hasWarning(resp.Warnings, "could not read the pod") ||
			!strings.Contains(strings.Join(resp.Warnings, " "), "exponent below -300") {
			t.Errorf("cpu %s: %d %s", v, code, raw)
		}
	}
	// An exponent the decoder reads at once still fits the pod.
	code, resp, raw := post(t, h, []byte(strings.Replace(body, `"cpu":"1"`, `"cpu":"1e0"`, 1)))
	if code != 200 || !resp.Allowed || len(resp.Patch) == 0 {
		t.Errorf("cpu 1e0: %d %s", code, raw)
	}
}

// nsArm records the namespace of each pod it is asked to assign.
type nsArm struct {
	mu  sync.Mutex
	nss []string
}

func (a *nsArm) Assign(_ context.Context, pod *corev1.Pod, e *Experiment) (Assignment, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nss = append(a.nss, pod.Namespace)
	return Assignment{Arm: e.Arms[0].Name, Ticket: "t"}, nil
}

// TestNamespaceFromTheRequest: a review whose pod object names another
// namespace than the request made the experiment's Lease be written
// there (kube-system, say). Such a review is refused, and the assigner
// only ever sees the request's namespace.
func TestNamespaceFromTheRequest(t *testing.T) {
	arms := &nsArm{}
	h := NewHandler(NewMutator(fit.Policy{}, WithArmAssigner(arms)), HandlerOptions{})
	pod := podOf("p", ctr("app", "1", "1Gi"))
	pod.Annotations = map[string]string{AnnotationExperiment: "name: g\narms: [{name: a, fit: gofit}, {name: b, fit: none}]"}
	for _, objNS := range []string{"kube-system", "other"} {
		p := pod.DeepCopy()
		p.Namespace = objNS
		var r map[string]any
		if err := json.Unmarshal(review(t, p, admissionv1.Create, ""), &r); err != nil {
			t.Fatal(err)
		}
		r["request"].(map[string]any)["namespace"] = "default"
		b, _ := json.Marshal(r)
		code, _, body := post(t, h, b)
		if code != http.StatusBadRequest || !strings.Contains(body, "kube-system") && !strings.Contains(body, "other") {
			t.Errorf("object in %s, request in default: %d %s", objNS, code, body)
		}
	}
	for _, objNS := range []string{"", "default"} {
		p := pod.DeepCopy()
		p.Namespace = objNS
		if code, _, body := post(t, h, review(t, p, admissionv1.Create, "")); code != http.StatusOK {
			t.Errorf("object namespace %q, request default: %d %s", objNS, code, body)
		}
	}
	if fmt.Sprint(arms.nss) != "[default default]" {
		t.Errorf("the assigner saw namespaces %v, want the request's twice", arms.nss)
	}
}

// stallingString streams the tokens and judges values only, at any depth.
func TestStallingStringStreams(t *testing.T) {
	for in, want := range map[string]bool{
		`{"a":"5e-400"}`:                     true,
		`{"5e-400":"x"}`:                     false, // a key is never a quantity
		`{"a":{"b":[1,"x",{"5e-400":[]}]}}`:  false,
		`{"a":{"b":[1,"x",{"c":"5e-400"}]}}`: true,
		`["a",{"k":{}},"1\u0065-999"]`:       true,
		`{"a":{},"b":"5e-400"}`:              true,
		`{"a":"1e0"}`:                        false,
		`{"a":`:                              false,
	} {
		if _, got := stallingString([]byte(in)); got != want {
			t.Errorf("%s: %v, want %v", in, got, want)
		}
	}
}
