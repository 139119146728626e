package importwriter

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Ownership markers. Every object meshfed writes carries one; an object
// without it is somebody else's, which the writer never changes or
// deletes, and its informers never see (they select on the marker).
const (
	// LabelManagedBy on a ServiceImport, with value [ManagedBy], marks it
	// as meshfed's. It is the one label of a ServiceImport that is not an
	// exported label; it wins over an exported label of the same key.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "meshfed-spoke"
	// SliceManagedBy is the value of endpointslice.kubernetes.io/managed-by
	// on meshfed's EndpointSlices: the label Kubernetes reserves for
	// telling slice writers apart, so the endpointslice controller and
	// mirroring controller leave them alone.
	SliceManagedBy = "spoke.meshfed.io"
)

// AnnotationImportedKeys on a ServiceImport lists the label and
// annotation keys meshfed wrote there, the import's exported ones
// ("labels=a,b;annotations=c"): a key the import drops is removed, a key
// another controller or an admission webhook adds is kept (and not
// fought over, which would be a write loop).
const AnnotationImportedKeys = "meshfed.io/imported-keys"

// Selectors of the writer's informers: meshfed's objects only.
var (
	importSelector = LabelManagedBy + "=" + ManagedBy
	sliceSelector  = discoveryv1.LabelManagedBy + "=" + SliceManagedBy
)

// MaxEndpointsPerSlice is the API server's limit on a slice's endpoints.
const MaxEndpointsPerSlice = 1000

// desiredImport returns the ServiceImport im asks for: spec, labels and
// annotations, and status.clusters. Lists are never nil where the API
// server would keep an empty one, so that a stored object compares equal.
func desiredImport(im *federationpb.Import) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   im.GetNamespace(),
			Name:        im.GetName(),
			Labels:      keyValues(im.GetLabels()),
			Annotations: keyValues(im.GetAnnotations()),
		},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:  mcsv1beta1.ClusterSetIP,
			Ports: make([]mcsv1beta1.ServicePort, 0, len(im.GetPorts())),
			IPs:   slices.Clone(im.GetIps()),
		},
	}
	if si.Labels == nil {
		si.Labels = map[string]string{}
	}
	if si.Annotations == nil {
		si.Annotations = map[string]string{}
	}
	si.Annotations[AnnotationImportedKeys] = importedKeys(si.Labels, si.Annotations)
	si.Labels[LabelManagedBy] = ManagedBy
	if im.GetType() == federationpb.ImportType_IMPORT_TYPE_HEADLESS {
		si.Spec.Type = mcsv1beta1.Headless
	}
	for _, p := range im.GetPorts() {
		si.Spec.Ports = append(si.Spec.Ports, mcsv1beta1.ServicePort{
			Name: p.GetName(), Protocol: protocol(p.GetProtocol()), AppProtocol: optional(p.GetAppProtocol()), Port: int32(p.GetPort()),
		})
	}
	for _, f := range im.GetIpFamilies() {
		switch f {
		case federationpb.IPFamily_IP_FAMILY_IPV4:
			si.Spec.IPFamilies = append(si.Spec.IPFamilies, corev1.IPv4Protocol)
		case federationpb.IPFamily_IP_FAMILY_IPV6:
			si.Spec.IPFamilies = append(si.Spec.IPFamilies, corev1.IPv6Protocol)
		}
	}
	si.Spec.SessionAffinity = corev1.ServiceAffinityNone
	if im.GetSessionAffinity() == federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP {
		si.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if t := im.GetSessionAffinityTimeoutSeconds(); t > 0 {
			si.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(t))}}
		}
	}
	if p := im.GetInternalTrafficPolicy(); p != "" {
		si.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicy(p))
	}
	si.Spec.TrafficDistribution = optional(im.GetTrafficDistribution())
	for _, c := range im.GetClusters() {
		si.Status.Clusters = append(si.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: c})
	}
	slices.SortFunc(si.Status.Clusters, func(a, b mcsv1beta1.ClusterStatus) int { return strings.Compare(a.Cluster, b.Cluster) })
	si.Status.Conditions = []metav1.Condition{readyCondition(im)}
	return si
}

// ReasonClusterSetIPExhausted is the Ready condition's reason when the
// hub's clusterset CIDR of a family the import needs has no address left.
const ReasonClusterSetIPExhausted = "ClusterSetIPExhausted"

