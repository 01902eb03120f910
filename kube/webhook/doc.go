// Package webhook serves kube/admission's Handler: HTTPS on one port with
// /mutate, /healthz, /readyz and /metrics (Prometheus, on a registry of its
// own), serving certificates re-read from files as they are renewed
// (cert-manager, or the self-managed rotator of open-policy-agent's
// cert-controller), and a drain on shutdown. Run is `gofit webhook`.
// Manifests: deploy/webhook.
package webhook
