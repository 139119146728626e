// Package pki mints and loads the certificates of the spoke↔hub mTLS link
// and builds the TLS configurations both sides use. It also exports when
// the certificates in use expire ([ExpiryCollector]) and makes the hub's
// failed handshakes visible ([ObservedCredentials]).
//
// Every certificate is an X.509 SVID: its only URI SAN is a SPIFFE ID
// (spiffe://<trust domain>/meshfed/cluster/<id> for a spoke,
// spiffe://<trust domain>/meshfed/hub for a hub, see package federation),
// and the hub binds the cluster a spoke may publish to that ID
// ([PeerSPIFFEID]).
//
// Invariants:
//   - TLS 1.3 is the minimum; the hub requires and verifies client certificates.
//   - Key pairs and CA bundles are re-read from disk when their files change
//     (cert-manager rotation, a CA rotated with overlap), checked lazily
//     during handshakes (and metric scrapes) at most every few seconds; a
//     file that fails to load never replaces what is in use, and every
//     handshake verifies against the bundle in use when it starts.
//   - [UpdateLocal] never replaces a CA unless asked to: a new CA orphans
//     every certificate the previous one signed.
//   - Nothing here starts a goroutine.
package pki
