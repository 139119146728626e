package xds

import (
	"slices"
	"strings"
	"weak"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/grpccodec"
	"github.com/meshfed/meshfed/xds/resources"
)

// sotwResponse returns the response a state-of-the-world watch needs, or
// nil when the proxy already has this state. always answers a first
// request even when the proxy would get nothing.
func sotwResponse(w *sotwWatch, s *set, always bool) *response {
	var held []*entry
	if w.sub.wildcard {
		held = s.byName()
	} else {
		for name := range w.sub.names {
			if e, ok := s.entries.get(name); ok {
				held = append(held, e)
			}
		}
		slices.SortFunc(held, compareNames)
	}
	returned := w.sub.returned
	same := len(held) == len(returned)
	for _, e := range held {
		if returned[e.Name] != e.Version {
			same = false
			break
		}
	}
	if same && !always {
		return nil
	}
	// LDS and CDS responses are the whole state; EDS and RDS responses
	// carry only what the proxy does not have yet.
	full := always || w.typeURL == resources.ListenerType || w.typeURL == resources.ClusterType
	r := &response{watch: w, version: s.version, returned: make(map[string]string, len(held)), resources: make([]*anypb.Any, 0, len(held))}
	for _, e := range held {
		if full || returned[e.Name] != e.Version {
			r.resources = append(r.resources, e.Any())
		}
		r.returned[e.Name] = e.Version
	}
	return r
}

// deltaResponse returns the changes a delta watch needs, or nil when there
// are none (and the watch need not be answered anyway).
func deltaResponse(w *deltaWatch, s *set, always bool) *deltaResp {
	if w.sub.wildcard {
		return wildcardDeltaResponse(w, s, always)
	}
	returned := w.sub.versions
	next := make(map[string]string, len(returned))
	r := &deltaResp{typeURL: w.typeURL, version: s.version}
	for name := range w.sub.names {
		if e, ok := s.entries.get(name); ok {
			next[name] = e.Version
			if returned[name] != e.Version {
				r.resources = append(r.resources, e.Delta())
			}
		} else if _, had := returned[name]; had {
			r.removed = append(r.removed, name)
		}
	}
	return r.finish(w, next, always)
}

// errFellBehind ends the stream of a wildcard client that cannot be
// compared with its set: it reconnects, and its initial resource versions
// say what it holds.
var errFellBehind = status.Error(codes.Unavailable, "the client fell further behind than the server remembers; reconnect")

// wildcardDeltaResponse answers a wildcard watch (a ztunnel holds every
// address of its network). A client that said what it holds (its first
// request, with or without initial resource versions) is compared with
// every entry; after that it is known by the set revision it has, and
// gets what changed since. The answer says the client holds the set's
// revision once it has it (the stream applies it: the cache never writes
// a subscription).
func wildcardDeltaResponse(w *deltaWatch, s *set, always bool) *deltaResp {
	s.track()
	sub := w.sub
	var r *deltaResp
	switch {
	case sub.versions != nil:
		r = s.compareAll(w, always)
	case sub.set != s || sub.rev < s.floor:
		return &deltaResp{typeURL: w.typeURL, err: errFellBehind, watch: w}
	default:
		r = s.changesSince(w, always)
	}
	if r != nil {
		r.set, r.rev = s, s.rev
	}
	return r
}

// compareAll answers a wildcard client by comparing every entry with the
// versions it said it holds. With none, it gets everything: one encoding
// per set revision, shared by every client that connects to it.
func (s *set) compareAll(w *deltaWatch, always bool) *deltaResp {
	returned := w.sub.versions
	if len(returned) == 0 {
		if s.entries.len() == 0 && !always {
			return nil
		}
		full := s.full.Value()
		if full == nil || s.fullRev != s.rev {
			full = encodeFull(w.typeURL, s.version, s.byName())
			s.full, s.fullRev = weak.Make(full), s.rev
		}
		return &deltaResp{typeURL: w.typeURL, version: s.version, encoded: full, watch: w}
	}
	r := &deltaResp{typeURL: w.typeURL, version: s.version}
	for _, e := range s.byName() { // sorted: finish's sort has nothing to do
		if returned[e.Name] != e.Version {
			r.resources = append(r.resources, e.Delta())
		}
	}
	for name := range returned {
		if _, ok := s.entries.get(name); !ok {
			r.removed = append(r.removed, name)
		}
	}
	return r.finish(w, nil, always)
}

