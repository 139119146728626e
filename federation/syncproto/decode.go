package syncproto

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Field numbers DecodeSpokeMessage reads itself (federation.proto).
const (
	spokeMessageUpdate  = 2 // SpokeMessage.update
	shardUpdateEndpoint = 7 // ShardUpdate.endpoints
	shardUpdateWorkload = 8 // ShardUpdate.workloads
)

// DecodeSpokeMessage decodes b into m as proto.Unmarshal would, with one
// difference: the strings of a shard update's endpoints and workloads
// point into b instead of being copied. b must therefore not change while
// those messages are held, and whoever keeps what they say must copy it
// (the registry's interner does).
//
// A spoke's full state is tens of thousands of endpoints and workloads,
// a dozen strings each. Decoded as copies, those strings are most of the
// hub's allocations in a sync, all garbage once the registry has interned
// them; and being of the sizes of the registry's own small objects, they
// share spans with them, so that the free space they leave behind stays
// in the heap for as long as the registry's objects do.
func DecodeSpokeMessage(b []byte, m *federationpb.SpokeMessage) error {
	num, typ, n := protowire.ConsumeTag(b)
	if n > 0 && num == spokeMessageUpdate && typ == protowire.BytesType {
		if v, vn := protowire.ConsumeBytes(b[n:]); vn >= 0 && n+vn == len(b) {
			u := new(federationpb.ShardUpdate)
			if err := decodeShardUpdate(v, u); err != nil {
				return err
			}
			m.Reset()
			m.Kind = &federationpb.SpokeMessage_Update{Update: u}
			return nil
		}
	}
	// Anything but an update alone (a hello, an imports report, unknown
	// fields): the ordinary decoder.
	return proto.Unmarshal(b, m)
}

// decodeShardUpdate decodes b, a ShardUpdate, into the empty u: its
// endpoints and workloads with UnmarshalVTUnsafe (their strings point into
// b), the rest of its fields with proto.Unmarshal.
func decodeShardUpdate(b []byte, u *federationpb.ShardUpdate) error {
	var nEndpoints, nWorkloads, restLen int
	if err := eachField(b, func(num protowire.Number, typ protowire.Type, field, _ []byte) error {
		switch {
		case typ == protowire.BytesType && num == shardUpdateEndpoint:
			nEndpoints++
		case typ == protowire.BytesType && num == shardUpdateWorkload:
			nWorkloads++
		default:
			restLen += len(field)
		}
		return nil
	}); err != nil {
		return err
	}
	// The messages in two arrays rather than one allocation each: they
	// are garbage together once the update is applied.
	endpoints := make([]federationpb.Endpoint, nEndpoints)
	workloads := make([]federationpb.Workload, nWorkloads)
	u.Endpoints = make([]*federationpb.Endpoint, 0, nEndpoints)
	u.Workloads = make([]*federationpb.Workload, 0, nWorkloads)
	rest := make([]byte, 0, restLen)
	if err := eachField(b, func(num protowire.Number, typ protowire.Type, field, value []byte) (err error) {
		switch {
		case typ == protowire.BytesType && num == shardUpdateEndpoint:
			u.Endpoints, err = appendUnsafe("endpoints", endpoints, u.Endpoints, value, endpointUTF8)
		case typ == protowire.BytesType && num == shardUpdateWorkload:
			u.Workloads, err = appendUnsafe("workloads", workloads, u.Workloads, value, workloadUTF8)
		default:
			rest = append(rest, field...)
		}
		return err
	}); err != nil {
		return err
	}
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(rest, u)
}

// appendUnsafe decodes value into the next message of backing with
// UnmarshalVTUnsafe, checks its strings with utf8OK, and appends it to
// out, the list's messages so far.
func appendUnsafe[M any, P interface {
	*M
	UnmarshalVTUnsafe([]byte) error
}](list string, backing []M, out []P, value []byte, utf8OK func(P) bool) ([]P, error) {
	m := P(&backing[len(out)])
	if err := m.UnmarshalVTUnsafe(value); err != nil {
		return out, fmt.Errorf("%s[%d]: %w", list, len(out), err)
	}
	if !utf8OK(m) {
		return out, fmt.Errorf("%s[%d]: %w", list, len(out), errInvalidUTF8)
	}
	return append(out, m), nil
}

// eachField calls f with each field of the message b, its tag included,
// and, for a length-delimited field, its value.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, field, value []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		var value []byte
		var m int
		if typ == protowire.BytesType {
			value, m = protowire.ConsumeBytes(b[n:])
		} else {
			m = protowire.ConsumeFieldValue(num, typ, b[n:])
		}
		if m < 0 {
			return protowire.ParseError(m)
		}
		if err := f(num, typ, b[:n+m], value); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}

// errInvalidUTF8 is proto.Unmarshal's refusal of a string field that is
// not UTF-8, which UnmarshalVTUnsafe does not check: the hub would
// otherwise pass such a string on to proxies, whose decoders refuse it.
var errInvalidUTF8 = errors.New("proto: a string field contains invalid UTF-8")

// endpointUTF8 reports whether every string of e is UTF-8.
func endpointUTF8(e *federationpb.Endpoint) bool {
	ok := utf8.ValidString(e.Namespace) && utf8.ValidString(e.Service) && utf8.ValidString(e.Address) &&
		utf8.ValidString(e.Node) && utf8.ValidString(e.Hostname) && utf8.ValidString(e.Network) && localityUTF8(e.Locality)
	for _, p := range e.Ports {
		ok = ok && utf8.ValidString(p.Name) && utf8.ValidString(p.AppProtocol)
	}
	if w := e.Workload; w != nil {
		ok = ok && utf8.ValidString(w.Kind) && utf8.ValidString(w.Name) && utf8.ValidString(w.Uid)
	}
	return ok
}

// workloadUTF8 reports whether every string of w is UTF-8.
func workloadUTF8(w *federationpb.Workload) bool {
	ok := utf8.ValidString(w.Uid) && utf8.ValidString(w.Namespace) && utf8.ValidString(w.Name) &&
		utf8.ValidString(w.ServiceAccount) && utf8.ValidString(w.Node) && localityUTF8(w.Locality) &&
		utf8.ValidString(w.App) && utf8.ValidString(w.Version) && utf8.ValidString(w.CanonicalName) &&
		utf8.ValidString(w.CanonicalRevision) && utf8.ValidString(w.Network)
	for _, ip := range w.Ips {
		ok = ok && utf8.ValidString(ip)
	}
	return ok
}

func localityUTF8(l *federationpb.Locality) bool {
	return l == nil || utf8.ValidString(l.Region) && utf8.ValidString(l.Zone) && utf8.ValidString(l.Subzone)
}
