package syncproto

import (
	"context"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// SpokeTransport is one Sync stream as the spoke sees it. Send and Recv
// are called from different goroutines, each from one at a time, as gRPC
// streams allow.
type SpokeTransport interface {
	Send(*federationpb.SpokeMessage) error
	Recv() (*federationpb.HubMessage, error)
}

// HubTransport is one Sync stream as the hub sees it, with the same
// concurrency as [SpokeTransport].
type HubTransport interface {
	Send(*federationpb.HubMessage) error
	Recv() (*federationpb.SpokeMessage, error)
}

// Dialer opens a stream to the hub. The stream ends when ctx ends: its
// Send and Recv then fail.
type Dialer func(ctx context.Context) (SpokeTransport, error)

// receiver is a session's one receive pump: a goroutine that calls Recv
// until it fails and hands each message over, so that the session can
// wait for a message, a timer and its context at once.
type receiver[M any] struct {
	msgs chan M
	done chan struct{} // closed when the goroutine has returned
	err  error         // why it returned; read after done
}

// receive starts a receiver. It returns when recv fails or, with a message
// nobody takes, when ctx ends.
func receive[M any](ctx context.Context, recv func() (M, error)) *receiver[M] {
	r := &receiver[M]{msgs: make(chan M), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			m, err := recv()
			if err != nil {
				r.err = err
				return
			}
			select {
			case r.msgs <- m:
			case <-ctx.Done():
				r.err = context.Cause(ctx)
				return
			}
		}
	}()
	return r
}
