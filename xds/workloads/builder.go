package workloads

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"istio.io/istio/pkg/workloadapi"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Item is one resource and the networks that see it. A nil Message means
// the name is gone everywhere.
type Item struct {
	Name    string
	Message proto.Message
	// Only, when set, restricts the item to one network; Except, when set,
	// shows it to every network but one. Neither: every network.
	Only, Except *federation.NetworkID
}

// Visible reports whether a ztunnel on network sees the item.
func (it Item) Visible(network federation.NetworkID) bool {
	return it.Message != nil && it.InScope(network)
}

// InScope reports whether the item, if it exists, is for network.
func (it Item) InScope(network federation.NetworkID) bool {
	switch {
	case it.Only != nil:
		return *it.Only == network
	case it.Except != nil:
		return *it.Except != network
	}
	return true
}

// Builder keeps what lets a push regenerate only the resources a change
// touches. It is used by one goroutine.
type Builder struct {
	trustDomain string // default for clusters that name none

	clusters map[federation.ClusterID]*clusterset.ClusterInfo
	gateways *clusterset.Gateways

	pods     map[string]string          // cluster/ns/pod → workload key
	waiting  map[string]map[string]bool // cluster/ns/pod without a workload yet → services referencing it
	waitsFor map[string][]string        // service key → the pods it waits for
	podOf    map[string]string          // workload key → cluster/ns/pod
	svcRefs  map[string]map[string]bool // service key → workload keys its endpoints reference
	wlSvcs   map[string]servicePorts    // workload key → the services it backs, with its ports
	splits   map[string]map[string]bool // service key → its split-horizon workloads
	gwNames  map[string]bool            // names of the gateway workloads last built
	services map[string][]string        // service key → the Address names it produced
}

type port struct{ service, target uint32 }

// servicePorts are the services a workload backs, with its ports for
// each: most workloads back one or two, and a slice of them costs a tenth
// of a map per workload. Never modified in place: its methods return
// new slices.
type servicePorts []servicePort

type servicePort struct {
	service string
	ports   []port
}

func (sp servicePorts) get(service string) []port {
	for _, p := range sp {
		if p.service == service {
			return p.ports
		}
	}
	return nil
}

func (sp servicePorts) without(service string) servicePorts {
	i := slices.IndexFunc(sp, func(p servicePort) bool { return p.service == service })
	if i < 0 {
		return sp
	}
	return slices.Delete(slices.Clone(sp), i, i+1)
}

func (sp servicePorts) with(service string, ports []port) servicePorts {
	out := make(servicePorts, 0, len(sp)+1)
	for _, p := range sp {
		if p.service != service {
			out = append(out, p)
		}
	}
	return append(out, servicePort{service, ports})
}

// sameSlice reports whether a and b are one slice.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// NewBuilder returns an empty builder.
func NewBuilder(trustDomain string) *Builder {
	return &Builder{
		trustDomain: trustDomain,
		pods:        map[string]string{}, podOf: map[string]string{}, waiting: map[string]map[string]bool{}, waitsFor: map[string][]string{},
		svcRefs: map[string]map[string]bool{}, wlSvcs: map[string]servicePorts{},
		splits: map[string]map[string]bool{}, gwNames: map[string]bool{}, services: map[string][]string{},
	}
}

// ServiceName is a service's resource name: namespace/hostname.
func ServiceName(namespace, hostname string) string { return namespace + "/" + hostname }

// GatewayUID names a gateway's workload as istiod does.
func GatewayUID(network federation.NetworkID, address string, port uint32) string {
	return fmt.Sprintf("NetworkGateway/%s/%s/%d", network, address, port)
}

