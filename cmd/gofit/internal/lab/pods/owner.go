//go:build !nokube

package pods

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// runOwner is the run's owner: the ConfigMap every object of the run is
// owned by, so deleting it (as close does, and the garbage collector when
// the run was killed) deletes the rest. It keeps a heartbeat on it while
// the run lives, and sweeps away the owners of runs that stopped theirs.
type runOwner struct {
	cs       kubernetes.Interface
	ns       string
	id       string // the run's id: its objects' names and labelRun
	ref      metav1.OwnerReference
	progress io.Writer
	// stopHeartbeat ends the owner's heartbeat (close).
	stopHeartbeat func()
}

// create makes the owner, deletes those of stale runs and starts the
// heartbeat.
func (o *runOwner) create(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gofit-lab-" + o.id, Namespace: o.ns,
		Labels: map[string]string{labelApp: appName, labelRun: o.id}},
		Data: map[string]string{"owner": "gofit lab --kube: deleting this deletes the run's pods"}}
	cm.Annotations = map[string]string{annHeartbeat: time.Now().UTC().Format(time.RFC3339)}
	cm, err := o.cs.CoreV1().ConfigMaps(o.ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("--namespace %s: create the run's owner: %w", o.ns, err)
	}
	o.ref = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
	for _, name := range sweepStale(ctx, o.cs, o.ns, cm.Name, cm.CreationTimestamp.Time) {
		fmt.Fprintf(o.progress, "lab: deleted %s/%s, the owner of a run that stopped renewing its heartbeat (and with it that run's pods)\n", o.ns, name)
	}
	hbCtx, stopHB := context.WithCancel(context.Background())
	o.stopHeartbeat = stopHB
	go o.heartbeat(hbCtx, cm.Name)
	return nil
}

// heartbeat renews the owner's annHeartbeat until ctx ends.
func (o *runOwner) heartbeat(ctx context.Context, name string) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annHeartbeat, time.Now().UTC().Format(time.RFC3339))
		if _, err := o.cs.CoreV1().ConfigMaps(o.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
			fmt.Fprintf(o.progress, "lab: warning: renewing %s/%s's heartbeat: %v (a later run may take this one for dead after %v)\n", o.ns, name, err, staleAfter)
		}
	}
}

// close deletes the owner, and with it (the garbage collector's
// background deletion) every pod of the run; the pods are deleted here
// too so the run does not end with them still on the nodes.
func (o *runOwner) close() error {
	if o.stopHeartbeat != nil {
		o.stopHeartbeat()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	sel := labelRun + "=" + o.id
	if o.id != "" {
		zero := int64(0)
		if err := o.cs.CoreV1().Pods(o.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the run's pods (%s): %w", sel, err))
		}
		bg := metav1.DeletePropagationBackground
		if err := o.cs.CoreV1().ConfigMaps(o.ns).Delete(ctx, "gofit-lab-"+o.id, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the run's owner %s/gofit-lab-%s: %w", o.ns, o.id, err))
		}
	}
	return errors.Join(errs...)
}

// sweepStale deletes the owners of lab runs in ns (but keep) whose
// heartbeat is older than staleAfter at now, in the background, so the
// garbage collector deletes their pods; it returns their names. Both
// times are the API server's, never a run's own clock: now is the
// creation time of this run's owner, and a heartbeat is the latest
// time the server stamped on an owner's managed fields (each renewal
// changes its annotation, and the server stamps the change), so that a
// run on a machine whose clock is behind is not taken for dead.
func sweepStale(ctx context.Context, cs kubernetes.Interface, ns, keep string, now time.Time) []string {
	l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: labelApp + "=" + appName})
	if err != nil {
		return nil
	}
	var out []string
	bg := metav1.DeletePropagationBackground
	for _, cm := range l.Items {
		if cm.Name == keep || cm.Labels[labelRun] == "" {
			continue
		}
		if now.Sub(lastWrite(&cm)) < staleAfter {
			continue
		}
		uid := cm.UID
		if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}}); err == nil {
			out = append(out, cm.Name)
		}
	}
	return out
}

// lastWrite is the latest time the API server stamped on o: its
// creation, or a later write's managed fields.
func lastWrite(o metav1.Object) time.Time {
	t := o.GetCreationTimestamp().Time
	for _, m := range o.GetManagedFields() {
		if m.Time != nil && m.Time.After(t) {
			t = m.Time.Time
		}
	}
	return t
}
