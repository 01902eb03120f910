// Package chart tests the Helm chart in charts/gofit against deploy/ and a
// real kube-apiserver: helm lint, helm template over a matrix of values
// (each render applied by server-side dry run to envtest), the schema's
// refusals, and that the default render installs what deploy/ installs.
// helm is built from its Go module by kube/hack/helm.sh, cached by version.
package chart
