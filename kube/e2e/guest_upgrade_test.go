package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/memqos"
)

// previousChart is the chart as it was at 5b7c727 (kube/chart's
// TestHelmUpgradeFromPrevious says how it was made), in the share.
const previousChart = "/src/kube/chart/testdata/gofit-5b7c727.tgz"

// chartUpgrade installs the previous chart as its docs said, then upgrades
// it to this chart as docs/install.md says (helm upgrade
// --reset-then-reuse-values) and rolls it back, while a sampler reads
// every owner pod's and container's memory.min and memory.low every
// 250 ms: no value may fall below what it held before the upgrade, during
// either step (issue 43 item 4). The agent's DaemonSet rolls in both; an
// agent that took a rolling update for an uninstall, or a chart that
// moved or deleted the DaemonSet, would reset them to 0.
func (g *guestRun) chartUpgrade(t *testing.T) {
	// helm-uninstall left the namespace Helm made; the previous chart
	// makes its namespaces itself.
	for _, ns := range []string{"gofit-system", "gofit-node"} {
		g.c.run("delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=3m")
	}
	pods := g.ownerPods(t)
	defer g.c.run("delete", "pod", "-n", ownersNS, "--all", "--wait=true", "--timeout=3m")
	// The previous chart reads gofit-node/slo-controller-config and makes
	// none; this image's agent takes a missing ConfigMap for a bad one
	// (issue 51) where the previous agent ran on the defaults. An empty
	// one, made once the chart has made the namespace, is those defaults.
	out, err := g.helm("install", "gofit", previousChart, "-n", "gofit-system", "--create-namespace",
		"--set", "image.tag=e2e", "--set", "image.pullPolicy=Never",
		"--set-json", `node.extraArgs=["--kubelet-memory-qos=tiered"]`)
	t.Logf("helm install (the previous chart): %s", tailLines(out, 5))
	if err != nil {
		g.describe(t, "gofit-node")
		t.Fatal(err)
	}
	if _, _, err := g.c.run("create", "configmap", "slo-controller-config", "-n", "gofit-node"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		out, err := g.helm("uninstall", "gofit", "-n", "gofit-system", "--wait", "--timeout", "5m")
		t.Logf("helm uninstall: %s %v", strings.TrimSpace(out), err)
	}()
	g.agentNS = "gofit-node"
	g.waitDaemonSet(t, "gofit-node", "gofit-node")
	g.settled(t)
	// What the sampler watches: the files that held protection before.
	type file struct{ dir, name string }
	base := map[file]int64{}
	for _, l := range g.levels(pods) {
		if l.level < memqos.LevelPod {
			continue
		}
		for _, f := range []string{memqos.FileMin, memqos.FileLow} {
			if v := num(readValue(t, l.dir, f)); v > 0 {
				base[file{l.dir, f}] = v
				t.Logf("before: %s %s = %d", l.name, f, v)
			}
		}
	}
	if len(base) == 0 {
		t.Fatal("no owner pod holds a memory.min or memory.low: nothing to watch")
	}
	var mu sync.Mutex
	var drops []string
	samples := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			mu.Lock()
			samples++
			for f, want := range base {
				b, err := os.ReadFile(filepath.Join(f.dir, f.name))
				if v := num(strings.TrimSpace(string(b))); (err != nil || v < want) && len(drops) < 20 {
					drops = append(drops, fmt.Sprintf("%s %s/%s = %d (%v), was %d", time.Now().Format("15:04:05.000"), f.dir, f.name, v, err, want))
				}
			}
			mu.Unlock()
		}
	})
	dsUID := func() string {
		ds, err := g.c.cs.AppsV1().DaemonSets("gofit-node").Get(g.ctx, "gofit-node", metav1.GetOptions{})
		if err != nil {
			return "none: " + err.Error()
		}
		return string(ds.UID)
	}
	uid0 := dsUID()
	start := time.Now()
	// As the chart's upgrade check says when that ConfigMap exists: keep
	// reading it.
	out, err = g.helm("upgrade", "gofit", "/src/charts/gofit", "-n", "gofit-system", "--reset-then-reuse-values", "--wait", "--timeout", "10m",
		"--set", "node.qosConfig.name=slo-controller-config")
	t.Logf("helm upgrade (%.0fs): %s", time.Since(start).Seconds(), tailLines(out, 3))
	if err == nil {
		g.waitDaemonSet(t, "gofit-node", "gofit-node")
		t.Logf("after the upgrade: DaemonSet UID %s (was %s)", dsUID(), uid0)
		start = time.Now()
		out, err = g.helm("rollback", "gofit", "1", "-n", "gofit-system", "--wait", "--timeout", "10m")
		t.Logf("helm rollback (%.0fs): %s", time.Since(start).Seconds(), tailLines(out, 3))
		g.waitDaemonSet(t, "gofit-node", "gofit-node")
	}
	// One more agent pass after the last rollout.
	time.Sleep(15 * time.Second)
	close(stop)
	wg.Wait()
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	if u := dsUID(); u != uid0 {
		t.Errorf("the agent's DaemonSet was made again (UID %s, was %s): its agents took that for an uninstall", u, uid0)
	}
	t.Logf("%d samples of %d files through the upgrade and the rollback", samples, len(base))
	for _, d := range drops {
		t.Errorf("protection dropped: %s", d)
	}
}

// waitDaemonSet waits until the DaemonSet's pods are all updated and ready.
func (g *guestRun) waitDaemonSet(t *testing.T, ns, name string) {
	t.Helper()
	err := poll(5*time.Minute, "daemonset "+ns+"/"+name+" rolled out", func() (bool, error) {
		ds, err := g.c.cs.AppsV1().DaemonSets(ns).Get(g.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := ds.Status
		ok := s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberReady == s.DesiredNumberScheduled && s.NumberUnavailable == 0
		return ok, fmt.Errorf("updated %d ready %d of %d", s.UpdatedNumberScheduled, s.NumberReady, s.DesiredNumberScheduled)
	})
	if err != nil {
		g.describe(t, ns)
		t.Fatal(err)
	}
}
