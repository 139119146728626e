package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// fieldManager names the spoke in the ServiceExports' managedFields.
const fieldManager = "meshfed-spoke"

// Retry backoff of failed status updates, per ServiceExport.
const (
	statusRetryBase = 500 * time.Millisecond
	statusRetryMax  = 5 * time.Minute
)

// statusWriter keeps the MCS Valid condition of ServiceExports true to
// what the shard builder does with them. One worker writes, so that a slow
// API server delays status, never the shard; the work queue gives each
// export at most one write in flight and backs off on errors.
type statusWriter struct {
	client ExportsAPI
	in     *caches
	opts   normalize.Options
	clock  clock.PassiveClock
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
	// rej, when set, holds the objects the shard builder rejects: a
	// service with some is not Valid as it is.
	rej *rejections
	// synced, when set, is told the outcome of each check (tests).
	synced func(key string, updated bool, err error)
}

func newStatusWriter(client ExportsAPI, in *caches, opts normalize.Options, clk clock.PassiveClock, retryBase time.Duration, log *slog.Logger) *statusWriter {
	return &statusWriter{
		client: client, in: in, opts: opts, clock: clk, log: log,
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBase, statusRetryMax)),
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
	if _, ok := get[mcsv1alpha1.ServiceExport](w.in.exports, key); ok {
		w.queue.Add(key)
	}
}

// run checks queued exports until ctx ends and the queue is shut down.
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
	se, ok := get[mcsv1alpha1.ServiceExport](w.in.exports, key)
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
	want, ok := validCondition(status, se.Generation, w.clock.Now())
	if !ok {
		return false, nil
	}
	if cur := meta.FindStatusCondition(se.Status.Conditions, want.Type); cur != nil &&
		cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message &&
		cur.ObservedGeneration == want.ObservedGeneration {
		return false, nil
	}
	// The cached object lacks spec, labels and annotations: a status
	// update ignores everything but the status, which is kept whole.
	se = se.DeepCopy()
	meta.SetStatusCondition(&se.Status.Conditions, want)
	_, err := w.client.UpdateStatus(ctx, se)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil // deleted meanwhile
	case err != nil:
		return false, fmt.Errorf("service export %s: update status: %w", key, err)
	}
	w.log.Debug("ServiceExport status set", "service_export", key, "valid", want.Status, "reason", want.Reason)
	return true, nil
}

// validCondition returns the MCS Valid condition for an export's status,
// and false when normalization says nothing about it.
func validCondition(st normalize.ExportStatus, generation int64, now time.Time) (metav1.Condition, bool) {
	c := metav1.Condition{
		Type:               string(mcsv1alpha1.ServiceExportConditionValid),
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
	}
	switch {
	case st.Exported:
		c.Status = metav1.ConditionTrue
		c.Reason = string(mcsv1alpha1.ServiceExportReasonValid)
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
