// Package adspb holds the messages of Envoy's aggregated discovery service
// that the hub serves proxies with (and the spoke istiod), wire-compatible
// with Envoy's (see ads.proto), and the service's registration.
package adspb
