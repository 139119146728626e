package xds

import (
	"strconv"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/xds/translate"
)

// deltaHandler runs delta ADS streams over the cache.
type deltaHandler struct{ streamHandler }

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
	return serveStream(stream.Context(), &h.streamHandler, st.id, stream.Recv, st.responses, st)
}

func (st *deltaStream) cancel() {
	for _, t := range st.types {
		t.cancel()
	}
}

// respond sends a watch's answer and makes its versions the proxy's.
func (st *deltaStream) respond(resp *deltaResp) error {
	t := st.types[resp.typeURL]
	if t == nil || resp.watch != t.watch {
		// The watch was replaced since, and its successor answers from
		// what the proxy held before this answer.
		return nil
	}
	if resp.err != nil {
		return resp.err
	}
	t.sub.answered(resp)
	st.nonce++
	nonce := strconv.FormatInt(st.nonce, 10)
	st.h.proxies.sent(st.id, resp.typeURL, nonce, resp.version)
	return st.send(resp.wire(nonce))
}

// request records a request in the proxy book, updates the type's
// subscription, and opens its next watch.
func (st *deltaStream) request(req *adspb.DeltaDiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	t := st.types[typeURL]
	if err := st.h.admit(typeURL, len(st.types), t == nil); err != nil {
		return err
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
	r := requestState{names: t.sub.names, wildcard: t.sub.wildcard, nonce: req.GetResponseNonce(), nack: req.GetErrorDetail()}
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
