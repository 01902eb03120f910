package rightsize

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/fleet"
	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// world is a namespace on a real API server with Deployments and their
// pods as a kubelet would have them (scheduled, ready); no
// controller-manager runs, so pods stay as the test makes them.
type world struct {
	t   *testing.T
	ctx context.Context
	cs  kubernetes.Interface
	ns  string
}

func (w *world) deployment(name string, annotations map[string]string, pods int) *appsv1.Deployment {
	w.t.Helper()
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "shop/web:1", Resources: res,
		Env: []corev1.EnvVar{{Name: "GOMAXPROCS", Value: "2"}}}}}
	n := int32(pods)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: spec}}}
	d, err := w.cs.AppsV1().Deployments(w.ns).Create(w.ctx, d, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	// Rolled out, as the controller-manager would say.
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n}
	if d, err = w.cs.AppsV1().Deployments(w.ns).UpdateStatus(w.ctx, d, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	for i := range pods {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: w.ns, Labels: map[string]string{"app": name}},
			Spec: *spec.DeepCopy()}
		p.Spec.NodeName = fmt.Sprintf("node-%d", i%2)
		p, err := w.cs.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
		if err != nil {
			w.t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, Resources: res.DeepCopy()}}
		if _, err := w.cs.CoreV1().Pods(w.ns).UpdateStatus(w.ctx, p, metav1.UpdateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
	return d
}

