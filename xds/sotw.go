package xds

import (
	"slices"
	"strconv"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/xds/translate"
)

// sotwHandler runs state-of-the-world ADS streams over the cache, by the
// xDS protocol's rules (envoyproxy.io xds_protocol), as go-control-plane's
// server does: a request names every resource its proxy wants of a type;
// one that does not answer the type's latest response (a stale nonce) is
// ignored; a response goes out when the proxy lacks something, or at once
// for a type's first request.
type sotwHandler struct{ streamHandler }

// sotwStream is one stream's state, owned by its goroutine.
type sotwStream struct {
	h     *sotwHandler
	id    streamID
	send  func(*adspb.DiscoveryResponse) error
	node  *adspb.Node // the first request's: later ones need not carry it
	types map[string]*sotwType
	// responses carries the watches' answers; each watch sends at most
	// one, and a type has one watch at a time.
	responses chan *response
	nonce     int64
}

// sotwType is a stream's state for one type.
type sotwType struct {
	sub   *sotwSubscription
	watch *sotwWatch // the open watch; a response of any other is stale
	// nonce is the nonce of the type's latest response ("" before the
	// first): only a request that carries it is read.
	nonce  string
	cancel func()
}

// sotwSubscription is what a state-of-the-world stream knows of one
// type: the names the proxy wants, whether it wants everything, and the
// versions of the resources it was sent. The stream's goroutine owns it,
// and lends it to the cache (which only reads it) while a watch is open.
type sotwSubscription struct {
	wildcard bool
	// legacy is true while the proxy has named no resource: an empty
	// request means everything for the types that allow it.
	legacy bool
	// names is replaced by each request, never modified: the proxy book
	// reads the same map, from other goroutines.
	names    map[string]struct{}
	returned map[string]string
	// request is the names of the request names was built from: a proxy
	// repeats them in every ACK, which then changes nothing.
	request []string
}

// newSotwSubscription returns the subscription of a type's first request.
func newSotwSubscription(names []string, legacyWildcard bool) *sotwSubscription {
	s := &sotwSubscription{wildcard: len(names) == 0 && legacyWildcard, legacy: legacyWildcard, returned: map[string]string{}}
	s.update(names)
	return s
}

// update applies the names of a request: the whole subscription.
func (s *sotwSubscription) update(names []string) {
	if s.names != nil && slices.Equal(names, s.request) {
		return
	}
	s.request = names
	if s.legacy {
		if len(names) == 0 {
			s.names = map[string]struct{}{}
			return // still wildcard by the legacy rule
		}
		// Naming a resource, "*" included, ends the legacy rule for good.
		s.legacy = false
	}
	s.wildcard = false
	s.names = make(map[string]struct{}, len(names))
	for _, n := range names {
		if n == wildcardName {
			s.wildcard = true
			continue
		}
		s.names[n] = struct{}{}
	}
	if !s.wildcard {
		// A name unsubscribed and subscribed again is sent again, even
		// unchanged: the proxy dropped it.
		for n := range s.returned {
			if _, ok := s.names[n]; !ok {
				delete(s.returned, n)
			}
		}
	}
}

func (h *sotwHandler) serve(stream adspb.StreamServer) error {
	st := &sotwStream{
		h:         h,
		id:        streamID{id: h.streams.Add(1)},
		send:      stream.Send,
		types:     map[string]*sotwType{},
		responses: make(chan *response, responsesPerStream),
	}
	return serveStream(stream.Context(), &h.streamHandler, st.id, stream.Recv, st.responses, st)
}

func (st *sotwStream) cancel() {
	for _, t := range st.types {
		t.cancel()
	}
}

// respond sends a watch's answer, unless a later request of its type
// replaced the watch (the new watch answers for itself).
func (st *sotwStream) respond(resp *response) error {
	typeURL := resp.watch.typeURL
	t := st.types[typeURL]
	if t == nil || t.watch != resp.watch {
		return nil
	}
	st.nonce++
	t.nonce = strconv.FormatInt(st.nonce, 10)
	t.sub.returned = resp.returned
	st.h.proxies.sent(st.id, typeURL, t.nonce, resp.version)
	return st.send(&adspb.DiscoveryResponse{VersionInfo: resp.version, Resources: resp.resources, TypeUrl: typeURL, Nonce: t.nonce})
}

// request records a request in the proxy book and, unless its nonce is
// stale, updates the type's subscription and opens its next watch.
func (st *sotwStream) request(req *adspb.DiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	t := st.types[typeURL]
	if err := st.h.admit(typeURL, len(st.types), t == nil); err != nil {
		return err
	}
	if req.GetNode() != nil {
		st.node = req.GetNode()
	}
	names := req.GetResourceNames()
	// A request that answers an earlier response than the type's latest
	// (a stale nonce) changes nothing: the proxy answers the latest with
	// its whole subscription again.
	stale := t != nil && t.nonce != "" && req.GetResponseNonce() != t.nonce
	var sub *sotwSubscription
	switch {
	case t == nil:
		sub = newSotwSubscription(names, legacyWildcard(typeURL))
	case stale:
		sub = t.sub
	default:
		t.cancel()
		t.sub.update(names)
		sub = t.sub
	}
	// The book sees every request, stale ones too: an ACK is an ACK.
	p, err := st.h.proxies.request(st.id, st.node, typeURL, requestState{
		names: sub.names, wildcard: sub.wildcard, nonce: req.GetResponseNonce(), version: req.GetVersionInfo(), nack: req.GetErrorDetail(),
	})
	switch {
	case err != nil:
		return err
	case t == nil:
		t = &sotwType{sub: sub}
		st.types[typeURL] = t
	case stale:
		return nil
	}
	view := translate.ViewFor(typeURL, p.View()).Key
	t.watch = &sotwWatch{typeURL: typeURL, first: req.GetResponseNonce() == "", sub: t.sub, ch: st.responses}
	t.cancel = st.h.cache.watchSotw(view, t.watch)
	return nil
}
