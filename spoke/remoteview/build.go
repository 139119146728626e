package remoteview

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/kubeview"
)

// Names istiod reads.
const (
	SystemNamespace  = "istio-system"
	LabelNetwork     = "topology.istio.io/network"
	LabelGlobal      = "istio.io/global"
	EastWestClass    = "istio-east-west"
	maxSliceEndpoint = 1000 // what the EndpointSlice controller puts in one slice
	managedBy        = "meshfed.io"
)

// View is the objects of one member's view.
type View struct {
	Cluster        *federationpb.Cluster
	Namespaces     []*corev1.Namespace
	Nodes          []*corev1.Node
	Pods           []*corev1.Pod
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Gateways       []*gatewayv1.Gateway
	ConfigMaps     []*corev1.ConfigMap

	pods  map[string]*corev1.Pod // by uid
	nodes map[string]*corev1.Node
}

// Build returns the view of every member of set but self, by member; or,
// with only, of those members alone.
func Build(set *imports.Set, self federation.ClusterID, only map[federation.ClusterID]bool) map[federation.ClusterID]*View {
	views := map[federation.ClusterID]*View{}
	if set == nil {
		return views
	}
	for _, c := range set.Clusters {
		if id := federation.ClusterID(c.GetId()); id != self && (only == nil || only[id]) {
			views[id] = &View{Cluster: c, pods: map[string]*corev1.Pod{}, nodes: map[string]*corev1.Node{}}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(set.Imports)) {
		im := set.Imports[key]
		for _, src := range im.GetSources() {
			if v := views[federation.ClusterID(src.GetCluster())]; v != nil {
				v.addService(im, src)
			}
		}
	}
	for _, v := range views {
		v.finish()
	}
	return views
}

// Members returns the members set lists but self, sorted (not nil: an
// empty clusterset is none).
func Members(set *imports.Set, self federation.ClusterID) []federation.ClusterID {
	out := []federation.ClusterID{}
	for _, c := range set.Clusters {
		if id := federation.ClusterID(c.GetId()); id != self {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Touched returns the members whose views differ between prev and set, a
// later set: a source of an import that changed (a set's imports are
// replaced, never modified), or the member's cluster. Nil (no prev):
// every member.
func Touched(prev, set *imports.Set) map[federation.ClusterID]bool {
	if prev == nil {
		return nil
	}
	out := map[federation.ClusterID]bool{}
	set.Changed(prev, func(key string) {
		for _, im := range []*federationpb.Import{prev.Imports[key], set.Imports[key]} {
			for _, src := range im.GetSources() {
				out[federation.ClusterID(src.GetCluster())] = true
			}
		}
	})
	was := map[string]*federationpb.Cluster{}
	for _, c := range prev.Clusters {
		was[c.GetId()] = c
	}
	for _, c := range set.Clusters {
		if !c.EqualVT(was[c.GetId()]) {
			out[federation.ClusterID(c.GetId())] = true
		}
	}
	return out
}

// selectorLabel is the label by which a view's Service selects the pods
// behind its endpoints: the pods' own labels are not sent.
// ipFamilies are a Service's spec.ipFamilies and ipFamilyPolicy: those of
// its cluster IPs, else (headless) the import's, else IPv4, as an API
// server of a single-stack cluster defaults them.
func ipFamilies(clusterIPs []string, imported []federationpb.IPFamily) ([]corev1.IPFamily, *corev1.IPFamilyPolicy) {
	var out []corev1.IPFamily
	for _, ip := range clusterIPs {
		f := corev1.IPv4Protocol
		if strings.Contains(ip, ":") {
			f = corev1.IPv6Protocol
		}
		if ip != corev1.ClusterIPNone && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		for _, f := range imported {
			switch f {
			case federationpb.IPFamily_IP_FAMILY_IPV6:
				out = append(out, corev1.IPv6Protocol)
			case federationpb.IPFamily_IP_FAMILY_IPV4:
				out = append(out, corev1.IPv4Protocol)
			}
		}
	}
	if len(out) == 0 {
		out = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	policy := corev1.IPFamilyPolicySingleStack
	if len(out) > 1 {
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	return out, &policy
}

func selectorLabel(service string) string { return service + ".service.meshfed.io/selected" }

func (v *View) addService(im *federationpb.Import, src *federationpb.ImportSource) {
	ns, name := im.GetNamespace(), im.GetName()
	labels := map[string]string{LabelGlobal: "true"}
	for _, kv := range im.GetLabels() {
		labels[kv.GetKey()] = kv.GetValue()
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{selectorLabel(name): "true"}},
	}
	switch {
	case im.GetType() == federationpb.ImportType_IMPORT_TYPE_HEADLESS:
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	case len(src.GetClusterIps()) > 0:
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = src.GetClusterIps()[0], src.GetClusterIps()
	}
	// As an API server defaults them: istiod's ambient index reads a
	// service's IP families from them (the workload API's ip_families).
	svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = ipFamilies(src.GetClusterIps(), im.GetIpFamilies())
	ports := src.GetClusterPorts()
	if len(ports) == 0 {
		ports = im.GetPorts() // a hub that sends no cluster ports: the clusterset's
	}
	for _, p := range ports {
		sp := corev1.ServicePort{Name: p.GetName(), Protocol: protocol(p.GetProtocol()), Port: int32(p.GetPort())}
		if p.GetAppProtocol() != "" {
			sp.AppProtocol = ptr.To(p.GetAppProtocol())
		}
		switch {
		case p.GetTargetPortName() != "":
			sp.TargetPort = intstr.FromString(p.GetTargetPortName())
		case p.GetTargetPort() != 0:
			sp.TargetPort = intstr.FromInt32(int32(p.GetTargetPort()))
		default:
			sp.TargetPort = intstr.FromInt32(sp.Port)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, sp)
	}
	v.Services = append(v.Services, svc)

	byUID := map[string]*federationpb.Workload{}
	for _, w := range src.GetWorkloads() {
		byUID[w.GetUid()] = w
	}
	for _, e := range src.GetClusterEndpoints() {
		w := byUID[e.GetWorkload().GetUid()]
		if w == nil {
			continue
		}
		pod := v.pod(w)
		pod.Labels[selectorLabel(name)] = "true"
		for _, p := range e.GetPorts() {
			v.containerPort(pod, ports, p)
		}
	}
	v.EndpointSlices = append(v.EndpointSlices, endpointSlices(ns, name, src.GetClusterEndpoints())...)
}

// pod returns the pod of workload w, made on first use.
func (v *View) pod(w *federationpb.Workload) *corev1.Pod {
	if p := v.pods[w.GetUid()]; p != nil {
		return p
	}
	labels := map[string]string{}
	for k, val := range map[string]string{
		"app": w.GetApp(), "version": w.GetVersion(),
		"service.istio.io/canonical-name": w.GetCanonicalName(), "service.istio.io/canonical-revision": w.GetCanonicalRevision(),
		LabelNetwork: w.GetNetwork(),
	} {
		if val != "" {
			labels[k] = val
		}
	}
	if w.GetMeshTls() {
		labels["security.istio.io/tlsMode"] = "istio"
	}
	var annotations map[string]string
	if w.GetAmbient() {
		annotations = map[string]string{"ambient.istio.io/redirection": "enabled"}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.GetNamespace(), Name: w.GetName(), UID: types.UID(w.GetUid()), Labels: labels, Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: w.GetNode(), ServiceAccountName: w.GetServiceAccount(), Containers: []corev1.Container{{Name: "workload"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, ip := range w.GetIps() {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(p.Status.PodIPs) > 0 {
		p.Status.PodIP = p.Status.PodIPs[0].IP
	}
	ready := corev1.ConditionFalse
	if w.GetReady() {
		ready = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
	v.pods[w.GetUid()] = p
	if node := w.GetNode(); node != "" && v.nodes[node] == nil {
		l := w.GetLocality()
		labels := map[string]string{}
		for k, val := range map[string]string{corev1.LabelTopologyRegion: l.GetRegion(), corev1.LabelTopologyZone: l.GetZone(), "topology.istio.io/subzone": l.GetSubzone()} {
			if val != "" {
				labels[k] = val
			}
		}
		v.nodes[node] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels}}
	}
	return p
}

// containerPort gives pod the container port a named target port of the
// service resolves to for endpoint port p (istiod resolves names on the
// pod, as kube-proxy does).
func (v *View) containerPort(pod *corev1.Pod, ports []*federationpb.ServicePort, p *federationpb.EndpointPort) {
	i := slices.IndexFunc(ports, func(sp *federationpb.ServicePort) bool { return sp.GetName() == p.GetName() })
	if i < 0 || ports[i].GetTargetPortName() == "" {
		return
	}
	c := &pod.Spec.Containers[0]
	name := ports[i].GetTargetPortName()
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == name }) {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: int32(p.GetPort()), Protocol: protocol(p.GetProtocol())})
	}
}

// endpointSlices returns a service's endpoints as EndpointSlices, one per
// address family and set of ports, each at most maxSliceEndpoint long.
func endpointSlices(ns, service string, eps []*federationpb.Endpoint) []*discoveryv1.EndpointSlice {
	type group struct {
		family discoveryv1.AddressType
		ports  []discoveryv1.EndpointPort
		eps    []discoveryv1.Endpoint
	}
	var groups []*group
	for _, e := range eps {
		family := discoveryv1.AddressTypeIPv4
		if a, err := netip.ParseAddr(e.GetAddress()); err == nil && a.Is6() && !a.Is4In6() {
			family = discoveryv1.AddressTypeIPv6
		}
		var ports []discoveryv1.EndpointPort
		for _, p := range e.GetPorts() {
			ep := discoveryv1.EndpointPort{Name: ptr.To(p.GetName()), Protocol: ptr.To(protocol(p.GetProtocol())), Port: ptr.To(int32(p.GetPort()))}
			if p.GetAppProtocol() != "" {
				ep.AppProtocol = ptr.To(p.GetAppProtocol())
			}
			ports = append(ports, ep)
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.family == family && samePorts(g.ports, ports) })
		if i < 0 {
			groups = append(groups, &group{family: family, ports: ports})
			i = len(groups) - 1
		}
		out := discoveryv1.Endpoint{
			Addresses: []string{e.GetAddress()},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(e.GetReady()), Serving: ptr.To(e.GetServing()), Terminating: ptr.To(e.GetTerminating()),
			},
		}
		if e.GetNode() != "" {
			out.NodeName = ptr.To(e.GetNode())
		}
		if z := e.GetLocality().GetZone(); z != "" {
			out.Zone = ptr.To(z)
		}
		if e.GetHostname() != "" {
			out.Hostname = ptr.To(e.GetHostname())
		}
		if ref := e.GetWorkload(); ref.GetKind() == "Pod" {
			out.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: ref.GetName(), UID: types.UID(ref.GetUid())}
		}
		groups[i].eps = append(groups[i].eps, out)
	}
	var out []*discoveryv1.EndpointSlice
	for _, g := range groups {
		for start := 0; start < len(g.eps); start += maxSliceEndpoint {
			out = append(out, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: ns, Name: fmt.Sprintf("%s-%d", service, len(out)),
					Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: managedBy},
				},
				AddressType: g.family,
				Ports:       g.ports,
				Endpoints:   g.eps[start:min(start+maxSliceEndpoint, len(g.eps))],
			})
		}
	}
	return out
}

