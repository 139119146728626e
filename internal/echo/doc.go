// Package echo is the demo's stand-in for a service's pods: a gRPC server
// that answers the standard health service and tags every reply with the
// cluster it runs in (response header [HeaderKey]), so a client can see
// which cluster the mesh routed it to.
package echo