// changesSince answers a wildcard client that holds an earlier revision
// of the set: the names changed since (from the set's log, or else from
// its entries' revisions and its tombstones), and those it asked again.
// An entry changed and changed back is sent again; a name added and
// removed since is removed again: both are harmless, and cheaper than
// remembering the client's versions.
func (s *set) changesSince(w *deltaWatch, always bool) *deltaResp {
	sub := w.sub
	if sub.rev == s.rev && len(sub.resend) == 0 {
		if !always {
			return nil
		}
		return &deltaResp{typeURL: w.typeURL, version: s.version, watch: w}
	}
	r := &deltaResp{typeURL: w.typeURL, version: s.version}
	consider := func(name string) {
		if e, ok := s.entries.get(name); ok {
			r.resources = append(r.resources, e.Delta())
		} else {
			r.removed = append(r.removed, name)
		}
	}
	names, ok := s.changedSince(sub.rev)
	if !ok {
		names = names[:0]
		for name, rev := range s.revs {
			if rev > sub.rev {
				names = append(names, name)
			}
		}
		for name, rev := range s.removed {
			if rev > sub.rev {
				names = append(names, name)
			}
		}
	}
	for _, name := range names {
		consider(name)
	}
	for name := range sub.resend {
		if !slices.Contains(names, name) {
			consider(name)
		}
	}
	return r.finish(w, nil, always)
}

// deltaAnswer returns what a new delta watch must be sent at once, or nil
// when it waits for a change.
func (s *set) deltaAnswer(w *deltaWatch) *deltaResp {
	return deltaResponse(w, s, w.first && w.sub.wildcard)
}

// finish completes the answer of w, after which the proxy holds the
// versions returned (by name), or nil when it need not be sent.
func (r *deltaResp) finish(w *deltaWatch, returned map[string]string, always bool) *deltaResp {
	if len(r.resources) == 0 && len(r.removed) == 0 && !always {
		return nil
	}
	slices.SortFunc(r.resources, func(a, b *adspb.Resource) int { return strings.Compare(a.GetName(), b.GetName()) })
	slices.Sort(r.removed)
	r.watch, r.returned = w, returned
	return r
}

// response is a state-of-the-world response over shared, encoded
// resources, the watch it answers (and so its type), and the versions the
// proxy holds once it has it.
type response struct {
	watch     *sotwWatch
	version   string
	resources []*anypb.Any
	returned  map[string]string
}

// deltaResp is a delta response over shared, encoded resources, and what
// the proxy holds once it has it: the versions returned (by name), or the
// set and its revision (wildcard).
type deltaResp struct {
	typeURL   string
	version   string
	resources []*adspb.Resource
	removed   []string
	returned  map[string]string
	set       *set
	rev       uint64
	// encoded, when set, is the whole response already encoded (a
	// wildcard client's first): resources are its.
	encoded *encodedResponse
	// err ends the stream instead of answering it.
	err error
	// watch is the watch the answer answers: only the type's open
	// watch's answer is sent.
	watch *deltaWatch
}

// encodedResponse is a delta response encoded once, without a nonce, for
// every stream that sends it.
type encodedResponse struct {
	resources []*adspb.Resource
	body      []byte
}

// nonceField is the field number of a delta response's nonce.
var nonceField = (&adspb.DeltaDiscoveryResponse{}).ProtoReflect().Descriptor().Fields().ByName("nonce").Number()

// encodeFull encodes the response that gives a client every entry.
func encodeFull(typeURL, version string, entries []*entry) *encodedResponse {
	resources := make([]*adspb.Resource, len(entries))
	for i, e := range entries {
		resources[i] = e.Delta()
	}
	m := &adspb.DeltaDiscoveryResponse{SystemVersionInfo: version, Resources: resources, TypeUrl: typeURL}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// The entries were encoded and decoded already: a failure here is
		// a bug, and each stream then encodes its own (and reports it).
		return &encodedResponse{resources: resources}
	}
	return &encodedResponse{resources: resources, body: body}
}

// wire is what the stream sends: the message, or the shared encoding
// followed by the stream's nonce (a protobuf message may carry its fields
// in any order).
func (r *deltaResp) wire(nonce string) any {
	if r.encoded == nil || r.encoded.body == nil {
		return r.message(nonce)
	}
	tail := protowire.AppendTag(nil, nonceField, protowire.BytesType)
	return grpccodec.Encoded{Body: r.encoded.body, Tail: protowire.AppendString(tail, nonce)}
}

// message builds the response with its nonce (the stream's).
func (r *deltaResp) message(nonce string) *adspb.DeltaDiscoveryResponse {
	if r.encoded != nil {
		return &adspb.DeltaDiscoveryResponse{
			SystemVersionInfo: r.version, Resources: r.encoded.resources, TypeUrl: r.typeURL, Nonce: nonce,
		}
	}
	return &adspb.DeltaDiscoveryResponse{
		SystemVersionInfo: r.version, Resources: r.resources, RemovedResources: r.removed, TypeUrl: r.typeURL, Nonce: nonce,
	}
}