// Push returns the items that changed with a snapshot: the services and
// workloads it names, and everything when all is set or when the
// clusters' networks or gateways changed.
func (b *Builder) Push(s clusterset.Snapshot, services, workloads []string, all bool) []Item {
	var items []Item
	if b.setClusters(s.Clusters(), s.Gateways()) {
		all = true
	}
	if all {
		services = services[:0:0]
		for k := range b.services {
			services = append(services, k)
		}
		for _, v := range s.Services() {
			services = append(services, v.Key)
		}
		workloads = workloads[:0:0]
		for k := range b.podOf {
			workloads = append(workloads, k)
		}
		for _, w := range s.Workloads() {
			workloads = append(workloads, w.Key())
		}
		items = append(items, b.gatewayItems()...)
	}
	// Workloads first: services read the pod index.
	touched := map[string]bool{}
	splitServices := map[string]bool{}
	for _, k := range dedupe(workloads) {
		// Endpoints can arrive before their pod's workload: the services
		// that were waiting for it are indexed again.
		services = append(services, b.indexWorkload(s, k)...)
		touched[k] = true
		// A pod's readiness changes the capacity of its services behind its
		// network's gateway (a deleted pod's network is unknown: recount).
		if w, ok := s.Workload(k); !ok || b.behindTunnel(w.Network) {
			for _, sp := range b.wlSvcs[k] {
				splitServices[sp.service] = true
			}
		}
	}
	for _, key := range dedupe(services) {
		v, _ := s.Service(key)
		for k := range b.reindexService(key, v) {
			touched[k] = true
		}
		splitServices[key] = true
		items = append(items, b.serviceItems(key, v, s)...)
	}
	for _, k := range slices.Sorted(maps.Keys(touched)) {
		items = append(items, b.workloadItem(s, k))
	}
	items = append(items, b.splitItems(s, splitServices)...)
	return items
}

// setClusters records cluster facts and reports whether networks or
// gateways changed (which changes every workload).
func (b *Builder) setClusters(clusters []*clusterset.ClusterInfo, gateways *clusterset.Gateways) bool {
	next := make(map[federation.ClusterID]*clusterset.ClusterInfo, len(clusters))
	for _, c := range clusters {
		next[c.ID] = c
	}
	changed := !gateways.Equal(b.gateways) || !sameNetworks(b.clusters, next)
	b.clusters, b.gateways = next, gateways
	return changed
}

// behindTunnel reports whether the workloads of network n are reached
// through a gateway from the others.
func (b *Builder) behindTunnel(n federation.NetworkID) bool {
	_, ok := b.gateways.Tunnel(n)
	return ok
}

func sameNetworks(a, b map[federation.ClusterID]*clusterset.ClusterInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		if y, ok := b[k]; !ok || x.Network != y.Network || x.TrustDomain != y.TrustDomain {
			return false
		}
	}
	return true
}

func (b *Builder) trustDomainOf(c federation.ClusterID) string {
	if info := b.clusters[c]; info != nil && info.TrustDomain != "" {
		return info.TrustDomain
	}
	return b.trustDomain
}

// gatewayItems emits every gateway as a workload, and removes the ones gone.
func (b *Builder) gatewayItems() []Item {
	var items []Item
	now := map[string]bool{}
	for _, g := range b.gateways.All() {
		ip, err := netip.ParseAddr(g.GetAddress())
		if err != nil {
			continue
		}
		uid := GatewayUID(g.Into, g.GetAddress(), g.HBONEPort())
		if now[uid] {
			continue
		}
		now[uid] = true
		ns, name, _ := strings.Cut(g.GetService(), "/")
		items = append(items, Item{Name: uid, Message: &workloadapi.Address{Type: &workloadapi.Address_Workload{Workload: &workloadapi.Workload{
			Uid: uid, Name: uid, Namespace: ns, Addresses: [][]byte{ip.AsSlice()}, Network: string(g.Into),
			TrustDomain: b.trustDomainOf(g.Cluster), ServiceAccount: name, ClusterId: string(g.Cluster),
			TunnelProtocol: workloadapi.TunnelProtocol_HBONE, WorkloadType: workloadapi.WorkloadType_POD,
		}}}})
	}
	for _, uid := range slices.Sorted(maps.Keys(b.gwNames)) {
		if !now[uid] {
			items = append(items, Item{Name: uid})
		}
	}
	b.gwNames = now
	return items
}

// indexWorkload keeps the pod-name index of one workload up to date and
// returns the services that referenced the pod before its workload came.
func (b *Builder) indexWorkload(s clusterset.Snapshot, key string) []string {
	if old, ok := b.podOf[key]; ok {
		delete(b.pods, old)
		delete(b.podOf, key)
	}
	w, ok := s.Workload(key)
	if !ok {
		return nil
	}
	pk := string(w.Cluster) + "/" + w.GetNamespace() + "/" + w.GetName()
	b.pods[pk] = key
	b.podOf[key] = pk
	waiting := slices.Collect(maps.Keys(b.waiting[pk]))
	delete(b.waiting, pk)
	return waiting
}