// readyCondition is the import's Ready condition: false, saying why, while
// it lacks a ClusterSetIP of a family it needs (the hub has no clusterset
// CIDR of that family, or that CIDR is exhausted). Its transition time is
// set when written.
func readyCondition(im *federationpb.Import) metav1.Condition {
	c := metav1.Condition{
		Type:    string(mcsv1beta1.ServiceImportConditionReady),
		Status:  metav1.ConditionTrue,
		Reason:  string(mcsv1beta1.ServiceImportReasonReady),
		Message: "the import has a ClusterSetIP of every IP family it needs",
	}
	if im.GetType() == federationpb.ImportType_IMPORT_TYPE_HEADLESS {
		c.Message = "the import is headless: its name resolves to the exporting clusters' endpoints"
	}
	if msg := im.GetIpError(); msg != "" {
		c.Status, c.Message = metav1.ConditionFalse, msg
		c.Reason = string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported)
		if strings.Contains(msg, "exhausted") {
			c.Reason = ReasonClusterSetIPExhausted
		}
	}
	return c
}

func keyValues(kvs []*federationpb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// protocol maps a port's protocol; unspecified is Kubernetes' default,
// TCP, written out so that what is stored is what is compared.
func protocol(p federationpb.Protocol) corev1.Protocol {
	switch p {
	case federationpb.Protocol_PROTOCOL_UDP:
		return corev1.ProtocolUDP
	case federationpb.Protocol_PROTOCOL_SCTP:
		return corev1.ProtocolSCTP
	default:
		return corev1.ProtocolTCP
	}
}

// importedKeys encodes the exported label and annotation keys of an
// import for [AnnotationImportedKeys].
func importedKeys(labels, annotations map[string]string) string {
	return "labels=" + strings.Join(slices.Sorted(maps.Keys(labels)), ",") +
		";annotations=" + strings.Join(slices.Sorted(maps.Keys(annotations)), ",")
}

// parseImportedKeys decodes [AnnotationImportedKeys].
func parseImportedKeys(v string) (labels, annotations []string) {
	for part := range strings.SplitSeq(v, ";") {
		name, keys, _ := strings.Cut(part, "=")
		var list []string
		if keys != "" {
			list = strings.Split(keys, ",")
		}
		switch name {
		case "labels":
			labels = list
		case "annotations":
			annotations = list
		}
	}
	return labels, annotations
}

// merged returns cur with want's entries set and the keys meshfed owned
// before (owned) but want lacks removed; the rest is another's and stays.
func merged(cur, want map[string]string, owned []string) map[string]string {
	out := make(map[string]string, len(cur)+len(want))
	maps.Copy(out, cur)
	for _, k := range owned {
		if _, ok := want[k]; !ok {
			delete(out, k)
		}
	}
	maps.Copy(out, want)
	return out
}

// importMeta returns the labels and annotations the stored import cur
// should have: the desired ones, and the others' it has.
func importMeta(cur, want *mcsv1beta1.ServiceImport) (labels, annotations map[string]string) {
	ownedLabels, ownedAnnotations := parseImportedKeys(cur.Annotations[AnnotationImportedKeys])
	return merged(cur.Labels, want.Labels, ownedLabels), merged(cur.Annotations, want.Annotations, ownedAnnotations)
}

// importChanged reports whether the stored import differs from the
// desired one in what the writer writes with an update (not status).
func importChanged(cur, want *mcsv1beta1.ServiceImport) bool {
	labels, annotations := importMeta(cur, want)
	return !maps.Equal(cur.Labels, labels) || !maps.Equal(nilIfEmpty(cur.Annotations), nilIfEmpty(annotations)) ||
		!specEqual(&cur.Spec, &want.Spec)
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func specEqual(a, b *mcsv1beta1.ServiceImportSpec) bool {
	return a.Type == b.Type && a.SessionAffinity == b.SessionAffinity &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y mcsv1beta1.ServicePort) bool {
			return x.Name == y.Name && x.Protocol == y.Protocol && x.Port == y.Port && ptr.Equal(x.AppProtocol, y.AppProtocol)
		}) &&
		slices.Equal(a.IPs, b.IPs) && slices.Equal(a.IPFamilies, b.IPFamilies) &&
		timeout(a.SessionAffinityConfig) == timeout(b.SessionAffinityConfig) &&
		ptr.Equal(a.InternalTrafficPolicy, b.InternalTrafficPolicy) && ptr.Equal(a.TrafficDistribution, b.TrafficDistribution)
}

