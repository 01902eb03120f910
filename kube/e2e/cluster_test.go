package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The node's fixed addresses. The control plane (etcd, kube-apiserver,
// controller-manager, scheduler) runs on the host at native speed, in a
// network namespace TestNode makes for the run; the guest runs only the
// kubelet, containerd, runc and the pods. A tap device in that namespace
// (hostIP) and the guest's virtio card (nodeIP) share one /24. The
// kubernetes Service's ClusterIP sits on the namespace's lo, where the API
// server listens on :443 (the Service's port): a pod that dials
// 10.96.0.1:443 is routed by the guest to the host without kube-proxy,
// which would need iptables or nftables in the guest. The host routes the
// pod CIDR to the guest, so the API server reaches the kubelet and the
// webhook's pods by endpoint IP (--enable-aggregator-routing).
const (
	nodeName  = "e2e-node"
	nodeIP    = "10.0.2.15"
	hostIP    = "10.0.2.2"
	netPrefix = "/24"
	serviceIP = "10.96.0.1"
	podCIDR   = "10.244.0.0/24"
	// The tap device's name in the run's network namespace.
	tapName = "gofit0"
	// Image references as the tarballs name them; a tag other than
	// latest keeps the kubelet from trying to pull.
	gofitImage   = "ghcr.io/gofit-dev/gofit:e2e"
	serviceImage = "ghcr.io/gofit-dev/gofit-service:e2e"
	plainImage   = "ghcr.io/gofit-dev/gofit-plainservice:e2e"
	pauseImage   = "registry.k8s.io/pause:e2e"
)

// apiServerURL is where the guest and the host's clients reach the API
// server.
const apiServerURL = "https://" + hostIP + ":443"

// guestPaths are where TestNode shares things into the guest.
type guestPaths struct {
	node    string // node-assets.sh's directory: bin/, cni/, lib/
	envtest string // envtest-assets.sh's: kube-apiserver, etcd
	images  string // the image tarballs and a static gofit binary
	helm    string // kube/hack/helm.sh's directory: helm
	pki     string // the host's PKI and kubeconfigs (controlPlane.dir)
	control string // the host's control-plane logs, followed live
}

// cluster is the running node: its processes and an admin client.
type cluster struct {
	t       *testing.T
	paths   guestPaths
	dir     string // /etc/kubernetes
	logs    string // one log file per component
	procs   []*exec.Cmd
	names   []string
	exited  []chan struct{} // closed when the component's process has exited
	cs      *kubernetes.Clientset
	rest    *rest.Config
	kubectl []string // argv prefix
	ready   time.Duration
	// etcdData is etcd's data directory (on the host's control plane).
	etcdData string
}

// startCluster brings the node up in the guest or fails the test: a node
// that cannot start is a failure, never a skip. The control plane is
// already running on the host (startControlPlane): the guest joins it.
func startCluster(t *testing.T, p guestPaths) *cluster {
	start := time.Now()
	c := &cluster{t: t, paths: p, dir: "/etc/kubernetes", logs: "/var/log/e2e"}
	// In the vmtest share the logs can be followed from the host while the
	// node runs (tail -f /tmp/gofit-vm-share-*/out/node-logs/kubelet.log).
	if st, err := os.Stat("/share/out"); err == nil && st.IsDir() {
		c.logs = "/share/out/node-logs"
	}
	t.Cleanup(c.stop)
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			c.dumpLogs()
			t.Fatalf("node: %s: %v", what, err)
		}
		t.Logf("node: %s (%.1fs)", what, time.Since(start).Seconds())
	}
	step("host setup", c.setupHost())
	step("certificates and kubeconfigs from the host", c.loadPKI())
	// Everything starts at once and waits for what it needs by retrying,
	// as on a real node.
	step("containerd started", c.startContainerd())
	step("kubelet started", c.startKubelet())
	step("containerd answering", c.waitContainerd())
	step("images imported", c.importImages())
	step("kube-apiserver on the host ready", c.waitAPIServer(5*time.Minute))
	step("node Ready", c.waitNodeReady(10*time.Minute))
	c.ready = time.Since(start)
	return c
}