// reindexService records which workloads a service's endpoints reference
// and on which ports, and returns the workloads whose services changed.
func (b *Builder) reindexService(key string, v *clusterset.ServiceView) map[string]bool {
	oldRefs := b.svcRefs[key]
	oldPorts := make(map[string][]port, len(oldRefs))
	for wk := range oldRefs {
		oldPorts[wk] = b.wlSvcs[wk].get(key)
		if rest := b.wlSvcs[wk].without(key); len(rest) > 0 {
			b.wlSvcs[wk] = rest
		} else {
			delete(b.wlSvcs, wk)
		}
	}
	delete(b.svcRefs, key)
	for _, pk := range b.waitsFor[key] {
		delete(b.waiting[pk], key)
		if len(b.waiting[pk]) == 0 {
			delete(b.waiting, pk)
		}
	}
	delete(b.waitsFor, key)

	refs := map[string]bool{}
	var last struct { // the service's endpoints share their ports (interned): computed once
		from  []*federationpb.EndpointPort
		ports []port
	}
	if v != nil {
		for _, c := range v.Clusters {
			for _, e := range c.Endpoints {
				ref, _ := e.Workload()
				if ref.Kind != "Pod" {
					continue
				}
				pk := string(c.Cluster) + "/" + e.GetNamespace() + "/" + ref.Name
				wk, ok := b.pods[pk]
				if !ok {
					if b.waiting[pk] == nil {
						b.waiting[pk] = map[string]bool{}
					}
					b.waiting[pk][key] = true
					b.waitsFor[key] = append(b.waitsFor[key], pk)
					continue
				}
				refs[wk] = true
				if eps := e.GetPorts(); last.ports == nil || !sameSlice(eps, last.from) {
					last.from, last.ports = eps, portsOf(v, e.Endpoint)
				}
				b.wlSvcs[wk] = b.wlSvcs[wk].with(key, last.ports)
			}
		}
	}
	if len(refs) > 0 {
		b.svcRefs[key] = refs
	}

	// A workload changes when it starts or stops backing the service, when
	// its ports for it change, or when the service's names change (they key
	// the workload's services map); not when another endpoint of the
	// service does.
	var names []string
	if v != nil {
		for _, h := range hostnames(v) {
			names = append(names, ServiceName(v.Namespace, h))
		}
	}
	renamed := !slices.Equal(names, b.services[key])
	touched := map[string]bool{}
	for wk := range oldRefs {
		if renamed || !refs[wk] || !slices.Equal(oldPorts[wk], b.wlSvcs[wk].get(key)) {
			touched[wk] = true
		}
	}
	for wk := range refs {
		if renamed || !oldRefs[wk] {
			touched[wk] = true
		}
	}
	return touched
}

// portsOf maps a service's ports to an endpoint's, by port name.
func portsOf(v *clusterset.ServiceView, e *clusterset.Endpoint) []port {
	var out []port
	for _, sp := range v.Ports {
		for _, ep := range e.GetPorts() {
			if ep.GetName() == sp.GetName() && ep.GetProtocol() == sp.GetProtocol() {
				out = append(out, port{service: sp.GetPort(), target: ep.GetPort()})
			}
		}
	}
	return out
}

func (b *Builder) serviceItems(key string, v *clusterset.ServiceView, s clusterset.Snapshot) []Item {
	var items []Item
	now := []string{}
	if v != nil {
		for _, host := range hostnames(v) {
			name := ServiceName(v.Namespace, host)
			now = append(now, name)
			items = append(items, Item{Name: name, Message: b.service(v, host, s)})
		}
	}
	for _, old := range b.services[key] {
		if !slices.Contains(now, old) {
			items = append(items, Item{Name: old})
		}
	}
	if v == nil {
		delete(b.services, key)
	} else {
		b.services[key] = now
	}
	return items
}

// networks returns the clusterset's networks, sorted.
func (b *Builder) networks() []federation.NetworkID {
	var out []federation.NetworkID
	for _, c := range b.clusters {
		if !slices.Contains(out, c.Network) {
			out = append(out, c.Network)
		}
	}
	slices.Sort(out)
	return out
}

