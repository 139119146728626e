package federation

import (
	"testing"

	"github.com/meshfed/meshfed/federation/federationpb"
)

func TestViaGateway(t *testing.T) {
	for _, tc := range []struct {
		network, receiver string
		want              bool
	}{
		{"", "n1", false},   // on its cluster's network, the receiver's
		{"n1", "n1", false}, // its own network, the receiver's
		{"n2", "n1", true},  // another network's: only its gateway is sent
		{"n2", "", true},
	} {
		if got := ViaGateway(&federationpb.Endpoint{Network: tc.network}, tc.receiver); got != tc.want {
			t.Errorf("endpoint on %q to %q: %v, want %v", tc.network, tc.receiver, got, tc.want)
		}
	}
}