// startControlPlane runs etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler on the host, in the network namespace TestNode made for
// the run, under root: the PKI and kubeconfigs in root/pki (the guest's
// /mnt/pki), the components' logs in root/logs (the guest follows them as
// /mnt/control), etcd's data in root/etcd.
func startControlPlane(t *testing.T, node, envtest, root string) *cluster {
	start := time.Now()
	c := &cluster{t: t, paths: guestPaths{node: node, envtest: envtest}, dir: filepath.Join(root, "pki"),
		logs: filepath.Join(root, "logs"), etcdData: filepath.Join(root, "etcd")}
	for _, d := range []string{c.dir, c.logs, c.etcdData} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stop)
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			c.dumpLogs()
			t.Fatalf("control plane: %s: %v", what, err)
		}
		t.Logf("control plane: %s (%.1fs)", what, time.Since(start).Seconds())
	}
	step("network: lo, "+tapName+" at "+hostIP+netPrefix+", "+serviceIP+", a route to "+podCIDR, setupHostNetwork())
	step("certificates and kubeconfigs", c.writePKI())
	step("etcd", c.startEtcd())
	step("kube-apiserver started", c.startAPIServer())
	step("kube-apiserver ready", c.waitAPIServerRestarting(5*time.Minute))
	// These two exit when the API server does not answer at their start
	// (they read their authentication ConfigMap once).
	step("controller-manager and scheduler started", c.startControllers())
	c.ready = time.Since(start)
	return c
}

// setupHostNetwork makes the host's side of the run's network, inside the
// namespace the run made (nothing outside it changes): the tap device the
// guest's virtio card joins, the Service IP on lo and the pod CIDR routed
// to the node.
func setupHostNetwork() error {
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "tuntap", "add", "dev", tapName, "mode", "tap"},
		{"ip", "addr", "add", hostIP + netPrefix, "dev", tapName},
		{"ip", "link", "set", tapName, "up"},
		{"ip", "addr", "add", serviceIP + "/32", "dev", "lo"},
		{"ip", "route", "add", podCIDR, "via", nodeIP, "dev", tapName},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func (c *cluster) setupHost() error {
	for _, d := range []string{c.logs, "/run", "/etc/cni/net.d", c.dir + "/manifests", "/var/lib"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The initramfs root (rootfs) cannot be pivot_root'ed from and cAdvisor
	// finds no filesystem stats for it: state lives on tmpfs mounts.
	for _, d := range []string{"/var/lib", "/run"} {
		if err := syscall.Mount("tmpfs", d, "tmpfs", 0, "mode=755"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", d, err)
		}
	}
	// runc and the CNI plugins are Debian's: dynamically linked.
	if err := copyTree(filepath.Join(c.paths.node, "lib"), "/"); err != nil {
		return fmt.Errorf("shared libraries: %w", err)
	}
	// The API server labels its identity lease with the hostname, and
	// "(none)" (an initramfs's) is not a valid label value.
	if err := syscall.Sethostname([]byte(nodeName)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	for f, data := range map[string]string{
		"/etc/resolv.conf": "", // the kubelet copies it into pods; no DNS here
		// The kubelet reads users and groups at start (user namespaces).
		"/etc/passwd":     "root:x:0:0:root:/root:/bin/sh\n",
		"/etc/group":      "root:x:0:\n",
		"/etc/machine-id": "e2e0000000000000000000000000e2e0\n",
		"/etc/hosts":      "127.0.0.1 localhost\n" + nodeIP + " " + nodeName + "\n",
	} {
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			return err
		}
	}
	// The virtio card joins the host's tap: the node's address, and the
	// host (the control plane) as the default route, which also carries
	// the pods' traffic to the Service IP. The guest forwards between the
	// card and the pods' bridge.
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "addr", "add", nodeIP + netPrefix, "dev", "eth0"},
		{"ip", "route", "add", "default", "via", hostIP},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("ip_forward: %w", err)
	}
	// memory_recursiveprot, as systemd mounts cgroup2: a pod's
	// memory.min/low then covers containers that claim none themselves
	// (the kubelet's MemoryQoS keeps containers at 0 by default from
	// v1.37).
	if err := syscall.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", syscall.MS_REMOUNT, "nsdelegate,memory_recursiveprot"); err != nil {
		return fmt.Errorf("remount cgroup2 with memory_recursiveprot: %w", err)
	}
	// Every controller the kernel has, handed down from the root as
	// systemd does (the kubelet needs cpu, cpuset, memory, pids; hugetlb
	// when present).
	ctrls, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		return err
	}
	var plus []string
	for _, f := range strings.Fields(string(ctrls)) {
		plus = append(plus, "+"+f)
	}
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte(strings.Join(plus, " ")), 0o644); err != nil {
		return fmt.Errorf("root cgroup.subtree_control %v: %w", plus, err)
	}
	return nil
}

