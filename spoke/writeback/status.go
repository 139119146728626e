package writeback

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/source/kube"
)

// Retry backoff of failed status updates, per ServiceExport.
const (
	statusRetryBase = 500 * time.Millisecond
	statusRetryMax  = 5 * time.Minute
)

// statusWriter keeps the MCS conditions of ServiceExports true: Valid to
// what the shard builder does with them, Conflict and Ready to what the
// clusterset's import of the service says. One worker writes, so that a
// slow API server delays status, never the shard; the work queue gives
// each export at most one write in flight and backs off on errors.
type statusWriter struct {
	in        kube.Tables
	opts      normalize.Options
	clock     clock.PassiveClock
	log       *slog.Logger
	retryBase time.Duration

	mu sync.Mutex
	// client and queue are set by start, when the cluster serves
	// ServiceExports; the exports to check wait in pending until then.
	client  ExportsAPI
	queue   workqueue.TypedRateLimitingInterface[string]
	pending map[string]struct{}

	// rej, when set, holds the objects the shard builder rejects: a
	// service with some is not Valid as it is.
	rej *rejections
	// imports, when set, has the clusterset's imports: the Conflict and
	// Ready conditions come from the import of the export's service.
	imports *imports.Store
	// synced, when set, is told the outcome of each check (tests).
	synced func(key string, updated bool, err error)
}

func newStatusWriter(in kube.Tables, opts normalize.Options, clk clock.PassiveClock, retryBase time.Duration, log *slog.Logger) *statusWriter {
	return &statusWriter{in: in, opts: opts, clock: clk, log: log, retryBase: retryBase, pending: map[string]struct{}{}}
}

// start makes the writer write through client, and returns its queue,
// which holds the exports that waited.
func (w *statusWriter) start(client ExportsAPI) workqueue.TypedRateLimitingInterface[string] {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.client = client
	w.queue = workqueue.NewTypedRateLimitingQueue(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](w.retryBase, statusRetryMax))
	for k := range w.pending {
		w.queue.Add(k)
	}
	w.pending = nil
	return w.queue
}

// add schedules a check of the export key.
func (w *statusWriter) add(key string) {
	w.mu.Lock()
	q := w.queue
	if q == nil {
		w.pending[key] = struct{}{}
	}
	w.mu.Unlock()
	if q != nil {
		q.Add(key)
	}
}

// enqueue schedules a check of the ServiceExports that changes may have
// made valid or invalid: those named by a Service or ServiceExport change.
func (w *statusWriter) enqueue(changes []normalize.Change) {
	for _, c := range changes {
		if c.Kind != normalize.KindService && c.Kind != normalize.KindServiceExport {
			continue
		}
		w.enqueueService(c.Namespace + "/" + c.Name)
	}
}

// enqueueService schedules a check of the ServiceExport of a service, if
// it has one.
func (w *statusWriter) enqueueService(key string) {
	ns, name, _ := strings.Cut(key, "/")
	if _, ok := w.in.ServiceExport(ns, name); ok {
		w.add(key)
	}
}

// run checks queued exports until ctx ends and the queue is shut down.
// It follows start.
func (w *statusWriter) run(ctx context.Context) {
	for {
		key, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		updated, err := w.sync(ctx, key)
		switch {
		case err == nil:
			w.queue.Forget(key)
		case ctx.Err() != nil:
		case apierrors.IsConflict(err): // the informer is about to deliver the newer object
			w.log.Debug("ServiceExport changed under its status update; retrying", "service_export", key, "err", err)
			w.queue.AddRateLimited(key)
		default:
			w.log.Warn("cannot set ServiceExport status; retrying", "service_export", key, "err", err)
			w.queue.AddRateLimited(key)
		}
		w.queue.Done(key)
		if w.synced != nil {
			w.synced(key, updated, err)
		}
	}
}

