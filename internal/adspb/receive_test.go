package adspb

import (
	"context"
	"errors"
	"testing"
)

func TestReceive(t *testing.T) {
	broken := errors.New("broken")
	in := make(chan *DiscoveryRequest)
	recv := func() (*DiscoveryRequest, error) {
		if r, ok := <-in; ok {
			return r, nil
		}
		return nil, broken
	}
	reqs, err := Receive(t.Context(), recv)
	in <- &DiscoveryRequest{TypeUrl: "a"}
	if r := <-reqs; r.GetTypeUrl() != "a" {
		t.Fatalf("received %v", r)
	}
	close(in)
	if _, ok := <-reqs; ok {
		t.Fatal("the channel stays open after the stream broke")
	}
	if !errors.Is(err(), broken) {
		t.Errorf("err() = %v, want the stream's", err())
	}

	// An ended context closes the channel, with no error.
	ctx, cancel := context.WithCancel(t.Context())
	called := make(chan struct{}, 1)
	reqs, err = Receive(ctx, func() (*DiscoveryRequest, error) {
		select {
		case called <- struct{}{}:
		default:
		}
		return &DiscoveryRequest{}, nil // requests nobody reads
	})
	<-called
	cancel()
	for range reqs {
	}
	if err() != nil {
		t.Errorf("err() = %v after the context ended", err())
	}
}