// kubelet does what a kubelet does with a resize: the container's status
// takes the spec's resources.
func (w *world) kubelet(name string) {
	w.t.Helper()
	p := w.pod(name)
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Resources = p.Spec.Containers[i].Resources.DeepCopy()
	}
	if _, err := w.cs.CoreV1().Pods(w.ns).UpdateStatus(w.ctx, p, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) pod(name string) *corev1.Pod {
	w.t.Helper()
	p, err := w.cs.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

func (w *world) status(name string) Status {
	w.t.Helper()
	d, err := w.cs.AppsV1().Deployments(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if _, ok := d.Annotations[KeyStatus]; ok {
		w.t.Errorf("the status was written on the Deployment: %v", d.Annotations)
	}
	l, err := w.cs.CoordinationV1().Leases(w.ns).Get(w.ctx, LeaseName(name), metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != d.UID {
		w.t.Errorf("status Lease owners %v, want the Deployment", l.OwnerReferences)
	}
	st, err := StatusOf(l, d)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// events are the reasons of the Events on a Deployment, oldest first.
func (w *world) events(name string) []string {
	w.t.Helper()
	l, err := w.cs.CoreV1().Events(w.ns).List(w.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		w.t.Fatal(err)
	}
	slices.SortFunc(l.Items, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
	var out []string
	for _, e := range l.Items {
		out = append(out, e.Reason)
	}
	slices.Sort(out)
	return out
}

func resourcesString(c corev1.Container) string {
	return fmt.Sprintf("%s/%s %s/%s", c.Resources.Requests.Cpu(), c.Resources.Limits.Cpu(), c.Resources.Requests.Memory(), c.Resources.Limits.Memory())
}

// TestControllerOnARealAPIServer walks an opted-in Deployment through a
// trial on one of its four pods (resized in place), harm and rollback,
// the back-off, a second trial and promotion, and checks that a workload
// that did not opt in is never touched.
func TestControllerOnARealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the API server test in -short mode")
	}
	cfg := kubetest.Start(t, nil)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	// The controller runs as deploy/rightsize's account, with its Role
	// in default and nothing else: what it does, it has the rights for.
	w := &world{t: t, ctx: ctx, cs: cs, ns: "default"}
	applyRBAC(t, ctx, cs, filepath.Join("..", "..", "..", "..", "deploy", "rightsize", "rightsize.yaml"))
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:gofit-system:gofit-rightsize"}
	asSA := kubernetes.NewForConfigOrDie(as)
	for _, n := range []string{"node-0", "node-1"} {
		// The resize subresource's admission reads the pod's node.
		node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}
		node.Status.Capacity = node.Status.Allocatable
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.deployment("web", map[string]string{KeyMode: "auto"}, 4)
	w.deployment("other", nil, 2)
	w.deployment("typo", map[string]string{KeyMode: "automatic"}, 2)
	// Opted in, but its pods run a webhook experiment: a trial would
	// take over their arm labels.
	w.deployment("exp", map[string]string{KeyMode: "auto"}, 2)
	for _, name := range []string{"exp-0", "exp-1"} {
		p := w.pod(name)
		p.Labels[admission.LabelExperiment], p.Labels[admission.LabelArm] = "gmp", "fitted"
		if _, err := cs.CoreV1().Pods(w.ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	now := t0
	var judgement *Judgement
	var planned []string
	out := t.TempDir()
	c := &Controller{Client: asSA, Namespaces: []string{"default"}, Policy: DefaultPolicy(), Files: out, Identity: "test", Now: func() time.Time { return now },
		Plan: func(_ context.Context, d *appsv1.Deployment, floor float64) (Plan, error) {
			planned = append(planned, d.Name)
			return PlanFrom(fleet.Workload{Namespace: d.Namespace, Kind: "Deployment", Name: d.Name}, []fleet.Container{unfittedOf(d.Namespace, d.Name)}, floor), nil
		},
		Judge: func(context.Context, *appsv1.Deployment, Status) (*Judgement, error) { return judgement, nil },
	}
	look := func(want Kind) Outcome {
		t.Helper()
		outs, err := c.Once(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var web *Outcome
		for i, o := range outs {
			switch o.Workload {
			case "default/Deployment/web":
				web = &outs[i]
			case "default/Deployment/typo":
				if o.Err == nil || !strings.Contains(o.Err.Error(), `gofit.dev/rightsize: "automatic" is not a mode`) {
					t.Errorf("typo: %+v, want an error naming the annotation and value", o)
				}
			case "default/Deployment/exp":
				if o.Err != nil || (o.Action.Kind != Wait && o.Action.Kind != None) || (o.Action.Kind == Wait && !strings.Contains(o.Action.Why, "in experiment gmp")) {
					t.Errorf("exp: %+v, want a wait: its pods are in experiment gmp", o)
				}
			default:
				t.Errorf("a look touched %s: %+v", o.Workload, o)
			}
		}
		if web == nil {
			t.Fatalf("no outcome for web in %+v", outs)
		}
		if web.Err != nil || web.Action.Kind != want {
			t.Fatalf("web: %s (%s), error %v; want %s", web.Action.Kind, web.Action.Why, web.Err, want)
		}
		return *web
	}

	// 1. A trial on one pod, resized in place; every ready pod labelled.
	o := look(StartTrial)
	if len(o.Action.Pods) != 1 {
		t.Fatalf("trial pods %v, want 1 of 4", o.Action.Pods)
	}
	trial := o.Action.Pods[0]
	for i := range 4 {
		p := w.pod(fmt.Sprintf("web-%d", i))
		arm, res := p.Labels[admission.LabelArm], resourcesString(p.Spec.Containers[0])
		if p.Name == trial {
			if arm != ArmPlan || res != "300m/300m 32Mi/32Mi" {
				t.Errorf("trial pod %s: arm %q, resources %s; want plan, 300m/300m 32Mi/32Mi", p.Name, arm, res)
			}
		} else if arm != ArmControl || res != "250m/250m 128Mi/128Mi" {
			t.Errorf("control pod %s: arm %q, resources %s", p.Name, arm, res)
		}
		if p.Labels[admission.LabelExperiment] != Experiment {
			t.Errorf("pod %s: experiment label %q", p.Name, p.Labels[admission.LabelExperiment])
		}
	}
	if st := w.status("web"); st.Phase != Trialling || !slices.Equal(st.Pods, []string{trial}) {
		t.Errorf("status %+v", st)
	}
	for _, name := range []string{"other-0", "typo-0", "exp-0"} {
		p := w.pod(name)
		if want := map[bool]int{true: 3, false: 1}[name == "exp-0"]; len(p.Labels) != want || resourcesString(p.Spec.Containers[0]) != "250m/250m 128Mi/128Mi" {
			t.Errorf("%s touched: labels %v, resources %s", name, p.Labels, resourcesString(p.Spec.Containers[0]))
		}
	}
	if p := w.pod("exp-0"); p.Labels[admission.LabelExperiment] != "gmp" || p.Labels[admission.LabelArm] != "fitted" {
		t.Errorf("exp-0's experiment labels changed: %v", p.Labels)
	}

	// 2. The trial keeps its plan: no plan is computed during it.
	planned = nil
	now = now.Add(10 * time.Minute)
	look(Wait)
	if slices.Contains(planned, "web") {
		t.Errorf("planned %v during web's trial", planned)
	}

	// 3. Harm: the trial's pod is resized back and every label removed.
	judgement = &Judgement{Harmful: true, Reasons: []string{"restarts 4 vs 0"}}
	now = now.Add(10 * time.Minute)
	look(Rollback)
	for i := range 4 {
		p := w.pod(fmt.Sprintf("web-%d", i))
		if _, ok := p.Labels[admission.LabelArm]; ok || resourcesString(p.Spec.Containers[0]) != "250m/250m 128Mi/128Mi" {
			t.Errorf("after the rollback, %s: labels %v, resources %s", p.Name, p.Labels, resourcesString(p.Spec.Containers[0]))
		}
	}
	if st := w.status("web"); st.Phase != Stopped || !strings.Contains(st.Reason, "restarts 4 vs 0") {
		t.Errorf("status after harm %+v", st)
	}
	judgement = nil
	now = now.Add(time.Hour)
	look(Wait)

	// 4. After the back-off, a second trial, judged good but never
	// applied by a kubelet, is not promoted.
	now = now.Add(c.Policy.Backoff)
	look(StartTrial)
	now = now.Add(c.Policy.Duration)
	judgement = &Judgement{Promote: true, Reasons: []string{"p99_seconds same", "cpu_seconds_per_request better"}}
	if o := look(EndTrial); !strings.Contains(o.Action.Why, "had not applied the resize") {
		t.Errorf("end of a trial never applied: %s", o.Action.Why)
	}

	// Up to the promotion, nothing wrote the Deployment: its generation
	// (which annotations bump, and GitOps tools watch) is its first.
	if d, err := cs.AppsV1().Deployments(w.ns).Get(ctx, "web", metav1.GetOptions{}); err != nil || d.Generation != 1 {
		t.Errorf("web's generation before the promotion: %v (%v), want 1", d.Generation, err)
	}

	// 5. One the kubelet applied is promoted.
	now = now.Add(c.Policy.Backoff)
	judgement = nil
	o = look(StartTrial)
	w.kubelet(o.Action.Pods[0])
	now = now.Add(c.Policy.Duration)
	judgement = &Judgement{Promote: true, Reasons: []string{"p99_seconds same", "cpu_seconds_per_request better"}}
	look(Promote)
	for i := range 4 {
		if p := w.pod(fmt.Sprintf("web-%d", i)); p.Labels[admission.LabelArm] != "" {
			t.Errorf("after the promotion, %s keeps its arm label %q", p.Name, p.Labels[admission.LabelArm])
		}
	}
	d, err := cs.AppsV1().Deployments(w.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if res := resourcesString(ctr); res != "300m/300m 32Mi/32Mi" {
		t.Errorf("promoted template resources %s", res)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	if env["GOMAXPROCS"] != "1" || env["GOMEMLIMIT"] != fmt.Sprint(24*mib) {
		t.Errorf("promoted template env %v, want GOMAXPROCS=1 and GOMEMLIMIT", env)
	}
	if st := w.status("web"); st.Phase != Promoted {
		t.Errorf("status after promotion %+v", st)
	}
	b, err := os.ReadFile(filepath.Join(out, "default.deployment.web.rightsize.yaml"))
	if err != nil || !strings.Contains(string(b), "kubectl patch deployment web -n default --type strategic") {
		t.Errorf("promotion file: %v\n%s", err, b)
	}
	// Written as every gofit report is (lab/report.WriteAtomic): readable
	// by the team that applies it, no temporary file left beside it.
	if fi, err := os.Stat(filepath.Join(out, "default.deployment.web.rightsize.yaml")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o644 {
		t.Errorf("promotion file's mode %v, want 0644", fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(out, ".*")); len(left) > 0 {
		t.Errorf("temporary files left in --out: %v", left)
	}
	look(None)

	want := []string{"RightsizePromoted", "RightsizeRolledBack", "RightsizeTrialEnded", "RightsizeTrialStarted", "RightsizeTrialStarted", "RightsizeTrialStarted"}
	if got := w.events("web"); !slices.Equal(got, want) {
		t.Errorf("events on web %v, want %v", got, want)
	}
	if got := w.events("other"); len(got) > 0 {
		t.Errorf("events on a workload not opted in: %v", got)
	}
	if got := w.events("typo"); len(got) == 0 || got[0] != "RightsizeInvalid" {
		t.Errorf("events on typo %v, want RightsizeInvalid", got)
	}

	// A status nobody can read is an error naming the annotation, and
	// the look leaves the workload alone.
	l, err := cs.CoordinationV1().Leases(w.ns).Get(ctx, LeaseName("web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[KeyStatus] = "{"
	if _, err := cs.CoordinationV1().Leases(w.ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	outs, err := c.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if o.Workload == "default/Deployment/web" && (o.Err == nil || !strings.Contains(o.Err.Error(), KeyStatus) || o.Action.Kind != "") {
			t.Errorf("web with an unreadable status: %+v, want an error naming %s and no action", o, KeyStatus)
		}
	}
}

// unfittedOf is unfitted() for another workload.
func unfittedOf(ns, name string) fleet.Container {
	c := unfitted()
	c.Workload.Namespace, c.Workload.Name = ns, name
	return c
}

// applyRBAC creates the Roles and RoleBindings of a manifest (and the
// namespaces their subjects live in).
func applyRBAC(t *testing.T, ctx context.Context, cs kubernetes.Interface, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch meta.Kind {
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if _, err := cs.RbacV1().Roles(r.Namespace).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			n++
		case "RoleBinding":
			var r rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if _, err := cs.RbacV1().RoleBindings(r.Namespace).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%s: %d Roles and RoleBindings, want 2", path, n)
	}
}
