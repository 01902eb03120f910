// Package admission fits pods at admission: a pure, typed Mutator (a Pod
// in; a JSON patch, a Record of what was planned and warnings out) and the
// thin AdmissionReview adapter around it (Handler), on k8s.io/api only.
//
// The Mutator adds GOMAXPROCS and GOMEMLIMIT to each long-running
// container from its limits, with fit's policy, and the GOFIT_RUN marker
// (fit.MarkerVar) naming them, so a binary that imports gofit's runtime
// library takes them over and follows in-place resizes. A user's own
// variables win and are never rewritten. Three pod annotations steer it:
// AnnotationInject, AnnotationContainers (env, auto or off per container)
// and AnnotationNonGoMemory; AnnotationPlan records what it did.
//
// AnnotationExperiment asks for an experiment on live traffic: Admit gives
// each new pod one arm (from an ArmAssigner, which kube/webhook implements
// against the API server), labels it and injects that arm's settings; a
// malformed spec or a failed assignment gets a warning and the normal fit.
//
// The Handler decodes reviews with a size limit and a bound on the reviews
// in work at once, recovers panics and always admits: failurePolicy Ignore
// means a webhook that cannot answer never blocks a pod. It reports each
// answer to an Observer whose label values come from fixed sets. Serving
// (TLS, certificates, metrics) is package kube/webhook.
package admission
