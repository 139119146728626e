package recvloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoop(t *testing.T) {
	broken := errors.New("broken")
	in := make(chan string)
	l := Start(t.Context(), func() (string, error) {
		if m, ok := <-in; ok {
			return m, nil
		}
		return "", broken
	})
	in <- "a"
	if m := <-l.Msgs(); m != "a" {
		t.Fatalf("received %q", m)
	}
	close(in)
	<-l.Done()
	if !errors.Is(l.Err(), broken) {
		t.Errorf("Err() = %v, want the stream's", l.Err())
	}

	// An ended context ends a loop whose message nobody takes, with the
	// context's cause.
	ctx, cancel := context.WithCancelCause(t.Context())
	called := make(chan struct{}, 1)
	l = Start(ctx, func() (string, error) {
		select {
		case called <- struct{}{}:
		default:
		}
		return "unread", nil
	})
	<-called
	stop := errors.New("stop")
	cancel(stop)
	<-l.Done()
	if !errors.Is(l.Err(), stop) {
		t.Errorf("Err() = %v after the context ended, want its cause", l.Err())
	}
}

func TestClosed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, true},
		{io.EOF, true},
		{context.Canceled, true},
		{status.Error(codes.Canceled, "context canceled"), true},
		{fmt.Errorf("recv: %w", io.EOF), true},
		{status.Error(codes.ResourceExhausted, "message larger than max"), false},
		{errors.New("broken"), false},
	} {
		if got := Closed(tc.err); got != tc.want {
			t.Errorf("Closed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
