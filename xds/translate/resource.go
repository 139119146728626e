package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/internal/adspb"
)

// Resource is one resource, encoded once. Sets of several views and the
// responses of every proxy share it; nothing holds it mutably. It keeps
// the encoding alone: the messages that wrap it in a response (Any,
// adspb.Resource) are made per response, since a ztunnel's set has
// one resource per workload of its network and the wrappers would cost
// more than the encodings.
type Resource struct {
	Name string
	// Version is a hash of the encoding: equal resources have equal
	// versions across restarts and hub replicas, so a reconnecting proxy
	// is sent only what changed.
	Version string
	TypeURL string
	Value   []byte
	// Sum hashes the name and version, for the version of the sets that
	// hold the resource: computed once here, not once per set (a change
	// reaches every EDS view). FNV, not a seeded hash: every replica must
	// compute the same sums.
	Sum uint64
}

// NewResource wraps an encoding, which must be deterministic (its hash is
// the version).
func NewResource(typeURL, name string, encoded []byte) *Resource {
	sum := sha256.Sum256(encoded)
	version := hex.EncodeToString(sum[:8])
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(version))
	return &Resource{Name: name, Version: version, TypeURL: typeURL, Value: encoded, Sum: h.Sum64()}
}

// Any is the resource in a state-of-the-world response; it shares the
// encoding.
func (r *Resource) Any() *anypb.Any { return &anypb.Any{TypeUrl: r.TypeURL, Value: r.Value} }

// Delta is the resource in a delta response; it shares the encoding.
func (r *Resource) Delta() *adspb.Resource {
	return &adspb.Resource{Name: r.Name, Version: r.Version, Resource: r.Any()}
}
