package translate

import (
	"crypto/sha256"
	"encoding/hex"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Resource is one resource, encoded once. Sets of several views and the
// responses of every proxy share it; nothing holds it mutably.
type Resource struct {
	Name string
	// Version is a hash of the encoding: equal resources have equal
	// versions across restarts and hub replicas, so a reconnecting proxy
	// is sent only what changed.
	Version string
	// Any is the state-of-the-world form, Delta the delta form sharing it.
	Any   *anypb.Any
	Delta *discovery.Resource
}

// NewResource wraps an encoding, which must be deterministic (its hash is
// the version).
func NewResource(typeURL, name string, encoded []byte) *Resource {
	sum := sha256.Sum256(encoded)
	a := &anypb.Any{TypeUrl: typeURL, Value: encoded}
	v := hex.EncodeToString(sum[:8])
	return &Resource{Name: name, Version: v, Any: a, Delta: &discovery.Resource{Name: name, Version: v, Resource: a}}
}
