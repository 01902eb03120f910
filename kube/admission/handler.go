package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/kube/internal/qty"
)

// DefaultMaxBody bounds a request body. The API server caps an object at
// about 3 MiB (etcd's request limit) and an AdmissionReview carries at
// most two of them (object and oldObject) plus a little envelope.
const DefaultMaxBody = 7 << 20

// DefaultMaxInFlight is how many reviews of the largest size (MaxBody) are
// decoded and fitted at once. A review holds its body and the pod decoded
// from it (oldObject is skipped, not copied): up to about 3 × its size
// with the garbage of decoding. The slots are counted in bytes, so one
// slot of 7 MiB also admits a thousand usual pods of a few kB at once.
// Two keep the webhook inside the 128Mi limit it ships with (measured in
// docs/results/webhook-memory.md); more reviews only wait.
const DefaultMaxInFlight = 2

// defaultQueueWait is how long a review waits for a slot when the API
// server's request names no timeout.
const defaultQueueWait = time.Second

// maxBodyRead bounds how long a request that holds a share of the in-work
// budget may take to send its body. The API server sends a review at
// network speed (7 MiB in well under 100 ms in a cluster); a client that
// trickles its body would otherwise hold its share until the server's
// ReadTimeout. The read deadline is also at most a quarter of the queue
// wait. Together with a budget taken by the bytes received (readBody),
// ten clients trickling 7 MiB bodies leave real reviews served
// (docs/results/webhook-latency.md).
const maxBodyRead = time.Second

// Observer is told about every request the Handler answers: its operation
// (one of Operations), its Outcome and HTTP status code, and how long it
// took. kube/webhook's Metrics implement it.
type Observer interface {
	ObserveAdmission(operation string, outcome Outcome, code int, d time.Duration)
}

// The operations a review may carry, as they label observations. Anything
// else a client sends is OperationOther, and a request whose body could not
// be read at all is OperationUnknown: a label's values come from this fixed
// set only, whatever a client writes.
const (
	OperationOther   = "other"
	OperationUnknown = "unknown"
)

// Operations lists every operation label the Handler reports.
func Operations() []string {
	return []string{string(admissionv1.Create), string(admissionv1.Update), string(admissionv1.Delete), string(admissionv1.Connect), OperationOther, OperationUnknown}
}

func operationLabel(op admissionv1.Operation) string {
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
		return string(op)
	}
	return OperationOther
}

// HandlerOptions configure a Handler. The zero value is usable.
type HandlerOptions struct {
	Log      *slog.Logger // nil: silent
	Observer Observer     // nil: none
	// MaxBody bounds a request body in bytes; 0 means DefaultMaxBody.
	MaxBody int64
	// MaxInFlight bounds the work done at once to MaxInFlight reviews of
	// MaxBody bytes (counted in bytes: each request holds the buffer its
	// body has grown to, never the size it announces); 0 means
	// DefaultMaxInFlight. A request that finds no room waits (for half
	// the timeout the API server names, 1 s if none; whoever fits first
	// goes), or at once if it already holds 256 KiB, then gets 503:
	// with failurePolicy Ignore the pod starts unfitted, where an
	// unbounded webhook would be OOM-killed and fit nothing at all.
	MaxInFlight int
	// Namespace is the webhook's own namespace: its pods, like
	// kube-system's, are never fitted, whatever the webhook
	// configuration's selector says (a webhook that fits its own pods
	// cannot start them while it is down).
	Namespace string
}

// Handler is the thin HTTP adapter around a Mutator: it decodes an
// AdmissionReview, bounds its size and the work done at once, recovers
// panics and always admits.
type Handler struct {
	mutator *Mutator
	log     *slog.Logger
	obs     Observer
	maxBody int64
	budget  int64 // bytes of request bodies in work at once
	inWork  *budget
	now     func() time.Time
	ownNS   string
}

// NewHandler returns the /mutate handler.
func NewHandler(m *Mutator, o HandlerOptions) *Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	budget := o.MaxBody * int64(o.MaxInFlight)
	return &Handler{mutator: m, log: o.Log, obs: o.Observer, maxBody: o.MaxBody, budget: budget, inWork: newBudget(budget), now: time.Now, ownNS: o.Namespace}
}