func hostnames(v *clusterset.ServiceView) []string {
	if v.ClustersetHostname != "" && v.ClustersetHostname != v.Hostname {
		return []string{v.Hostname, v.ClustersetHostname}
	}
	return []string{v.Hostname}
}

func (b *Builder) service(v *clusterset.ServiceView, host string, s clusterset.Snapshot) *workloadapi.Address {
	svc := &workloadapi.Service{Name: v.Name, Namespace: v.Namespace, Hostname: host}
	seen := map[string]bool{}
	if vips := s.Import(v.Key).ClustersetIPs; host == v.ClustersetHostname && len(vips) > 0 {
		// An MCS import's VIPs are its ClusterSetIPs, the same in every
		// cluster: a ztunnel looks a VIP up on its own network, so they
		// are listed on each network of the clusterset.
		for _, n := range b.networks() {
			for _, a := range vips {
				if a.IsValid() {
					svc.Addresses = append(svc.Addresses, &workloadapi.NetworkAddress{Network: string(n), Address: a.AsSlice()})
				}
			}
		}
		seen = nil
	}
	for _, c := range v.Clusters {
		if seen == nil {
			break
		}
		for _, ip := range c.Service.GetClusterIps() {
			a, err := netip.ParseAddr(ip)
			if err != nil || seen[string(c.Network)+"/"+ip] {
				continue
			}
			seen[string(c.Network)+"/"+ip] = true
			svc.Addresses = append(svc.Addresses, &workloadapi.NetworkAddress{Network: string(c.Network), Address: a.AsSlice()})
		}
	}
	slices.SortFunc(svc.Addresses, func(x, y *workloadapi.NetworkAddress) int {
		return cmp.Or(cmp.Compare(x.GetNetwork(), y.GetNetwork()), slices.Compare(x.GetAddress(), y.GetAddress()))
	})
	for _, p := range v.Ports {
		if p.GetProtocol() != federationpb.Protocol_PROTOCOL_TCP {
			continue
		}
		svc.Ports = append(svc.Ports, &workloadapi.Port{ServicePort: p.GetPort(), TargetPort: p.GetTargetPort()})
	}
	// The identities behind the service, so that a ztunnel can verify the
	// inner tunnel to workloads it reaches through a gateway.
	sans := map[string]bool{}
	for k := range b.svcRefs[v.Key] {
		if w, ok := s.Workload(k); ok {
			sans["spiffe://"+b.trustDomainOf(w.Cluster)+"/ns/"+w.GetNamespace()+"/sa/"+cmp.Or(w.GetServiceAccount(), "default")] = true
		}
	}
	svc.SubjectAltNames = slices.Sorted(maps.Keys(sans))
	return &workloadapi.Address{Type: &workloadapi.Address_Service{Service: svc}}
}

// workloadItem is one workload, seen by its own network only.
func (b *Builder) workloadItem(s clusterset.Snapshot, key string) Item {
	w, ok := s.Workload(key)
	if !ok {
		return Item{Name: key}
	}
	network := w.Network
	out := &workloadapi.Workload{
		Uid: key, Name: w.GetName(), Namespace: w.GetNamespace(), Network: string(network),
		TrustDomain: b.trustDomainOf(w.Cluster), ServiceAccount: cmp.Or(w.GetServiceAccount(), "default"),
		Node: w.GetNode(), CanonicalName: w.GetCanonicalName(), CanonicalRevision: w.GetCanonicalRevision(),
		WorkloadType: workloadapi.WorkloadType_POD, WorkloadName: w.GetCanonicalName(), ClusterId: string(w.Cluster),
	}
	for _, ip := range w.GetIps() {
		if a, err := netip.ParseAddr(ip); err == nil {
			out.Addresses = append(out.Addresses, a.AsSlice())
		}
	}
	if w.GetAmbient() {
		out.TunnelProtocol = workloadapi.TunnelProtocol_HBONE
	}
	if !w.GetReady() {
		out.Status = workloadapi.WorkloadStatus_UNHEALTHY
	}
	if l := w.GetLocality(); l != nil {
		out.Locality = &workloadapi.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubzone()}
	}
	if gw, ok := b.gateways.Tunnel(network); ok {
		out.NetworkGateway = gatewayAddress(gw)
	}
	if svcs := b.wlSvcs[key]; len(svcs) > 0 {
		out.Services = map[string]*workloadapi.PortList{}
		for _, sp := range svcs {
			v, ok := s.Service(sp.service)
			if !ok {
				continue
			}
			list := &workloadapi.PortList{}
			for _, p := range sp.ports {
				list.Ports = append(list.Ports, &workloadapi.Port{ServicePort: p.service, TargetPort: p.target})
			}
			for _, host := range hostnames(v) {
				out.Services[ServiceName(v.Namespace, host)] = list
			}
		}
	}
	return Item{Name: key, Message: &workloadapi.Address{Type: &workloadapi.Address_Workload{Workload: out}}, Only: &network}
}

