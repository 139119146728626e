// Package mcp serves the cluster's own istiod the clusterset's services,
// over the config source istiod already has: MCP over xDS
// (`meshConfig.configSources: [{address: k8s://}, {address: xds://<spoke>}]`).
// istiod then keeps watching only its own cluster, holds no remote
// secrets, and gives its sidecars and proxyless gRPC clients the other
// clusters' endpoints through its own, unchanged config generation.
//
// What istiod is served, per federated service with endpoints in another
// cluster: one ServiceEntry named meshfed-<service> in the service's
// namespace, for its cluster-local hostname, with the other clusters'
// endpoints inline (never this cluster's: istiod has them from its own
// cluster, and they would count twice). When the cluster has a Service of
// that name, istiod merges the two (same hostname, namespace and port
// names; the Service's definition wins) and unions the endpoints. Each
// MCS import also gets meshfed-<service>-clusterset, for its clusterset
// hostname and ClusterSetIPs, with every cluster's endpoints. Endpoints on
// another network come from the hub already replaced by that network's
// east-west gateways, so istiod needs no meshNetworks of its own.
//
// Inline endpoints rather than WorkloadEntries: a service is one resource
// to version and to send, where 100,000 endpoints would be as many.
//
// The protocol is istiod's (see the team's notes on it): state-of-the-world
// ADS, each response the full state of its type, each resource an Any of
// istio.mcp.v1alpha1.Resource whose version changes with its body, every
// subscribed type answered (empty where there is nothing), or istiod never
// becomes ready.
//
// Invariants:
//   - ServiceEntries are answered only once a hub replica has sent the
//     clusterset's imports, or InitialWait after the server started: an
//     istiod that reconnects to a restarted spoke keeps its entries until
//     the spoke knows them again, and one that starts while the hub is
//     unreachable still starts (with none).
//   - Every other type is answered at once, empty.
//   - Versions are hashes of the encodings: the same content is the same
//     version, whatever spoke serves it.
package mcp