// httpError is a request the webhook cannot answer with an AdmissionReview.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func (h *Handler) observe(op string, o Outcome, code int, start time.Time) {
	if h.obs != nil {
		h.obs.ObserveAdmission(op, o, code, h.now().Sub(start))
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	fail := func(herr *httpError) {
		o := OutcomeError
		if herr.code == http.StatusServiceUnavailable {
			o = OutcomeBusy
			w.Header().Set("Retry-After", "1")
		}
		h.observe(OperationUnknown, o, herr.code, start)
		h.log.Warn("admission request not served", "status", herr.code, "error", herr.msg, "remote", r.RemoteAddr)
		http.Error(w, herr.msg, herr.code)
	}
	if herr := h.check(w, r); herr != nil {
		fail(herr)
		return
	}
	body, held, herr := h.readBody(w, r)
	defer h.inWork.release(held) // until the response is written: the pod decoded from it lives as long
	if herr != nil {
		fail(herr)
		return
	}
	review, herr := h.decode(body)
	if herr != nil {
		fail(herr)
		return
	}
	req := review.Request
	op := operationLabel(req.Operation)
	res := h.review(r.Context(), req)
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Warnings: res.Warnings}
	if len(res.Patch) > 0 {
		patch, err := json.Marshal(res.Patch)
		if err != nil {
			res = Result{Outcome: OutcomeError}
			resp.Warnings = nil
			h.log.Error("encode patch", "uid", req.UID, "error", err)
		} else {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	body, err := json.Marshal(out)
	if err != nil {
		h.observe(op, OutcomeError, http.StatusInternalServerError, start)
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
	h.observe(op, res.Outcome, http.StatusOK, start)
	h.log.Debug("admission", "uid", req.UID, "namespace", req.Namespace, "name", podName(req), "operation", op,
		"subresource", req.SubResource, "outcome", res.Outcome, "patch_ops", len(res.Patch), "warnings", len(res.Warnings))
}

// check refuses what is not an AdmissionReview post before any of the
// body is read.
func (h *Handler) check(w http.ResponseWriter, r *http.Request) *httpError {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return &httpError{http.StatusMethodNotAllowed, "method " + r.Method + " not allowed: POST an AdmissionReview"}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &httpError{http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want application/json", ct)}
		}
	}
	if r.ContentLength > h.maxBody {
		return &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.maxBody)}
	}
	return nil
}

// readChunk is the least a body's buffer grows by.
const readChunk = 64 << 10

// yieldAt: a request that already holds this many bytes of the budget and
// finds no room for more is refused at once rather than wait holding
// them. A review of a usual pod (a few kB) never gets there; a client
// trickling a huge body cannot sit on its share while others wait.
const yieldAt = 256 << 10

// readBody reads the body into one buffer, taking room in the in-work
// budget for the buffer as it grows with the bytes actually received,
// never for the size a request announces: a client that announces 7 MiB
// and sends little holds little. A request that finds no room waits for
// it (at most queueWait) holding less than yieldAt, or is refused (503).
// It returns the bytes held, to be released by the caller (also on
// error).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int64, *httpError) {
	queue, cancel := context.WithTimeout(r.Context(), queueWait(r))
	defer cancel()
	busy := func(want int64) *httpError {
		return &httpError{http.StatusServiceUnavailable, fmt.Sprintf("%d bytes of admission reviews in work; no room for %d more within %v", h.budget, want, queueWait(r))}
	}
	body := http.MaxBytesReader(w, r.Body, h.maxBody)
	var (
		buf      []byte
		held     int64
		timedOut func() bool
	)
	for {
		if len(buf) == cap(buf) {
			// Grow by doubling, to the announced size (plus one byte to
			// see the end) when there is one, so that an honest body is
			// copied a few times at most and never over-allocated.
			want := max(2*int64(cap(buf)), readChunk)
			if r.ContentLength >= 0 {
				want = min(want, r.ContentLength+1)
			}
			want = min(want, h.maxBody+1)
			extra := want - int64(cap(buf))
			if extra <= 0 {
				return nil, held, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.maxBody)}
			}
			if !h.inWork.tryTake(extra) {
				if held >= yieldAt {
					return nil, held, busy(extra)
				}
				if err := h.inWork.take(queue, extra); err != nil {
					return nil, held, busy(extra)
				}
			}
			held += extra
			nb := make([]byte, len(buf), want)
			copy(nb, buf)
			buf = nb
			if timedOut == nil {
				// The body's deadline runs from its first share of the
				// budget, not from the wait for it.
				var stop func()
				timedOut, stop = h.bodyDeadline(w, r)
				defer stop()
			}
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				return nil, held, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.maxBody)}
			case errors.Is(err, os.ErrDeadlineExceeded) || timedOut():
				return nil, held, &httpError{http.StatusRequestTimeout, fmt.Sprintf("request body not sent within %v", bodyReadTime(r))}
			}
			return nil, held, &httpError{http.StatusBadRequest, "read body: " + err.Error()}
		}
	}
	if len(buf) == 0 {
		return nil, held, &httpError{http.StatusBadRequest, "empty body: POST an AdmissionReview"}
	}
	return buf, held, nil
}

