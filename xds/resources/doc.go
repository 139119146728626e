// Package resources translates clusterset services into xDS resources for
// Envoy sidecars and proxyless gRPC clients: one CDS cluster, one LDS
// api_listener and one RDS route configuration per (hostname, port) of a
// service, and per-view EDS load assignments.
//
// It writes their protobuf encodings directly, without go-control-plane's
// generated types: linked, their descriptors would cost the hub megabytes
// of binary and of heap. The bytes are those of proto's deterministic
// marshalling of the messages package reference builds (for EDS, with
// each lb_endpoint's metadata last), which the tests check.
//
// Everything here is a pure function of its arguments: no I/O, no clock, no
// goroutines. Inputs are read, never modified. Outputs are fresh.
//
// Names follow Istio: the cluster, the route configuration and the EDS
// resource of port p of host h are all "outbound|p||h"; the listener is
// "h:p".
//
// A ClusterLoadAssignment depends only on the service, the gateways and the
// proxy's View (network and locality), so proxies with equal Views share
// it. Every assignment obeys the rules of grpc-go's xDS client, which NACKs
// a whole resource for one violation:
//   - every LocalityLbEndpoints has a locality and a load_balancing_weight
//     equal to the sum of its endpoints' weights, which are all >= 1;
//   - the sum of all weights stays below 2^31, so no locality or priority
//     sum overflows uint32;
//   - no address:port appears twice, and no locality appears twice in one
//     priority (a locality with live and stale clusters' endpoints has one
//     entry in a live priority and one in a stale priority);
//   - priorities are contiguous from 0;
//   - endpoints on another network than the proxy's never appear: they are
//     replaced by that network's east-west gateways, or dropped when it has
//     none;
//   - the order of localities and endpoints is deterministic, so equal
//     inputs give byte-equal resources.
package resources