func gatewayAddress(gw clusterset.Gateway) *workloadapi.GatewayAddress {
	ip, _ := netip.ParseAddr(gw.GetAddress())
	return &workloadapi.GatewayAddress{
		Destination:   &workloadapi.GatewayAddress_Address{Address: &workloadapi.NetworkAddress{Network: string(gw.Into), Address: ip.AsSlice()}},
		HboneMtlsPort: gw.HBONEPort(),
	}
}

// splitItems rebuilds the split-horizon workloads of some services: for
// each network with a gateway where a service has workloads, one
// address-less workload that every other network reaches through the
// gateway, whose capacity is the number of workloads behind it that count
// (clusterset.CountsBehindGateway).
func (b *Builder) splitItems(s clusterset.Snapshot, services map[string]bool) []Item {
	var items []Item
	for _, svcKey := range slices.Sorted(maps.Keys(services)) {
		capacity := map[federation.NetworkID]uint32{}
		for wk := range b.svcRefs[svcKey] {
			if w, ok := s.Workload(wk); ok && clusterset.CountsBehindGateway(w.Workload) && b.behindTunnel(w.Network) {
				capacity[w.Network]++
			}
		}
		now := map[string]bool{}
		if v, ok := s.Service(svcKey); ok {
			for _, network := range slices.Sorted(maps.Keys(capacity)) {
				for _, host := range hostnames(v) {
					it := b.splitItem(v, host, network, capacity[network])
					now[it.Name] = true
					items = append(items, it)
				}
			}
		}
		for _, uid := range slices.Sorted(maps.Keys(b.splits[svcKey])) {
			if !now[uid] {
				items = append(items, Item{Name: uid})
			}
		}
		if len(now) == 0 {
			delete(b.splits, svcKey)
		} else {
			b.splits[svcKey] = now
		}
	}
	return items
}

func (b *Builder) splitItem(v *clusterset.ServiceView, host string, network federation.NetworkID, capacity uint32) Item {
	gw, _ := b.gateways.Tunnel(network)
	gwNs, gwName, _ := strings.Cut(gw.GetService(), "/")
	ports := &workloadapi.PortList{}
	for _, p := range v.Ports {
		if p.GetProtocol() == federationpb.Protocol_PROTOCOL_TCP {
			ports.Ports = append(ports.Ports, &workloadapi.Port{ServicePort: p.GetPort(), TargetPort: p.GetTargetPort()})
		}
	}
	uid := fmt.Sprintf("%s/SplitHorizonWorkload/%s/%s/%s/%s/%s", network, gwNs, gwName, gw.GetAddress(), v.Namespace, host)
	return Item{Name: uid, Except: &network, Message: &workloadapi.Address{Type: &workloadapi.Address_Workload{Workload: &workloadapi.Workload{
		Uid: uid, Name: uid, Namespace: v.Namespace, Network: string(network),
		TrustDomain: b.trustDomainOf(gw.Cluster), ClusterId: string(gw.Cluster),
		TunnelProtocol: workloadapi.TunnelProtocol_HBONE, WorkloadType: workloadapi.WorkloadType_POD,
		NetworkGateway: gatewayAddress(gw), Capacity: wrapperspb.UInt32(capacity),
		Services: map[string]*workloadapi.PortList{ServiceName(v.Namespace, host): ports},
	}}}}
}

func dedupe(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}
