// Package adspb holds the messages of Envoy's aggregated discovery service
// that the hub serves proxies with (and the spoke istiod), wire-compatible
// with Envoy's (see ads.proto), the service's registration, and the loop
// that reads a stream's requests, which every ADS server here shares.
package adspb
