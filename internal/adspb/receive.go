package adspb

import "context"

// Receive reads a stream's requests into a channel, for a server loop
// that selects on them beside its other events, until ctx ends or the
// stream breaks; then it closes the channel, and err says why the stream
// broke (nil when ctx ended first). It does not outlive the stream: gRPC
// ends a stream's Recv once its handler returns, and the handler cancels
// ctx as it returns.
func Receive[R any](ctx context.Context, recv func() (*R, error)) (reqs <-chan *R, err func() error) {
	ch := make(chan *R)
	var recvErr error // written before ch is closed, read after
	go func() {
		defer close(ch)
		for {
			req, err := recv()
			if err != nil {
				recvErr = err
				return
			}
			select {
			case ch <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, func() error { return recvErr }
}