// bodyDeadline bounds how long the rest of the body may take (see
// maxBodyRead): the connection's read deadline over HTTP/1, a timer that
// closes the body where there is none to set (HTTP/2 streams). stop lifts
// it, so that it never applies to the response or the next request.
func (h *Handler) bodyDeadline(w http.ResponseWriter, r *http.Request) (timedOut func() bool, stop func()) {
	d := bodyReadTime(r)
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
		return func() bool { return false }, func() { _ = rc.SetReadDeadline(time.Time{}) }
	}
	var fired atomic.Bool
	t := time.AfterFunc(d, func() {
		fired.Store(true)
		_ = r.Body.Close()
	})
	return fired.Load, func() { t.Stop() }
}

// queueWait is how long a request may wait for a share of the budget. The
// API server appends ?timeout=Ns (the webhook's timeoutSeconds): answer
// before it gives up, so the refusal is seen and counted.
func queueWait(r *http.Request) time.Duration {
	if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 {
		return min(d/2, 15*time.Second)
	}
	return defaultQueueWait
}

// bodyReadTime is how long a request holding its share may take to send
// its body (see maxBodyRead).
func bodyReadTime(r *http.Request) time.Duration { return min(maxBodyRead, queueWait(r)/4) }

// reviewIn is the part of an AdmissionReview the webhook reads. oldObject,
// userInfo and options are not declared, so the decoder steps over them
// without keeping a byte, and the object is decoded straight into a Pod
// rather than copied into a RawExtension first: one review holds its body
// and one decoded pod, never three copies of the object.
type reviewIn struct {
	metav1.TypeMeta `json:",inline"`
	Request         *requestIn `json:"request"`
}

type requestIn struct {
	UID         types.UID                   `json:"uid"`
	Resource    metav1.GroupVersionResource `json:"resource"`
	SubResource string                      `json:"subResource,omitempty"`
	Name        string                      `json:"name,omitempty"`
	Namespace   string                      `json:"namespace,omitempty"`
	Operation   admissionv1.Operation       `json:"operation"`
	Object      podObject                   `json:"object"`
	DryRun      *bool                       `json:"dryRun,omitempty"`
}

// podObject decodes a review's object as a Pod, keeping a decoding error
// for the mutation to report (an unreadable pod is admitted with a
// warning, not refused with a 400).
type podObject struct {
	pod *corev1.Pod
	err error
}

func (p *podObject) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if s, ok := stallingString(b); ok {
		// The API server never sends one in a quantity field (its own
		// decoder would have stalled first), but anyone who can reach
		// this port can: decoding it would hold a core for minutes.
		p.err = fmt.Errorf("the value %q: Kubernetes' quantity decoder takes minutes over an exponent below -300", s)
		return nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal(b, &pod); err != nil {
		p.err = err
		return nil
	}
	p.pod = &pod
	return nil
}

// exponentForm is a number with an exponent, as a quantity field may
// hold: "5e-3".
var exponentForm = regexp.MustCompile(`^[+-]?[0-9]*\.?[0-9]*[eE][+-]?[0-9]+$`)

