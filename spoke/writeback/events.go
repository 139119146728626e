package writeback

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/source/kube"
)

// eventWriter records the Events of rejected objects, one at a time.
type eventWriter struct {
	client  EventsAPI
	rej     *rejections
	queue   workqueue.TypedRateLimitingInterface[objectRef]
	in      kube.Tables
	cluster string
	clock   clock.PassiveClock
	limiter flowcontrol.RateLimiter
	log     *slog.Logger
	// written, when set, is told each Event written (tests).
	written func(*corev1.Event)
}

// run writes Events until the queue is shut down.
func (w *eventWriter) run(ctx context.Context) {
	q := w.queue
	for {
		ref, shutdown := q.Get()
		if shutdown {
			return
		}
		err := w.sync(ctx, ref)
		switch {
		case err == nil:
			q.Forget(ref)
		case ctx.Err() != nil:
		case q.NumRequeues(ref) < eventRetries:
			w.log.Debug("cannot record Event; retrying", "err", err)
			q.AddRateLimited(ref)
		default:
			w.log.Warn("cannot record Event; giving up until the object's rejection changes", "err", err)
			q.Forget(ref)
		}
		q.Done(ref)
	}
}

func (w *eventWriter) sync(ctx context.Context, ref objectRef) error {
	r, ok := w.rej.due(ref)
	if !ok {
		return nil
	}
	if err := w.limiter.Wait(ctx); err != nil {
		return err
	}
	now := metav1.NewTime(w.clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ref.namespace,
			// client-go's form: unique, and sorted by time.
			Name: fmt.Sprintf("%s.%x", ref.name, now.UnixNano()),
		},
		InvolvedObject:      w.involved(ref),
		Reason:              normalize.ReasonRejected,
		Message:             r.message(),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: eventSourceName},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: eventSourceName,
		ReportingInstance:   w.cluster,
	}
	out, err := w.client.Create(ctx, ev)
	switch {
	case apierrors.IsNotFound(err): // the namespace went away
	case apierrors.IsAlreadyExists(err): // a retry of one that was created
	case err != nil:
		return fmt.Errorf("%s: create Event: %w", r.Object(), err)
	}
	w.rej.sent(ref, r)
	if w.written != nil && err == nil {
		w.written(out)
	}
	return nil
}

// involved returns the reference of a rejected object, with its uid when
// the caches have it (kubectl describe lists an object's Events by uid).
func (w *eventWriter) involved(ref objectRef) corev1.ObjectReference {
	o := corev1.ObjectReference{Kind: ref.kind.String(), Namespace: ref.namespace, Name: ref.name}
	switch ref.kind {
	case normalize.KindService, normalize.KindPod:
		o.APIVersion = corev1.SchemeGroupVersion.String()
	case normalize.KindEndpointSlice:
		o.APIVersion = discoveryv1.SchemeGroupVersion.String()
	}
	o.UID, _ = w.in.UID(ref.kind, ref.namespace, ref.name)
	return o
}
