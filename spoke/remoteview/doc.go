// Package remoteview builds, from the imports a hub sends a spoke that
// serves remote views, the Kubernetes objects each other member's view
// holds (package kubeview serves them): what istiod's multicluster code
// reads of a remote cluster, limited to what that member exports.
//
// For a member, its view holds:
//   - each service it exports, as its Service (its ClusterIPs and ports),
//     labelled istio.io/global: "true" (what the ambient profile's
//     serviceScopeConfigs select: an exported service is global), with a
//     selector that picks exactly the pods behind its endpoints;
//   - those pods, from the workloads behind the endpoints: name, uid,
//     service account, node, IPs, readiness, the labels meshes read (app,
//     version, canonical name and revision, tlsMode, network) and the
//     ambient redirection annotation;
//   - EndpointSlices of the endpoints, as they are;
//   - the nodes the pods run on, with their locality's topology labels;
//   - istio-system, labelled with the member's network, and every
//     service's namespace;
//   - each of its HBONE east-west gateways as a Gateway of class
//     istio-east-west, with its network, an HBONE listener and its
//     address in the status (how istiod finds a remote network's gateway);
//   - the Gateway CRD (metadata only), so that istiod watches Gateways;
//   - the istio ConfigMap with its trust domain, when the hub knows one.
//
// Invariants:
//   - Build is a pure function of the set: every spoke builds the same
//     views of the same set.
//   - The receiving cluster has no view of itself, and a member the hub
//     no longer lists (withdrawn) has none.
package remoteview