func samePorts(a, b []discoveryv1.EndpointPort) bool {
	return slices.EqualFunc(a, b, func(x, y discoveryv1.EndpointPort) bool {
		return *x.Name == *y.Name && *x.Protocol == *y.Protocol && *x.Port == *y.Port && ptr.Deref(x.AppProtocol, "") == ptr.Deref(y.AppProtocol, "")
	})
}

func protocol(p federationpb.Protocol) corev1.Protocol {
	switch p {
	case federationpb.Protocol_PROTOCOL_UDP:
		return corev1.ProtocolUDP
	case federationpb.Protocol_PROTOCOL_SCTP:
		return corev1.ProtocolSCTP
	}
	return corev1.ProtocolTCP
}

// finish adds what the services do not say: the namespaces, the nodes,
// the gateways and the mesh config, and sorts everything.
func (v *View) finish() {
	network := v.Cluster.GetNetwork()
	namespaces := map[string]map[string]string{SystemNamespace: {}}
	if network != "" {
		namespaces[SystemNamespace][LabelNetwork] = network
	}
	for _, s := range v.Services {
		if namespaces[s.Namespace] == nil {
			namespaces[s.Namespace] = nil
		}
	}
	v.Gateways = gateways(v.Cluster)
	for _, g := range v.Gateways {
		if _, ok := namespaces[g.Namespace]; !ok {
			namespaces[g.Namespace] = nil
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		v.Namespaces = append(v.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: namespaces[ns]}})
	}
	if td := v.Cluster.GetTrustDomain(); td != "" {
		v.ConfigMaps = []*corev1.ConfigMap{{
			ObjectMeta: metav1.ObjectMeta{Namespace: SystemNamespace, Name: "istio"},
			Data:       map[string]string{"mesh": "trustDomain: " + td + "\n"},
		}}
	}
	for _, uid := range slices.Sorted(maps.Keys(v.pods)) {
		v.Pods = append(v.Pods, v.pods[uid])
	}
	for _, n := range slices.Sorted(maps.Keys(v.nodes)) {
		v.Nodes = append(v.Nodes, v.nodes[n])
	}
}

