package syncproto

import (
	"context"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// SpokeTransport is one Sync stream as the spoke sees it. Send and Recv
// are called from different goroutines, each from one at a time, as gRPC
// streams allow.
type SpokeTransport interface {
	Send(*federationpb.SpokeMessage) error
	Recv() (*federationpb.HubMessage, error)
}

// HubTransport is one Sync stream as the hub sees it, with the same
// concurrency as [SpokeTransport].
type HubTransport interface {
	Send(*federationpb.HubMessage) error
	Recv() (*federationpb.SpokeMessage, error)
}

// Dialer opens a stream to the hub. The stream ends when ctx ends: its
// Send and Recv then fail.
type Dialer func(ctx context.Context) (SpokeTransport, error)
