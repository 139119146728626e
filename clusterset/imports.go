package clusterset

import (
	"net/netip"
	"slices"

	"github.com/meshfed/meshfed/federation"
)

// Import is what the hub decides about an MCS import (a service some
// cluster exports with a ServiceExport) that no single cluster's export
// says: the merge of the exports is the ServiceView, these are the
// decisions the registry takes across clusters, from what the member
// clusters report they hold. Every reader of a snapshot sees one answer.
type Import struct {
	// ClustersetIPs are the import's ClusterSetIPs, one per family of
	// ServiceView.ImportFamilies, in that order; none for a headless
	// import. An invalid address stands for a family that has none.
	ClustersetIPs []netip.Addr
	// IPError says why a ClusterSetIP is missing.
	IPError string
	// Ready lists the exporting clusters whose export every member
	// cluster holds, sorted.
	Ready []federation.ClusterID
}

// Equal reports whether i and o hold the same decisions.
func (i Import) Equal(o Import) bool {
	return slices.Equal(i.ClustersetIPs, o.ClustersetIPs) && i.IPError == o.IPError && slices.Equal(i.Ready, o.Ready)
}

// IsZero reports an import without decisions (or a service that is no
// import).
func (i Import) IsZero() bool {
	return len(i.ClustersetIPs) == 0 && i.IPError == "" && len(i.Ready) == 0
}