// sync writes the Valid condition of one export when it differs from the
// cached object's. It reports whether it wrote.
func (w *statusWriter) sync(ctx context.Context, key string) (bool, error) {
	ns, name, _ := strings.Cut(key, "/")
	se, ok := w.in.ServiceExport(ns, name)
	if !ok || se.DeletionTimestamp != nil {
		return false, nil
	}
	_, status, _ := normalize.Service(w.in, w.opts, se.Namespace, se.Name)
	if w.rej != nil {
		// The shard builder's word, which says whether it keeps a last
		// good version; a Service it has yet to see is rejected above.
		if st, ok := w.rej.validStatus(key); ok {
			status = st
		}
	}
	now := w.clock.Now()
	var want []metav1.Condition
	if c, ok := validCondition(status, se.Generation, now); ok {
		want = append(want, c)
	}
	if w.imports != nil {
		// Before a hub has sent a set, the conditions stay as they are: a
		// restarted spoke does not flap what the last one wrote.
		if set, _ := w.imports.Current(); set != nil {
			im, ok := set.Import(key)
			ok = ok && im.GetMcs() // a mesh spoke's set has every federated service
			want = append(want, readyCondition(im, ok, w.opts.ClusterID, se.Generation, now))
			if ok {
				want = append(want, conflictCondition(im, se.Generation, now))
			}
		}
	}
	want = slices.DeleteFunc(want, func(c metav1.Condition) bool {
		cur := meta.FindStatusCondition(se.Status.Conditions, c.Type)
		return cur != nil && cur.Status == c.Status && cur.Reason == c.Reason && cur.Message == c.Message &&
			cur.ObservedGeneration == c.ObservedGeneration
	})
	if len(want) == 0 {
		return false, nil
	}
	// The cached object lacks spec, labels and annotations: a status
	// update ignores everything but the status, which is kept whole.
	se = se.DeepCopy()
	for _, c := range want {
		meta.SetStatusCondition(&se.Status.Conditions, c)
	}
	_, err := w.client.UpdateStatus(ctx, se)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil // deleted meanwhile
	case err != nil:
		return false, fmt.Errorf("service export %s: update status: %w", key, err)
	}
	w.log.Debug("ServiceExport status set", "service_export", key, "conditions", len(want), "type", want[0].Type, "status", want[0].Status, "reason", want[0].Reason)
	return true, nil
}

// validCondition returns the MCS Valid condition for an export's status,
// and false when normalization says nothing about it.
func validCondition(st normalize.ExportStatus, generation int64, now time.Time) (metav1.Condition, bool) {
	c := metav1.Condition{
		Type:               string(mcsv1beta1.ServiceExportConditionValid),
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	switch {
	case st.Exported:
		c.Status = metav1.ConditionTrue
		c.Reason = string(mcsv1beta1.ServiceExportReasonValid)
		c.Message = "the service is exported"
	case st.Reason != "":
		c.Status = metav1.ConditionFalse
		c.Reason = st.Reason
		c.Message = st.Message
	default:
		return metav1.Condition{}, false
	}
	return c, true
}

// readyCondition returns the MCS Ready condition of this cluster's export
// of an import (ok: the set has the import): True once every member
// cluster imports the service from this cluster (the hub lists it in the
// import's ready clusters), else Pending.
func readyCondition(im *federationpb.Import, ok bool, cluster string, generation int64, now time.Time) metav1.Condition {
	c := metav1.Condition{
		Type:               string(mcsv1beta1.ServiceExportConditionReady),
		Status:             metav1.ConditionFalse,
		Reason:             string(mcsv1beta1.ServiceExportReasonPending),
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	switch {
	case !ok:
		c.Message = "the clusterset does not import the service yet"
	case slices.Contains(im.GetReady(), cluster):
		c.Status = metav1.ConditionTrue
		c.Reason = string(mcsv1beta1.ServiceExportReasonReady)
		c.Message = "every member cluster imports the service from this cluster"
	default:
		c.Message = "not every member cluster imports the service from this cluster yet"
	}
	return c
}

// conflictCondition returns the MCS Conflict condition of an export of an
// import: True with the first conflict's reason and every conflict's
// message, or False.
func conflictCondition(im *federationpb.Import, generation int64, now time.Time) metav1.Condition {
	c := metav1.Condition{
		Type:               string(mcsv1beta1.ServiceExportConditionConflict),
		Status:             metav1.ConditionFalse,
		Reason:             string(mcsv1beta1.ServiceExportReasonNoConflicts),
		Message:            "the exports of the service agree",
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	if conflicts := im.GetConflicts(); len(conflicts) > 0 {
		msgs := make([]string, len(conflicts))
		for i, x := range conflicts {
			msgs[i] = x.GetMessage()
		}
		c.Status = metav1.ConditionTrue
		c.Reason = conflicts[0].GetReason()
		c.Message = strings.Join(msgs, "; ")
	}
	return c
}

// followImports schedules a check of the exports whose import a new set
// of the store changes, until ctx ends.
func (w *statusWriter) followImports(ctx context.Context) {
	var prev *imports.Set
	for {
		set, changed := w.imports.Current()
		if set != nil && set != prev {
			if prev == nil {
				for _, k := range w.in.ServiceExportKeys() {
					w.add(k)
				}
			} else {
				set.Changed(prev, w.enqueueService)
			}
			prev = set
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
