// Package pki mints and loads the certificates of the spoke↔hub mTLS link
// and builds the TLS configurations both sides use.
//
// Every certificate is an X.509 SVID: its only URI SAN is a SPIFFE ID
// (spiffe://<trust domain>/meshfed/cluster/<id> for a spoke,
// spiffe://<trust domain>/meshfed/hub for a hub, see package federation),
// and the hub binds the cluster a spoke may publish to that ID
// ([PeerSPIFFEID]).
//
// Invariants:
//   - TLS 1.3 is the minimum; the hub requires and verifies client certificates.
//   - Key pairs are re-read from disk when their files change (cert-manager
//     rotation), checked lazily during handshakes at most every few seconds;
//     a pair that fails to load never replaces the one in use.
//   - Nothing here starts a goroutine.
package pki
