package xds

import (
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/recvloop"
	"github.com/meshfed/meshfed/xds/resources"
)

// ads serves the aggregated discovery service with a handler per kind of
// stream. Each keeps a stream's state itself: what a proxy holds, and for
// a wildcard delta subscription only the revision of the set it matches
// (not a version per resource, which for a ztunnel is one per workload of
// its network).
type ads struct {
	sotw  *sotwHandler
	delta *deltaHandler
}

var _ adspb.ADSServer = ads{}

// DeltaAggregatedResources serves one delta ADS stream.
func (a ads) DeltaAggregatedResources(stream adspb.DeltaStreamServer) error {
	return a.delta.serve(stream)
}

// StreamAggregatedResources serves one state-of-the-world ADS stream.
func (a ads) StreamAggregatedResources(stream adspb.StreamServer) error {
	return a.sotw.serve(stream)
}

// streamHandler is what the state-of-the-world and the delta handlers
// share: the cache their streams watch, the proxy book, and the server's
// state.
type streamHandler struct {
	cache    *Cache
	proxies  *proxies
	ready    <-chan struct{} // closed once the first snapshot is pushed
	stopping <-chan struct{}
	streams  atomic.Int64 // numbers the handler's streams from 1
}

// adsStream is one stream of either kind, owned by its goroutine.
type adsStream[Req, Resp any] interface {
	// request reads a request: the book, the type's subscription, its
	// next watch.
	request(*Req) error
	// respond sends a watch's answer, or drops one that is stale.
	respond(Resp) error
	// cancel cancels every open watch.
	cancel()
}

// legacyWildcard reports whether an empty first request subscribes to
// everything: it does for Envoy's LDS and CDS and for ztunnel's types, and
// never for EDS and RDS, which grpc-go's clients request by name only.
func legacyWildcard(typeURL string) bool {
	return typeURL != resources.EndpointType && typeURL != resources.RouteType
}

// maxTypesPerStream bounds the types one stream watches: a proxy may ask
// for types the hub does not serve (they are never answered), but not for
// an unbounded number of them.
const maxTypesPerStream = 32

// responsesPerStream is the room of a stream's channel of answers, which
// the cache sends on under its lock and so must never find full. A
// stream sends (or drops) every answer waiting before it reads a request;
// while it reads one, each type's open watch may answer once, and the
// watch that replaces the request's type's may answer at once.
const responsesPerStream = maxTypesPerStream + 1

// serveStream runs st, stream id of the book, until the proxy closes it,
// it breaks, st fails or the server stops. Each watch answers on
// responses; answers already made go out before a request is read, so
// that the channel keeps room for those the request makes, and so that
// what the next watch starts from is what the proxy has.
func serveStream[Req, Resp any](ctx context.Context, h *streamHandler, id streamID, recv func() (*Req, error), responses <-chan Resp, st adsStream[Req, Resp]) error {
	if err := h.proxies.opened(ctx, id); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	reqs := recvloop.Start(ctx, recv)
	defer func() {
		cancel()
		st.cancel()
		h.proxies.closed(id)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.stopping:
			return nil
		case resp := <-responses:
			if err := st.respond(resp); err != nil {
				return err
			}
		case <-reqs.Done():
			if err := reqs.Err(); !recvloop.Closed(err) {
				return err // a request the stream could not read (too large, say)
			}
			return nil // the proxy closed the stream
		case req := <-reqs.Msgs():
			if err := drain(responses, st.respond); err != nil {
				return err
			}
			if err := st.request(req); err != nil {
				return err
			}
		}
	}
}

// drain answers what waits on responses.
func drain[Resp any](responses <-chan Resp, respond func(Resp) error) error {
	for {
		select {
		case resp := <-responses:
			if err := respond(resp); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// admit waits until the server serves (the first snapshot is pushed), and
// checks a request's type: it must be named, and a stream watching types
// (the type new to it when isNew) may watch maxTypesPerStream at most.
func (h *streamHandler) admit(typeURL string, types int, isNew bool) error {
	select {
	case <-h.ready:
	case <-h.stopping:
		return errors.New("xds server stopping")
	}
	switch {
	case typeURL == "":
		return status.Error(codes.InvalidArgument, "type URL is required for ADS")
	case isNew && types == maxTypesPerStream:
		return status.Errorf(codes.ResourceExhausted, "a stream may watch %d types at most", maxTypesPerStream)
	}
	return nil
}