// gateways returns a member's HBONE east-west gateways as the Gateways
// istiod reads from a remote cluster: one per gateway Service, with an
// HBONE listener per port and every address in its status.
func gateways(c *federationpb.Cluster) []*gatewayv1.Gateway {
	byService := map[string]*gatewayv1.Gateway{}
	for _, g := range c.GetGateways() {
		if g.GetProtocol() != federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE {
			continue
		}
		ns, name, ok := strings.Cut(g.GetService(), "/")
		if !ok || ns == "" || name == "" {
			ns, name = SystemNamespace, "istio-eastwestgateway"
		}
		network := cmp.Or(g.GetNetwork(), c.GetNetwork())
		key := ns + "/" + name + "/" + network
		gw := byService[key]
		if gw == nil {
			gw = &gatewayv1.Gateway{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelNetwork: network}},
				Spec:       gatewayv1.GatewaySpec{GatewayClassName: EastWestClass},
			}
			byService[key] = gw
		}
		port := gatewayv1.PortNumber(g.GetPort())
		if !slices.ContainsFunc(gw.Spec.Listeners, func(l gatewayv1.Listener) bool { return l.Port == port }) {
			gw.Spec.Listeners = append(gw.Spec.Listeners, gatewayv1.Listener{
				Name: gatewayv1.SectionName(fmt.Sprintf("mesh-%d", port)), Port: port, Protocol: "HBONE",
				TLS: &gatewayv1.ListenerTLSConfig{
					Mode:    ptr.To(gatewayv1.TLSModeTerminate),
					Options: map[gatewayv1.AnnotationKey]gatewayv1.AnnotationValue{"gateway.istio.io/tls-terminate-mode": "ISTIO_MUTUAL"},
				},
			})
		}
		typ := gatewayv1.HostnameAddressType
		if _, err := netip.ParseAddr(g.GetAddress()); err == nil {
			typ = gatewayv1.IPAddressType
		}
		if !slices.ContainsFunc(gw.Status.Addresses, func(a gatewayv1.GatewayStatusAddress) bool { return a.Value == g.GetAddress() }) {
			gw.Status.Addresses = append(gw.Status.Addresses, gatewayv1.GatewayStatusAddress{Type: ptr.To(typ), Value: g.GetAddress()})
		}
	}
	var out []*gatewayv1.Gateway
	for _, k := range slices.Sorted(maps.Keys(byService)) {
		out = append(out, byService[k])
	}
	return out
}