// timeout is a session affinity config's timeout, -1 for none.
func timeout(c *corev1.SessionAffinityConfig) int32 {
	if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
		return -1
	}
	return *c.ClientIP.TimeoutSeconds
}

// statusChanged reports whether status.clusters differ, or (with
// conditions) the Ready condition does, or was written for an older
// generation.
func statusChanged(cur, want *mcsv1beta1.ServiceImport, conditions bool) bool {
	if !slices.Equal(cur.Status.Clusters, want.Status.Clusters) {
		return true
	}
	if !conditions {
		return false
	}
	w := meta.FindStatusCondition(want.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
	c := meta.FindStatusCondition(cur.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
	return c == nil || c.Status != w.Status || c.Reason != w.Reason || c.Message != w.Message || c.ObservedGeneration != cur.Generation
}

// sliceGroup is the endpoints of one slice family and port set of one
// exporting cluster.
type sliceGroup struct {
	family    discoveryv1.AddressType
	ports     []discoveryv1.EndpointPort
	portsKey  string
	endpoints []discoveryv1.Endpoint
}

// desiredSlices returns the MCS EndpointSlices of im, by name: per
// exporting cluster, address family (IPv4, IPv6, FQDN for gateways known
// by name) and port set, sorted by address and cut every
// MaxEndpointsPerSlice endpoints. owner is the ServiceImport they belong
// to. Names are deterministic (see [sliceName]), so that a restarted
// writer finds the slices it wrote.
func desiredSlices(im *federationpb.Import, owner metav1.OwnerReference) map[string]*discoveryv1.EndpointSlice {
	out := map[string]*discoveryv1.EndpointSlice{}
	for _, src := range im.GetSources() {
		groups := map[string]*sliceGroup{}
		seen := map[string]bool{}
		for _, ep := range src.GetEndpoints() {
			family, ok := addressType(ep.GetAddress())
			if !ok {
				continue // the hub validated it; nothing to write for a stranger
			}
			ports, key := endpointPorts(ep.GetPorts())
			gk := string(family) + "|" + key
			if seen[gk+"|"+ep.GetAddress()] {
				continue // one address once per slice group: several pods behind one gateway
			}
			seen[gk+"|"+ep.GetAddress()] = true
			g := groups[gk]
			if g == nil {
				g = &sliceGroup{family: family, ports: ports, portsKey: key}
				groups[gk] = g
			}
			g.endpoints = append(g.endpoints, endpoint(ep))
		}
		for _, g := range groups {
			slices.SortFunc(g.endpoints, func(a, b discoveryv1.Endpoint) int { return cmp.Compare(a.Addresses[0], b.Addresses[0]) })
			for i := 0; i*MaxEndpointsPerSlice < len(g.endpoints); i++ {
				eps := g.endpoints[i*MaxEndpointsPerSlice : min((i+1)*MaxEndpointsPerSlice, len(g.endpoints))]
				name := sliceName(im.GetName(), src.GetCluster(), g.family, g.portsKey, i)
				out[name] = &discoveryv1.EndpointSlice{
					ObjectMeta: metav1.ObjectMeta{
						Namespace: im.GetNamespace(), Name: name,
						Labels: map[string]string{
							mcsv1beta1.LabelServiceName:   im.GetName(),
							mcsv1beta1.LabelSourceCluster: src.GetCluster(),
							discoveryv1.LabelManagedBy:    SliceManagedBy,
						},
						OwnerReferences: []metav1.OwnerReference{owner},
					},
					AddressType: g.family,
					Ports:       g.ports,
					Endpoints:   eps,
				}
			}
		}
	}
	return out
}

// addressType returns the slice family of an endpoint address: an IP's,
// or FQDN for a DNS name (an east-west gateway known by its load
// balancer's hostname).
func addressType(addr string) (discoveryv1.AddressType, bool) {
	if ip, err := netip.ParseAddr(addr); err == nil {
		if ip.Is4() {
			return discoveryv1.AddressTypeIPv4, true
		}
		if ip.Zone() == "" && !ip.Is4In6() {
			return discoveryv1.AddressTypeIPv6, true
		}
		return "", false
	}
	if addr == "" || len(addr) > 253 {
		return "", false
	}
	return discoveryv1.AddressTypeFQDN, true
}

// endpointPorts returns an endpoint's ports as a slice's, sorted, and a
// key that tells port sets apart.
func endpointPorts(ports []*federationpb.EndpointPort) ([]discoveryv1.EndpointPort, string) {
	out := make([]discoveryv1.EndpointPort, 0, len(ports))
	for _, p := range ports {
		out = append(out, discoveryv1.EndpointPort{
			Name: ptr.To(p.GetName()), Protocol: ptr.To(protocol(p.GetProtocol())),
			AppProtocol: optional(p.GetAppProtocol()), Port: ptr.To(int32(p.GetPort())),
		})
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointPort) int {
		return cmp.Or(cmp.Compare(*a.Name, *b.Name), cmp.Compare(*a.Port, *b.Port), cmp.Compare(*a.Protocol, *b.Protocol))
	})
	var key strings.Builder
	for _, p := range out {
		fmt.Fprintf(&key, "%s/%s/%d/%s;", *p.Name, *p.Protocol, *p.Port, ptr.Deref(p.AppProtocol, ""))
	}
	return out, key.String()
}

// endpoint converts one endpoint. The node name stays out: it names a
// node of another cluster, and topology-aware routing would misread it.
func endpoint(ep *federationpb.Endpoint) discoveryv1.Endpoint {
	out := discoveryv1.Endpoint{
		Addresses: []string{ep.GetAddress()},
		Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(ep.GetReady()), Serving: ptr.To(ep.GetServing()), Terminating: ptr.To(ep.GetTerminating()),
		},
		Hostname: optional(ep.GetHostname()),
		Zone:     optional(ep.GetLocality().GetZone()),
	}
	return out
}

