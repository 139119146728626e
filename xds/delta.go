package xds

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/translate"
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

// deltaHandler runs delta ADS streams over the cache.
type deltaHandler struct {
	cache    *Cache
	proxies  *proxies
	ready    <-chan struct{} // closed once the first snapshot is pushed
	stopping <-chan struct{}
	streams  atomic.Int64
}

// legacyWildcard reports whether an empty first request subscribes to
// everything: it does for Envoy's LDS and CDS and for ztunnel's types, and
// never for EDS and RDS, which grpc-go's clients request by name only.
func legacyWildcard(typeURL string) bool {
	return typeURL != resources.EndpointType && typeURL != resources.RouteType
}

// deltaStream is one stream's state, owned by its goroutine.
type deltaStream struct {
	h     *deltaHandler
	id    streamID
	send  func(any) error // the response message, or its encoding (see deltaResp.wire)
	types map[string]*deltaType
	// responses carries the watches' answers; each watch sends at most
	// one, and a type has one watch at a time.
	responses chan *deltaResp
	nonce     int64
}

// deltaType is a stream's state for one type.
type deltaType struct {
	sub    *subscription
	watch  *deltaWatch // the open watch
	cancel func()
}

func (h *deltaHandler) serve(stream adspb.DeltaStreamServer) error {
	st := &deltaStream{
		h:         h,
		id:        streamID{delta: true, id: h.streams.Add(1)},
		send:      stream.SendMsg,
		types:     map[string]*deltaType{},
		responses: make(chan *deltaResp, responsesPerStream),
	}
	if err := h.proxies.opened(stream.Context(), st.id); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	reqs := receive(ctx, stream.Recv)
	defer func() {
		cancel()
		for _, t := range st.types {
			t.cancel()
		}
		h.proxies.closed(st.id)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.stopping:
			return nil
		case resp := <-st.responses:
			if err := st.respond(resp); err != nil {
				return err
			}
		case req, ok := <-reqs:
			if !ok {
				return nil // the proxy closed the stream, or it broke
			}
			// Responses already answered go out first, so that the
			// versions the next watch starts from are the proxy's.
			if err := st.drain(); err != nil {
				return err
			}
			if err := st.request(req); err != nil {
				return err
			}
		}
	}
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

// receive reads requests into a channel until ctx ends or the stream
// breaks (then it closes the channel). It does not outlive the stream:
// gRPC ends a stream's Recv once its handler returns, and the handler
// cancels ctx as it returns.
func receive[R any](ctx context.Context, recv func() (*R, error)) <-chan *R {
	reqs := make(chan *R)
	go func() {
		defer close(reqs)
		for {
			req, err := recv()
			if err != nil {
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	return reqs
}

func (st *deltaStream) drain() error {
	for {
		select {
		case resp := <-st.responses:
			if err := st.respond(resp); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// respond sends a watch's answer and makes its versions the proxy's.
func (st *deltaStream) respond(resp *deltaResp) error {
	t := st.types[resp.typeURL]
	if t == nil {
		return nil
	}
	if resp.err != nil {
		return resp.err
	}
	if resp.watch != nil { // an answer by name
		if resp.watch != t.watch {
			// The watch was replaced since, and its successor answers
			// from the versions this one was computed from. A wildcard
			// answer is never stale: the cache marked the subscription
			// as holding its revision when it made it.
			return nil
		}
		t.sub.versions = resp.returned
	}
	st.nonce++
	nonce := strconv.FormatInt(st.nonce, 10)
	st.h.proxies.sent(st.id, resp.typeURL, nonce, resp.version)
	return st.send(resp.wire(nonce))
}

// request records a request in the proxy book, updates the type's
// subscription, and opens its next watch.
func (st *deltaStream) request(req *adspb.DeltaDiscoveryRequest) error {
	select {
	case <-st.h.ready:
	case <-st.h.stopping:
		return errors.New("xds server stopping")
	}
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		return status.Error(codes.InvalidArgument, "type URL is required for ADS")
	}
	t := st.types[typeURL]
	if t == nil && len(st.types) == maxTypesPerStream {
		return status.Errorf(codes.ResourceExhausted, "a stream may watch %d types at most", maxTypesPerStream)
	}
	if t == nil {
		t = &deltaType{sub: newSubscription(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(),
			req.GetInitialResourceVersions(), legacyWildcard(typeURL))}
		st.types[typeURL] = t
	} else {
		t.cancel()
		t.sub.update(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	}
	// The node comes with the stream's first request; the book knows the
	// proxy by its stream after that. A refused proxy ends the stream.
	r := requestState{names: len(t.sub.names), wildcard: t.sub.wildcard, nonce: req.GetResponseNonce(), nack: req.GetErrorDetail()}
	if !t.sub.wildcard {
		// A copy: the book reads it from other goroutines (metrics).
		r.subscribedSet = maps.Clone(t.sub.names)
	}
	p, err := st.h.proxies.request(st.id, req.GetNode(), typeURL, r)
	if err != nil {
		t.cancel = func() {}
		return err
	}
	view := translate.ViewFor(typeURL, p.View()).Key
	t.watch = &deltaWatch{typeURL: typeURL, first: req.GetResponseNonce() == "", sub: t.sub, ch: st.responses}
	t.cancel = st.h.cache.watchDelta(view, t.watch)
	return nil
}