// copyTree copies the regular files and symlinks under src into dst,
// keeping their relative paths.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o755)
	})
}

// pki is the cluster's certificate authority and credentials.
type pki struct {
	caPEM      []byte
	adminToken string
}

var thePKI pki

func (c *cluster) writePKI() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e-ca"},
		NotBefore: now, NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now, NotAfter: now.Add(48 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", nodeName, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(hostIP), net.ParseIP(nodeIP), net.ParseIP(serviceIP)}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyPEM := func(k *ecdsa.PrivateKey) []byte {
		b, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b})
	}
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	thePKI = pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), adminToken: randomToken()}
	kubeletToken := randomToken()
	files := map[string][]byte{
		"ca.crt":        thePKI.caPEM,
		"apiserver.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"apiserver.key": keyPEM(srvKey),
		"sa.key":        keyPEM(saKey),
		"sa.pub":        pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		// Static tokens: the admin (controllers and tests) and the kubelet,
		// which the Node authorizer and NodeRestriction know by its group.
		"tokens.csv": []byte(fmt.Sprintf("%s,admin,admin,system:masters\n%s,system:node:%s,kubelet,system:nodes\n",
			thePKI.adminToken, kubeletToken, nodeName)),
		"admin.token":        []byte(thePKI.adminToken),
		"admin.kubeconfig":   kubeconfig(thePKI.caPEM, thePKI.adminToken),
		"kubelet.kubeconfig": kubeconfig(thePKI.caPEM, kubeletToken),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(c.dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return c.clients()
}

// loadPKI is the guest's half of writePKI: the host's files, shared as
// paths.pki, copied to c.dir (kubeconfigs, the CA, and the API server's
// own key pair, which the fault proxy serves), and the admin clients.
func (c *cluster) loadPKI() error {
	if err := copyTree(c.paths.pki, c.dir); err != nil {
		return fmt.Errorf("the host's PKI from %s: %w", c.paths.pki, err)
	}
	ca, err := os.ReadFile(filepath.Join(c.dir, "ca.crt"))
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(c.dir, "admin.token"))
	if err != nil {
		return err
	}
	thePKI = pki{caPEM: ca, adminToken: strings.TrimSpace(string(tok))}
	return c.clients()
}

// clients makes the admin client and kubectl's argv from thePKI.
func (c *cluster) clients() error {
	var err error
	c.rest = &rest.Config{Host: apiServerURL, BearerToken: thePKI.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: thePKI.caPEM}, QPS: 50, Burst: 100}
	c.cs, err = kubernetes.NewForConfig(c.rest)
	c.kubectl = []string{filepath.Join(c.paths.node, "bin", "kube"), "kubectl", "--kubeconfig", filepath.Join(c.dir, "admin.kubeconfig")}
	return err
}

func randomToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