// stallingString finds a string in the JSON b that resource.ParseQuantity
// would take minutes over (qty.Stalls), were it a quantity field's. It
// looks at the strings as decoded, as the quantity decoder does
// ("1\u0065-999999" is such a string too), and trimmed of space. It
// streams the tokens: decoding the whole object into a tree first (as it
// once did) held several times the body in maps for a moment.
func stallingString(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	// The open objects and arrays, each with whether its next token is a
	// key: an object's keys are never quantities.
	type frame struct{ object, wantKey bool }
	var stack []frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false // the end, or malformed: the pod's own decoding reports it
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, frame{object: t == '{', wantKey: t == '{'})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			stack[n-1].wantKey = false
			continue
		}
		if v, ok := tok.(string); ok {
			if s := strings.TrimSpace(v); exponentForm.MatchString(s) && qty.Stalls(s) {
				return v, true
			}
		}
		valueDone()
	}
}

func (h *Handler) decode(body []byte) (*reviewIn, *httpError) {
	var review reviewIn
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, &httpError{http.StatusBadRequest, "decode AdmissionReview: " + err.Error()}
	}
	if gv := admissionv1.SchemeGroupVersion.String(); review.APIVersion != gv || review.Kind != "AdmissionReview" {
		return nil, &httpError{http.StatusBadRequest, fmt.Sprintf("apiVersion %q kind %q: want %s AdmissionReview", review.APIVersion, review.Kind, gv)}
	}
	if review.Request == nil {
		return nil, &httpError{http.StatusBadRequest, "AdmissionReview has no request"}
	}
	if review.Request.UID == "" {
		return nil, &httpError{http.StatusBadRequest, "AdmissionReview request has no uid"}
	}
	// The API server always sends the object's namespace as the
	// request's. A review that says otherwise did not come from it, and
	// the object's namespace would aim the experiment's Lease (and its
	// owner references) at a namespace of the sender's choosing.
	if pod := review.Request.Object.pod; pod != nil && pod.Namespace != "" && pod.Namespace != review.Request.Namespace {
		return nil, &httpError{http.StatusBadRequest, fmt.Sprintf("request.namespace %q differs from request.object.metadata.namespace %q", review.Request.Namespace, pod.Namespace)}
	}
	return &review, nil
}

// review runs the mutator on one request. Whatever goes wrong, including a
// panic, the pod is admitted unchanged: this webhook must never block one.
func (h *Handler) review(ctx context.Context, req *requestIn) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("panic in admission; pod admitted unchanged", "uid", req.UID, "panic", fmt.Sprint(p))
			res = Result{Outcome: OutcomeError}
		}
	}()
	if req.Resource != (metav1.GroupVersionResource{Version: "v1", Resource: "pods"}) {
		return Result{Outcome: OutcomeIgnored}
	}
	if req.Namespace == metav1.NamespaceSystem || (h.ownNS != "" && req.Namespace == h.ownNS) {
		return Result{Outcome: OutcomeIgnored}
	}
	switch {
	case req.Operation == admissionv1.Create && req.SubResource == "":
	case req.Operation == admissionv1.Update && req.SubResource == "resize":
	default:
		return Result{Outcome: OutcomeIgnored}
	}
	pod, err := req.Object.pod, req.Object.err
	if err == nil && pod == nil {
		err = errors.New("the review has no object")
	}
	if err != nil {
		h.log.Error("decode pod; admitted unchanged", "uid", req.UID, "error", err)
		return Result{Outcome: OutcomeError, Warnings: []string{"gofit webhook could not read the pod (" + err.Error() + "); nothing injected"}}
	}
	// The request's namespace, never the object's: decode refused any
	// difference, and a pod being created may carry none.
	pod.Namespace = req.Namespace
	if req.Operation == admissionv1.Update {
		return h.mutator.Resize(pod)
	}
	if req.DryRun != nil && *req.DryRun {
		return h.mutator.Preview(pod) // sideEffects: None
	}
	return h.mutator.Admit(ctx, pod)
}

func podName(req *requestIn) string {
	if req.Name != "" {
		return req.Name
	}
	return "(generated)"
}
