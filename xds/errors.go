package xds

import "errors"

// Why an [Authorizer] refuses a proxy. An Authorizer's refusals that wrap
// neither are counted as "denied".
var (
	// ErrForeignTrustDomain: the proxy's identity is in none of the
	// clusterset's trust domains.
	ErrForeignTrustDomain = errors.New("foreign trust domain")
	// ErrClusterTrustDomain: the proxy claims a cluster whose workloads
	// are in another trust domain than its identity.
	ErrClusterTrustDomain = errors.New("not the claimed cluster's trust domain")
)
