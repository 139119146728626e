// Package recvloop runs a stream's receive loop: a goroutine that calls
// Recv until it fails and hands each message over on a channel, so that a
// server or client loop can wait for a message, a timer and its context
// at once. The federation sync protocol and both ADS servers (the hub's
// and the spoke's MCP server) share it.
package recvloop

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Loop is a running receive loop.
type Loop[M any] struct {
	msgs chan M
	done chan struct{}
	err  error // why the loop returned; read after done
}

// Start starts a loop over recv. It returns when recv fails or, with a
// message nobody takes, when ctx ends. It does not outlive a gRPC stream
// whose handler (or client) cancels ctx as it returns: gRPC then ends the
// stream's Recv.
func Start[M any](ctx context.Context, recv func() (M, error)) *Loop[M] {
	l := &Loop[M]{msgs: make(chan M), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			m, err := recv()
			if err != nil {
				l.err = err
				return
			}
			select {
			case l.msgs <- m:
			case <-ctx.Done():
				l.err = context.Cause(ctx)
				return
			}
		}
	}()
	return l
}

// Msgs delivers the messages received, in order.
func (l *Loop[M]) Msgs() <-chan M { return l.msgs }

// Done is closed when the loop has returned.
func (l *Loop[M]) Done() <-chan struct{} { return l.done }

// Err says why the loop returned; call it once Done is closed.
func (l *Loop[M]) Err() error { return l.err }

// Closed reports whether err ends a stream cleanly, for a server: the
// peer closed it (io.EOF) or it was canceled. Any other error is the
// stream's failure, which the handler returns as its status.
func Closed(err error) bool {
	return err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled
}