// gatewayCRD is the Gateway CRD as a view shows it: by name, which is what
// istiod reads of CRDs (as metadata).
var gatewayCRD = &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "gateways.gateway.networking.k8s.io"}}

// Apply makes kv hold the view's objects.
func (v *View) Apply(kv *kubeview.View) error {
	for _, r := range []struct {
		res  kubeview.Resource
		objs []kubeview.Object
	}{
		{kubeview.Namespaces, objects(v.Namespaces)},
		{kubeview.Nodes, objects(v.Nodes)},
		{kubeview.Pods, objects(v.Pods)},
		{kubeview.Services, objects(v.Services)},
		{kubeview.EndpointSlices, objects(v.EndpointSlices)},
		{kubeview.ConfigMaps, objects(v.ConfigMaps)},
		{kubeview.Secrets, nil},
		{kubeview.CustomResourceDefinitions, []kubeview.Object{gatewayCRD}},
		{kubeview.Gateways, objects(v.Gateways)},
	} {
		if err := kv.Replace(r.res, r.objs); err != nil {
			return fmt.Errorf("cluster %q: %w", v.Cluster.GetId(), err)
		}
	}
	return nil
}

func objects[T kubeview.Object](in []T) []kubeview.Object {
	out := make([]kubeview.Object, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}
