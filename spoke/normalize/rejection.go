package normalize

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshfed/meshfed/federation"
)

// RejectReason says in one word why an object was rejected. There are few
// of them: they label the spoke's metrics.
type RejectReason string

// The reasons of a [Rejection].
const (
	// RejectInvalidPort: a port number outside 1-65535.
	RejectInvalidPort RejectReason = "InvalidPort"
	// RejectInvalidAddress: an address that is not an IP address, has a
	// zone, or is not unicast; or an endpoint without an address.
	RejectInvalidAddress RejectReason = "InvalidAddress"
	// RejectTooManyEndpoints: a slice with more than [MaxEndpointsPerSlice].
	RejectTooManyEndpoints RejectReason = "TooManyEndpoints"
	// RejectTooManyPorts: an object with more than
	// federation.MaxPortsPerObject ports, or an address whose copies in
	// several slices have that many together.
	RejectTooManyPorts RejectReason = "TooManyPorts"
	// RejectInvalidUTF8: a string that is not UTF-8, which no protobuf
	// message can carry.
	RejectInvalidUTF8 RejectReason = "InvalidUTF8"
	// RejectInvalid: the federation's validation refused what the object
	// became (the hub would refuse the whole update for it).
	RejectInvalid RejectReason = "Invalid"
)

// MaxEndpointsPerSlice is the Kubernetes API server's cap on the endpoints
// of one EndpointSlice. A slice with more did not come from an API server
// (it was read from a file), and one slice must not cost the hub more than
// an API server lets it.
const MaxEndpointsPerSlice = 1000

// Rejection says why normalization cannot use an object: it is the error
// of the functions of this package. The object is rejected as a whole (a
// slice with one bad address contributes none of its endpoints), so that a
// caller can keep its last good version instead of a part of the new one.
type Rejection struct {
	Kind      Kind
	Namespace string
	Name      string
	// Service is the key ("namespace/name") of the service being
	// normalized when a Service or EndpointSlice was rejected.
	Service string
	// Field is where the problem is: a path in the Kubernetes object
	// ("spec.ports[0].port", "endpoints[2].addresses[0]"), or, for a value
	// only the federation's validation refused, the path of the federation
	// field it became, after the element it came from
	// ("endpoints[2].locality.zone").
	Field string
	// Value is what Field holds ("" when unknown), as read.
	Value  string
	Reason RejectReason
	// Message says what is wrong, for humans.
	Message string
}

// Error names the object, the field, the value and what is wrong with it.
func (r *Rejection) Error() string {
	var b strings.Builder
	b.WriteString(r.Object())
	b.WriteString(": ")
	b.WriteString(r.Field)
	if r.Value != "" {
		b.WriteString(" " + strconv.Quote(r.Value))
	}
	b.WriteString(": " + r.Message)
	return b.String()
}

// Unwrap makes every Rejection match [ErrRejected].
func (r *Rejection) Unwrap() error { return ErrRejected }

// Object names the rejected object as "Kind namespace/name".
func (r *Rejection) Object() string {
	if r.Namespace == "" {
		return r.Kind.String() + " " + r.Name
	}
	return r.Kind.String() + " " + r.Namespace + "/" + r.Name
}

// AsRejection returns the Rejection err is or wraps, or nil.
func AsRejection(err error) *Rejection {
	if r := (*Rejection)(nil); errors.As(err, &r) {
		return r
	}
	return nil
}

// rejecter builds the rejections of one object.
type rejecter struct {
	kind                     Kind
	namespace, name, service string
}

func (j rejecter) reject(reason RejectReason, field, value, format string, args ...any) *Rejection {
	return &Rejection{
		Kind: j.kind, Namespace: j.namespace, Name: j.name, Service: j.service,
		Field: field, Value: value, Reason: reason, Message: fmt.Sprintf(format, args...),
	}
}

// port checks a port number.
func (j rejecter) port(field string, p int32) (uint32, *Rejection) {
	n, ok := portNumber(p)
	if !ok {
		return 0, j.reject(RejectInvalidPort, field, strconv.Itoa(int(p)), "port %d is out of range 1-65535", p)
	}
	return n, nil
}

// address checks an IP address.
func (j rejecter) address(field, s string) (netip.Addr, *Rejection) {
	if s == "" {
		return netip.Addr{}, j.reject(RejectInvalidAddress, field, s, "no address")
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || a.Zone() != "":
		return netip.Addr{}, j.reject(RejectInvalidAddress, field, s, "%q is not an IP address without a zone", s)
	case a.IsUnspecified() || a.IsMulticast():
		return netip.Addr{}, j.reject(RejectInvalidAddress, field, s, "%q is not a unicast address", s)
	}
	return a, nil
}

// utf8 checks that strings a message will carry are UTF-8, in pairs of
// field and value.
func (j rejecter) utf8(fieldsAndValues ...string) *Rejection {
	for i := 0; i+1 < len(fieldsAndValues); i += 2 {
		if v := fieldsAndValues[i+1]; !utf8.ValidString(v) {
			return j.reject(RejectInvalidUTF8, fieldsAndValues[i], v, "%q is not UTF-8", v)
		}
	}
	return nil
}

// invalid turns the error of a federation validation of m into a
// rejection: the federation field after prefix, the value it holds in m.
func (j rejecter) invalid(prefix string, m proto.Message, err error) *Rejection {
	ve := (*federation.ValidationError)(nil)
	if !errors.As(err, &ve) {
		return j.reject(RejectInvalid, prefix, "", "%v", err)
	}
	field := ve.Field
	if prefix != "" && field != "" {
		field = prefix + "." + field
	} else if field == "" {
		field = prefix
	}
	return j.reject(RejectInvalid, field, fieldValue(m, ve.Field), "%s", ve.Reason)
}

// fieldValue returns the value at a federation validation error's field
// path ("ports[1].name", "clusterIPs[0]") in m, or "" when the path does
// not lead to a scalar. Path elements are the fields' JSON names, in any
// case.
func fieldValue(m proto.Message, path string) string {
	if path == "" {
		return ""
	}
	msg := m.ProtoReflect()
	parts := strings.Split(path, ".")
	for i, part := range parts {
		name, index := part, -1
		if open := strings.IndexByte(part, '['); open >= 0 && strings.HasSuffix(part, "]") {
			n, err := strconv.Atoi(part[open+1 : len(part)-1])
			if err != nil {
				return ""
			}
			name, index = part[:open], n
		}
		fd := fieldByJSONName(msg.Descriptor(), name)
		if fd == nil {
			return ""
		}
		v := msg.Get(fd)
		if fd.IsList() {
			if index < 0 || index >= v.List().Len() {
				return ""
			}
			v = v.List().Get(index)
		} else if index >= 0 {
			return ""
		}
		last := i == len(parts)-1
		switch {
		case fd.Kind() == protoreflect.MessageKind && !last:
			msg = v.Message()
		case fd.Kind() == protoreflect.MessageKind || !last:
			return ""
		case fd.Kind() == protoreflect.EnumKind:
			if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
				return string(ev.Name())
			}
			return strconv.Itoa(int(v.Enum()))
		default:
			return v.String()
		}
	}
	return ""
}

func fieldByJSONName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); strings.EqualFold(fd.JSONName(), name) {
			return fd
		}
	}
	return nil
}
