package syncproto

import "github.com/meshfed/meshfed/federation/federationpb"

// ProtocolVersion is the version of the sync protocol this build speaks.
// It changes only when a peer of the previous version would misread a
// message; fields that an older peer may ignore do not change it.
const ProtocolVersion = 1

// MinProtocolVersion is the oldest spoke protocol a hub of this build
// serves. Hubs are upgraded before spokes, so a hub serves the spokes of
// the previous version while they are upgraded (docs/versions.md).
const MinProtocolVersion = 1

// spokeProtocol is the protocol version a Hello speaks: a spoke from
// before the protocol had versions sends none and speaks version 1.
func spokeProtocol(h *federationpb.Hello) uint32 {
	if v := h.GetProtocolVersion(); v != 0 {
		return v
	}
	return 1
}