// sliceName names one slice: the service, the exporting cluster and the
// family to read, and a hash of those with the port set and the slice's
// index, so that names are unique in the namespace (a service "a-b" of
// cluster "c" and a service "a" of cluster "b-c" read alike) and a
// restarted writer computes the same ones.
func sliceName(service, cluster string, family discoveryv1.AddressType, portsKey string, index int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%s\x00%d", service, cluster, family, portsKey, index))
	return fmt.Sprintf("%s-%s-%s-%s", service, cluster, strings.ToLower(string(family)), hex.EncodeToString(sum[:5]))
}

// sliceChanged reports whether a stored slice differs from the desired
// one in what the writer writes.
// Labels others add to it are kept (see [AnnotationImportedKeys]).
func sliceChanged(cur, want *discoveryv1.EndpointSlice) bool {
	return !maps.Equal(cur.Labels, merged(cur.Labels, want.Labels, nil)) || cur.AddressType != want.AddressType ||
		!ownersEqual(cur.OwnerReferences, want.OwnerReferences) ||
		!slices.EqualFunc(cur.Ports, want.Ports, portEqual) ||
		!slices.EqualFunc(cur.Endpoints, want.Endpoints, endpointEqual)
}

func ownersEqual(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.APIVersion == y.APIVersion && x.Kind == y.Kind && x.Name == y.Name && x.UID == y.UID &&
			ptr.Deref(x.Controller, false) == ptr.Deref(y.Controller, false)
	})
}

func portEqual(a, b discoveryv1.EndpointPort) bool {
	return ptr.Equal(a.Name, b.Name) && ptr.Equal(a.Protocol, b.Protocol) && ptr.Equal(a.Port, b.Port) && ptr.Equal(a.AppProtocol, b.AppProtocol)
}

func endpointEqual(a, b discoveryv1.Endpoint) bool {
	return slices.Equal(a.Addresses, b.Addresses) &&
		ptr.Equal(a.Conditions.Ready, b.Conditions.Ready) && ptr.Equal(a.Conditions.Serving, b.Conditions.Serving) &&
		ptr.Equal(a.Conditions.Terminating, b.Conditions.Terminating) &&
		ptr.Equal(a.Hostname, b.Hostname) && ptr.Equal(a.Zone, b.Zone)
}

// ownerRef is the reference of a slice to its ServiceImport, of the
// version the writer reads, so that Kubernetes' garbage collector removes
// the slices with it (meshfed does not rely on it: it deletes the slices
// it no longer wants itself).
func ownerRef(apiVersion, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: mcsv1beta1.ServiceImportKindName, Name: name, UID: uid}
}