func kubeconfig(ca []byte, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: e2e
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
`, apiServerURL, b64(ca), token))
}

// start runs a component in the background with its output in its log.
func (c *cluster) start(name, bin string, args ...string) error {
	f, err := os.Create(filepath.Join(c.logs, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(c.paths.node, "bin")+":"+os.Getenv("PATH"))
	// Its own process group, so that stopping it takes its children along;
	// killed with the test process (on the host, a test killed by its
	// timeout runs no cleanup).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	c.procs, c.names, c.exited = append(c.procs, cmd), append(c.names, name), append(c.exited, done)
	go func() { cmd.Wait(); f.Close(); close(done) }()
	return nil
}

// stop ends the components in reverse order of their start.
func (c *cluster) stop() {
	if c.t.Failed() {
		c.dumpLogs()
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.Process != nil {
			syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		}
	}
	// Ten seconds for all of them together, then SIGKILL to the rest.
	deadline := time.After(10 * time.Second)
	late := false
	for i, p := range c.procs {
		if !late {
			select {
			case <-c.exited[i]:
				continue
			case <-deadline:
				late = true
			}
		}
		select {
		case <-c.exited[i]:
		default:
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		}
	}
}

// dumpLogs prints the end of each component's log (once).
func (c *cluster) dumpLogs() {
	if c.logs == "" {
		return
	}
	for _, n := range c.names {
		b, _ := os.ReadFile(filepath.Join(c.logs, n+".log"))
		c.t.Logf("---- %s.log (end) ----\n%s", n, tailLines(string(b), 40))
	}
	c.logs = ""
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// poll calls f until it returns true, an error wrapping errGaveUp, or
// the timeout passes; the last error says what it waited for.
func poll(timeout time.Duration, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if errors.Is(err, errGaveUp) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not within %v: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not within %v", what, timeout)
		}
		time.Sleep(time.Second)
	}
}

func (c *cluster) startEtcd() error {
	if err := c.start("etcd", filepath.Join(c.paths.envtest, "etcd"), "--data-dir="+c.etcdData,
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--unsafe-no-fsync"); err != nil {
		return err
	}
	return poll(3*time.Minute, "etcd /health", func() (bool, error) {
		resp, err := http.Get("http://127.0.0.1:2379/health")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
}

func (c *cluster) startAPIServer() error { return c.startAPIServerAs("kube-apiserver") }

func (c *cluster) startAPIServerAs(name string) error {
	d := c.dir
	return c.start(name, filepath.Join(c.paths.envtest, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--secure-port=443", "--advertise-address="+hostIP,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--tls-cert-file="+d+"/apiserver.crt", "--tls-private-key-file="+d+"/apiserver.key",
		"--client-ca-file="+d+"/ca.crt", "--token-auth-file="+d+"/tokens.csv",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+d+"/sa.pub", "--service-account-signing-key-file="+d+"/sa.key",
		// No kube-proxy: webhooks and aggregated APIs by endpoint IP.
		"--enable-aggregator-routing=true",
		// The kubelet (logs, exec) by the node's address: the host's
		// namespace cannot resolve the node's name, which it tries first.
		"--kubelet-preferred-address-types=InternalIP",
		// API Priority and Fairness only slows the first start under TCG.
		"--enable-priority-and-fairness=false",
		"--profiling=false")
}

// dead names a component that has exited: no use waiting for it then.
func (c *cluster) dead() error {
	for i, done := range c.exited {
		select {
		case <-done:
			return fmt.Errorf("%w: %s exited (%v); its log ends:\n%s", errGaveUp, c.names[i], c.procs[i].ProcessState, tailLines(readFile(filepath.Join(c.logs, c.names[i]+".log")), 15))
		default:
		}
	}
	return nil
}

var errGaveUp = errors.New("gave up")

func readFile(f string) string {
	b, _ := os.ReadFile(f)
	return string(b)
}

// waitAPIServerRestarting waits for the API server as waitAPIServer does,
// starting it again (twice at most) when it exits on its way up, as
// systemd or the kubelet would on a real node: on a loaded host under TCG
// its post-start hooks can overrun their one-minute bounds (the service IP
// repair, the system PriorityClasses), and a second start, on etcd's data
// from the first, is quicker.
func (c *cluster) waitAPIServerRestarting(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for starts := 1; ; starts++ {
		err := c.waitAPIServer(time.Until(deadline))
		i := c.index("kube-apiserver")
		if err == nil || i < 0 || starts == 3 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-c.exited[i]:
		default:
			return err // not its exit
		}
		c.t.Logf("node: kube-apiserver exited on its way up (%v); starting it again", c.procs[i].ProcessState)
		c.forget(i)
		if err := c.startAPIServerAs(fmt.Sprintf("kube-apiserver-%d", starts+1)); err != nil {
			return err
		}
	}
}

// index is the position of the last component whose name starts with
// prefix, or -1.
func (c *cluster) index(prefix string) int {
	i := -1
	for j, n := range c.names {
		if strings.HasPrefix(n, prefix) {
			i = j
		}
	}
	return i
}

// forget drops a component that has exited from the ones dead() and
// stop() watch.
func (c *cluster) forget(i int) {
	c.procs = append(c.procs[:i:i], c.procs[i+1:]...)
	c.names = append(c.names[:i:i], c.names[i+1:]...)
	c.exited = append(c.exited[:i:i], c.exited[i+1:]...)
}

func (c *cluster) waitAPIServer(timeout time.Duration) error {
	return poll(timeout, "kube-apiserver /readyz", func() (bool, error) {
		if err := c.dead(); err != nil {
			return false, err
		}
		body, err := c.cs.RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, body)
		}
		return true, nil
	})
}

func (c *cluster) startControllers() error {
	kube := filepath.Join(c.paths.node, "bin", "kube")
	admin := filepath.Join(c.dir, "admin.kubeconfig")
	if err := c.start("kube-controller-manager", kube, "kube-controller-manager", "--kubeconfig="+admin,
		"--authentication-kubeconfig="+admin, "--authorization-kubeconfig="+admin,
		"--service-account-private-key-file="+c.dir+"/sa.key", "--root-ca-file="+c.dir+"/ca.crt",
		"--use-service-account-credentials=false", "--leader-elect=false", "--bind-address=127.0.0.1"); err != nil {
		return err
	}
	return c.start("kube-scheduler", kube, "kube-scheduler", "--kubeconfig="+admin,
		"--authentication-kubeconfig="+admin, "--authorization-kubeconfig="+admin,
		"--leader-elect=false", "--bind-address=127.0.0.1")
}

// containerdConfig: CRI with runc (no pivot_root: the guest's root is the
// initramfs), the native snapshotter (no overlay module needed; the
// images are small), Debian's CNI plugins and the local pause image.
func (c *cluster) containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'native'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '%s'
  [plugins.'io.containerd.cri.v1.runtime']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '%s'
          NoPivotRoot = true
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['%s']
      conf_dir = '/etc/cni/net.d'
`, pauseImage, filepath.Join(c.paths.node, "bin", "runc"), filepath.Join(c.paths.node, "cni"))
}

