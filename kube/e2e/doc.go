// Package e2e runs gofit on a real single-node Kubernetes: TestNode boots
// a Debian kernel (cgroup v2) under QEMU with tools/vmtest and runs this
// package's test binary inside it, where TestGuest starts etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// (runc, CNI bridge) and the kubelet (cgroupfs driver), installs deploy/
// with kubectl as a user would, and checks the webhook, the node agent and
// the library against what the kubelet really made. `make e2e` runs it;
// docs/e2e.md says what it needs and what it costs.
package e2e
