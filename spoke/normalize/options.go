package normalize

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// ExportPolicy selects which Services of a cluster are federated.
type ExportPolicy string

const (
	// ExportExported federates a Service that has an MCS ServiceExport of
	// the same name or the label meshfed.io/export: "true". The default.
	ExportExported ExportPolicy = "exported"
	// ExportAll federates every Service except ExternalName ones, those
	// labelled meshfed.io/export: "false", and the cluster's own plumbing
	// (the kube-* namespaces and default/kubernetes), which would otherwise
	// merge unrelated clusters' API servers and DNS into one service.
	// A ServiceExport or the label still exports those.
	ExportAll ExportPolicy = "all"
)

// Options describe the cluster whose objects are normalized.
type Options struct {
	ClusterID       string
	Network         string // the --network flag: the cluster's default network
	TrustDomain     string // default "cluster.local"
	DomainSuffix    string // default "cluster.local"; hostnames are <name>.<ns>.svc.<DomainSuffix>
	SystemNamespace string // default "istio-system"
	// GatewayNamespaces are the only namespaces east-west gateways are
	// read from (default: SystemNamespace). A gateway attracts another
	// network's traffic, so declaring one is for the platform team, not
	// for whoever may create a Service somewhere in the cluster.
	GatewayNamespaces []string
	Export            ExportPolicy
}

// WithDefaults returns o with its empty fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.TrustDomain == "" {
		o.TrustDomain = "cluster.local"
	}
	if o.DomainSuffix == "" {
		o.DomainSuffix = "cluster.local"
	}
	if o.SystemNamespace == "" {
		o.SystemNamespace = "istio-system"
	}
	if len(o.GatewayNamespaces) == 0 {
		o.GatewayNamespaces = []string{o.SystemNamespace}
	}
	if o.Export == "" {
		o.Export = ExportExported
	}
	return o
}

// Validate reports options no cluster can have. The functions of this
// package still accept them: an unknown export policy acts as
// [ExportExported], which exports the least.
func (o Options) Validate() error {
	switch o.WithDefaults().Export {
	case ExportExported, ExportAll:
	default:
		return fmt.Errorf("%w: export policy %q: want %q or %q", ErrInvalidOptions, o.Export, ExportExported, ExportAll)
	}
	if o.ClusterID == "" {
		return fmt.Errorf("%w: cluster ID is empty", ErrInvalidOptions)
	}
	return nil
}

// ClusterNetwork returns the cluster's default network: the
// topology.istio.io/network label of the system namespace if it has one,
// else o.Network.
func ClusterNetwork(in Inputs, o Options) string {
	o = o.WithDefaults()
	if ns, ok := in.Namespace(o.SystemNamespace); ok {
		if network := ns.Labels[LabelNetwork]; network != "" {
			return network
		}
	}
	return o.Network
}

// networkOverride returns the network of a pod when it differs from the
// cluster's, else "". pod may be nil when only its namespace is known.
func networkOverride(in Inputs, clusterNetwork string, pod *Pod, namespace string) string {
	network := ""
	if pod != nil {
		network = pod.Labels[LabelNetwork]
	}
	if network == "" {
		if ns, ok := in.Namespace(namespace); ok {
			network = ns.Labels[LabelNetwork]
		}
	}
	if network == clusterNetwork {
		return ""
	}
	return network
}

// nodeLocality returns the locality of a node from its labels. zone is
// used when the node is unknown or has no zone label (an EndpointSlice
// carries its endpoint's zone). It returns nil for an empty locality.
func nodeLocality(in Inputs, nodeName, zone string) *federationpb.Locality {
	var l federationpb.Locality
	if node, ok := in.Node(nodeName); ok && nodeName != "" {
		l.Region = node.Labels[LabelRegion]
		l.Zone = node.Labels[LabelZone]
		l.Subzone = node.Labels[LabelSubzone]
	}
	if l.Zone == "" {
		l.Zone = zone
	}
	if l.Region == "" && l.Zone == "" && l.Subzone == "" {
		return nil
	}
	return &l
}

// timestamp converts a Kubernetes time, keeping an unset time unset: the
// zero time would win every "oldest export" comparison.
func timestamp(t metav1.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t.Time)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