const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + podCIDR + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`

func (c *cluster) startContainerd() error {
	if err := os.WriteFile("/etc/cni/net.d/10-e2e.conflist", []byte(cniConfig), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(c.dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(c.containerdConfig()), 0o644); err != nil {
		return err
	}
	return c.start("containerd", filepath.Join(c.paths.node, "bin", "containerd"), "--config", cfg)
}

func (c *cluster) waitContainerd() error {
	return poll(10*time.Minute, "containerd socket", func() (bool, error) {
		out, err := c.ctr("version")
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, out)
		}
		return true, nil
	})
}

func (c *cluster) ctr(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.paths.node, "bin", "ctr"), append([]string{"--address", "/run/containerd/containerd.sock", "--namespace", "k8s.io"}, args...)...)
	cmd.Env = append(os.Environ(), "CONTAINERD_SNAPSHOTTER=native")
	return cmd.CombinedOutput()
}

// importImages loads the tarballs into the namespace the CRI uses. --local
// unpacks in ctr for the native snapshotter: the transfer service unpacks
// only for the snapshotters its config names, overlayfs by default.
func (c *cluster) importImages() error {
	for _, f := range []string{"pause.tar", "gofit.tar", "service.tar", "plain.tar"} {
		if out, err := c.ctr("images", "import", "--local", "--snapshotter", "native", filepath.Join(c.paths.images, f)); err != nil {
			return fmt.Errorf("ctr images import %s: %w: %s", f, err, out)
		}
	}
	out, err := c.ctr("images", "list", "-q")
	if err != nil {
		return err
	}
	for _, want := range []string{pauseImage, gofitImage, serviceImage, plainImage} {
		if !bytes.Contains(out, []byte(want)) {
			return fmt.Errorf("after import, containerd has no %s; it has:\n%s", want, out)
		}
	}
	return nil
}

// kubeletConfig is the kubelet's configuration file; phases append to it
// (restartKubelet). The MemoryQoS settings are the kubelet's defaults.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: /etc/kubernetes/manifests
fileCheckFrequency: 5s
# The API server reaches the kubelet without client certificates here
# (logs, exec); the VM has no other users.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
failSwapOn: false
resolvConf: /etc/resolv.conf
# The node's filesystems are tmpfs: no disk-based eviction or ephemeral
# storage accounting.
localStorageCapacityIsolation: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

func (c *cluster) startKubelet() error { return c.startKubeletAs("kubelet", "") }

func (c *cluster) startKubeletAs(name, extra string) error {
	cfg := filepath.Join(c.dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig+extra), 0o644); err != nil {
		return err
	}
	return c.start(name, filepath.Join(c.paths.node, "bin", "kube"), "kubelet", "--config="+cfg,
		"--kubeconfig="+filepath.Join(c.dir, "kubelet.kubeconfig"), "--hostname-override="+nodeName,
		"--node-ip="+nodeIP, "--root-dir=/var/lib/kubelet", "--v=1")
}

// restartKubelet stops the kubelet (its pods keep running under
// containerd), starts it again with extra appended to its configuration,
// its log in kubelet-N.log, and waits for the node to be Ready again.
func (c *cluster) restartKubelet(extra string) error {
	i := c.index("kubelet")
	if i < 0 {
		return errors.New("no kubelet running")
	}
	syscall.Kill(-c.procs[i].Process.Pid, syscall.SIGTERM)
	select {
	case <-c.exited[i]:
	case <-time.After(30 * time.Second):
		syscall.Kill(-c.procs[i].Process.Pid, syscall.SIGKILL)
		<-c.exited[i]
	}
	c.forget(i)
	name := fmt.Sprintf("kubelet-%d", len(c.names))
	if err := c.startKubeletAs(name, extra); err != nil {
		return err
	}
	// Ready may still be the old kubelet's: wait for the new one's
	// heartbeat first.
	since := time.Now()
	err := poll(5*time.Minute, "the restarted kubelet's heartbeat", func() (bool, error) {
		cond, err := c.nodeReady()
		if err != nil {
			return false, err
		}
		return cond.LastHeartbeatTime.After(since) && cond.Status == corev1.ConditionTrue, fmt.Errorf("Ready=%s, heartbeat %v", cond.Status, cond.LastHeartbeatTime)
	})
	if err != nil {
		return err
	}
	return c.waitNodeReady(5 * time.Minute)
}

func (c *cluster) waitNodeReady(timeout time.Duration) error {
	return poll(timeout, "node "+nodeName+" Ready", func() (bool, error) {
		cond, err := c.nodeReady()
		if err != nil {
			return false, err
		}
		return cond.Status == corev1.ConditionTrue, fmt.Errorf("Ready=%s: %s", cond.Status, cond.Message)
	})
}

// nodeReady is the node's Ready condition; an error once the cluster's
// processes died, or while the node has none.
func (c *cluster) nodeReady() (corev1.NodeCondition, error) {
	if err := c.dead(); err != nil {
		return corev1.NodeCondition{}, err
	}
	n, err := c.cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		return corev1.NodeCondition{}, err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond, nil
		}
	}
	return corev1.NodeCondition{}, errors.New("no Ready condition yet")
}

// run runs kubectl with args and returns stdout and stderr apart: the
// webhook's warnings arrive on stderr.
func (c *cluster) run(args ...string) (stdout, stderr string, err error) {
	argv := append(append([]string{}, c.kubectl...), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, e.String())
	}
	return o.String(), e.String(), err
}

// httpGet fetches a URL with a short timeout.
func httpGet(url string) (string, error) {
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}
