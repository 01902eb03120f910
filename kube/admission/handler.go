package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultMaxBody bounds a request body. The API server caps an object at
// about 3 MiB (etcd's request limit) and an AdmissionReview carries at
// most two of them (object and oldObject) plus a little envelope.
const DefaultMaxBody = 7 << 20

// Handler is the thin HTTP adapter around a Mutator: it decodes an
// AdmissionReview, bounds its size, recovers panics and always admits.
type Handler struct {
	mutator *Mutator
	log     *slog.Logger
	metrics *Metrics
	maxBody int64
	now     func() time.Time
}

// NewHandler returns the /mutate handler. log and metrics may be nil.
func NewHandler(m *Mutator, log *slog.Logger, metrics *Metrics, maxBody int64) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	return &Handler{mutator: m, log: log, metrics: metrics, maxBody: maxBody, now: time.Now}
}

// httpError is a request the webhook cannot answer with an AdmissionReview.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	review, herr := h.decode(w, r)
	if herr != nil {
		h.metrics.observe("", OutcomeError, herr.code, h.now().Sub(start))
		h.log.Warn("bad admission request", "status", herr.code, "error", herr.msg, "remote", r.RemoteAddr)
		http.Error(w, herr.msg, herr.code)
		return
	}
	req := review.Request
	res := h.review(req)
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
		h.metrics.observe(string(req.Operation), OutcomeError, http.StatusInternalServerError, h.now().Sub(start))
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
	h.metrics.observe(string(req.Operation), res.Outcome, http.StatusOK, h.now().Sub(start))
	h.log.Debug("admission", "uid", req.UID, "namespace", req.Namespace, "name", podName(req), "operation", req.Operation,
		"subresource", req.SubResource, "outcome", res.Outcome, "patch_ops", len(res.Patch), "warnings", len(res.Warnings))
}

func (h *Handler) decode(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, *httpError) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, &httpError{http.StatusMethodNotAllowed, "method " + r.Method + " not allowed: POST an AdmissionReview"}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, &httpError{http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want application/json", ct)}
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.maxBody)}
		}
		return nil, &httpError{http.StatusBadRequest, "read body: " + err.Error()}
	}
	if len(body) == 0 {
		return nil, &httpError{http.StatusBadRequest, "empty body: POST an AdmissionReview"}
	}
	var review admissionv1.AdmissionReview
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
	return &review, nil
}

// review runs the mutator on one request. Whatever goes wrong, including a
// panic, the pod is admitted unchanged: this webhook must never block one.
func (h *Handler) review(req *admissionv1.AdmissionRequest) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("panic in admission; pod admitted unchanged", "uid", req.UID, "panic", fmt.Sprint(p))
			res = Result{Outcome: OutcomeError}
		}
	}()
	if req.Resource != (metav1.GroupVersionResource{Version: "v1", Resource: "pods"}) {
		return Result{Outcome: OutcomeIgnored}
	}
	switch {
	case req.Operation == admissionv1.Create && req.SubResource == "":
	case req.Operation == admissionv1.Update && req.SubResource == "resize":
	default:
		return Result{Outcome: OutcomeIgnored}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		h.log.Error("decode pod; admitted unchanged", "uid", req.UID, "error", err)
		return Result{Outcome: OutcomeError, Warnings: []string{"gofit webhook could not read the pod (" + err.Error() + "); nothing injected"}}
	}
	if req.Operation == admissionv1.Update {
		return h.mutator.Resize(&pod)
	}
	return h.mutator.Create(&pod)
}

func podName(req *admissionv1.AdmissionRequest) string {
	if req.Name != "" {
		return req.Name
	}
	return "(generated)"
}
