package clusterset

import (
	"fmt"
	"math"
	"strings"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Workload is a workload as the hub holds it: 48 bytes against the
// generated message's 240. The pods of one namespace, service account,
// app and version in one zone share what they have in common (a
// workloadGroup, which also holds their tag: cluster and network); the
// workload's clusterset key (which ends with its uid), its name and its
// addresses are one string of its own, not the decoder's four strings and
// slice. Unknown fields are not kept: the hub reads none. It is
// immutable; Proto rebuilds the message.
type Workload struct {
	group *workloadGroup
	// s is the key (WorkloadKey(cluster, uid)) up to keyEnd, the name up
	// to nameEnd, then the addresses separated by ipSeparator. Validation
	// bounds the cluster, uid and name (maxStringLen, a DNS label), so the
	// ends fit 16 bits.
	s               string
	node            string
	keyEnd, nameEnd uint16
	ready           bool
}

// ipSeparator separates a workload's addresses in its s: no IP
// address holds one.
const ipSeparator = ","

// workloadGroup is what the workloads of one kind share.
type workloadGroup struct {
	namespace, serviceAccount, app, version, canonicalName, canonicalRevision, network string
	locality                                                                           *federationpb.Locality
	ambient, meshTLS                                                                   bool
	tag                                                                                *Tag
}

// NewWorkload returns the hub's form of a workload message of cluster
// (its network its own, else none), sharing nothing with other workloads
// (the registry interns; see Interner.Workload).
func NewWorkload(cluster federation.ClusterID, pb *federationpb.Workload) *Workload {
	return (*Interner)(nil).Workload(NewTags(cluster, ""), pb)
}

// Workload returns the hub's form of pb, a workload of the cluster that
// hands out tags, sharing its group with the interner's other workloads
// alike. A nil interner shares nothing.
func (in *Interner) Workload(tags *Tags, pb *federationpb.Workload) *Workload {
	g := workloadGroup{
		namespace: pb.GetNamespace(), serviceAccount: pb.GetServiceAccount(), app: pb.GetApp(), version: pb.GetVersion(),
		canonicalName: pb.GetCanonicalName(), canonicalRevision: pb.GetCanonicalRevision(), network: pb.GetNetwork(),
		locality: pb.GetLocality(), ambient: pb.GetAmbient(), meshTLS: pb.GetMeshTls(), tag: tags.Of(pb.GetNetwork()),
	}
	key, name := WorkloadKey(g.tag.Cluster, pb.GetUid()), pb.GetName()
	if len(key)+len(name) > math.MaxUint16 {
		// Validation bounds both far below; only an unvalidated message
		// gets here.
		panic(fmt.Sprintf("workload %s: key and name of %d bytes", key, len(key)+len(name)))
	}
	w := &Workload{
		s:      key + name + strings.Join(pb.GetIps(), ipSeparator),
		keyEnd: uint16(len(key)), nameEnd: uint16(len(key) + len(name)), node: pb.GetNode(), ready: pb.GetReady(),
	}
	w.group = in.workloadGroup(g)
	if in != nil {
		w.node = in.str(w.node)
	}
	return w
}

// Retag returns w with the tag tags give it now (its cluster's network
// changed), w itself when that is the tag it has.
func (in *Interner) Retag(tags *Tags, w *Workload) *Workload {
	g := *w.group
	if g.tag = tags.Of(g.network); *g.tag == *w.group.tag {
		return w
	}
	out := *w
	out.group = in.workloadGroup(g)
	return &out
}

// workloadGroup returns the interner's group equal to g, interning its
// strings and locality the first time.
func (in *Interner) workloadGroup(g workloadGroup) *workloadGroup {
	if in == nil {
		p := new(workloadGroup)
		*p = g
		return p
	}
	g.namespace, g.serviceAccount, g.app, g.version = in.str(g.namespace), in.str(g.serviceAccount), in.str(g.app), in.str(g.version)
	g.canonicalName, g.canonicalRevision, g.network = in.str(g.canonicalName), in.str(g.canonicalRevision), in.str(g.network)
	g.locality = in.Locality(g.locality)
	// The group is its own key (its strings, its interned locality and
	// its tag), allocated once per group, not per workload: g stays on
	// the stack.
	p := in.workloadGroups[g]
	if p == nil {
		p = new(workloadGroup)
		*p = g
		in.workloadGroups[g] = p
	}
	return p
}

// Proto returns the workload as a message, sharing its locality.
func (w *Workload) Proto() *federationpb.Workload {
	g := w.group
	return &federationpb.Workload{
		Uid: w.GetUid(), Namespace: g.namespace, Name: w.GetName(), Ips: w.GetIps(), ServiceAccount: g.serviceAccount,
		Node: w.node, Locality: g.locality, App: g.app, Version: g.version,
		CanonicalName: g.canonicalName, CanonicalRevision: g.canonicalRevision, Network: g.network,
		Ready: w.ready, Ambient: g.ambient, MeshTls: g.meshTLS,
	}
}

// Equal reports whether w and o hold the same workload.
func (w *Workload) Equal(o *Workload) bool {
	if w == nil || o == nil {
		return w == o
	}
	return w.s == o.s && w.keyEnd == o.keyEnd && w.nameEnd == o.nameEnd && w.node == o.node && w.ready == o.ready &&
		w.group.equal(o.group)
}

func (g *workloadGroup) equal(o *workloadGroup) bool {
	if g == o {
		return true
	}
	a, b := *g, *o
	a.locality, b.locality, a.tag, b.tag = nil, nil, nil, nil
	return a == b && g.locality.EqualVT(o.locality) && g.tag.equal(o.tag)
}

// The getters are named as the message's, so that readers of either read
// alike. Like the message's, they are safe on nil: a nil workload reads as
// noWorkload.

var noWorkload = Workload{group: &workloadGroup{tag: &Tag{}}}

func (w *Workload) orNone() *Workload {
	if w == nil {
		return &noWorkload
	}
	return w
}

// GetUid is the pod's uid.
func (w *Workload) GetUid() string { //nolint:revive // named as the message's getter
	k := w.Key()
	return k[strings.IndexByte(k, '/')+1:] // a cluster ID is a DNS label: no '/'
}

// Key is the workload's key in the clusterset (see WorkloadKey).
func (w *Workload) Key() string {
	w = w.orNone()
	return w.s[:w.keyEnd]
}

// Tagged returns the workload with its cluster and network.
func (w *Workload) Tagged() TaggedWorkload {
	return TaggedWorkload{Tag: w.orNone().group.tag, Workload: w}
}

// GetNamespace is the pod's namespace.
func (w *Workload) GetNamespace() string { return w.orNone().group.namespace }

// GetName is the pod's name.
func (w *Workload) GetName() string {
	w = w.orNone()
	return w.s[w.keyEnd:w.nameEnd]
}

// GetIps returns the pod's addresses, in a new slice (nil when it has
// none).
func (w *Workload) GetIps() []string {
	w = w.orNone()
	if ips := w.s[w.nameEnd:]; ips != "" {
		return strings.Split(ips, ipSeparator)
	}
	return nil
}

// ipOffset returns where address a starts in w.s, if it is one of the
// workload's.
func (w *Workload) ipOffset(a string) (int, bool) {
	start, rest := int(w.nameEnd), w.s[w.nameEnd:]
	for rest != "" {
		ip, after, _ := strings.Cut(rest, ipSeparator)
		if ip == a {
			return start, true
		}
		start += len(ip) + len(ipSeparator)
		rest = after
	}
	return 0, false
}

// GetServiceAccount is the pod's service account.
func (w *Workload) GetServiceAccount() string { return w.orNone().group.serviceAccount }

// GetNode is the name of the pod's node.
func (w *Workload) GetNode() string { return w.orNone().node }

// GetLocality returns the pod's locality, shared: do not modify it.
func (w *Workload) GetLocality() *federationpb.Locality { return w.orNone().group.locality }

// GetApp is the pod's app label.
func (w *Workload) GetApp() string { return w.orNone().group.app }

// GetVersion is the pod's version label.
func (w *Workload) GetVersion() string { return w.orNone().group.version }

// GetCanonicalName is the pod's service.istio.io/canonical-name.
func (w *Workload) GetCanonicalName() string { return w.orNone().group.canonicalName }

// GetCanonicalRevision is the pod's service.istio.io/canonical-revision.
func (w *Workload) GetCanonicalRevision() string { return w.orNone().group.canonicalRevision }

// GetNetwork is the pod's own network, overriding its cluster's ("": its
// cluster's).
func (w *Workload) GetNetwork() string { return w.orNone().group.network }

// GetReady reports the pod ready.
func (w *Workload) GetReady() bool { return w.orNone().ready }

// GetAmbient reports the pod enrolled in ambient mode.
func (w *Workload) GetAmbient() bool { return w.orNone().group.ambient }

// GetMeshTls reports the pod taking Istio mutual TLS.
func (w *Workload) GetMeshTls() bool { return w.orNone().group.meshTLS } //nolint:revive // named as the message's getter
