package normalize

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod is what normalization reads of a Pod. Sources hold these rather than
// Pods because a spoke keeps one for every pod of its cluster: a
// corev1.Pod is 1.2 KB before any of its fields is set, a Pod a third.
//
// The embedded metadata (which also lets client-go's caches key a Pod)
// holds the name, namespace and uid, and only the labels and annotations of
// [Keys] for [KindPod].
type Pod struct {
	Meta

	// ControllerKind and ControllerName name the pod's controller, if any.
	ControllerKind, ControllerName string
	ServiceAccount                 string
	Node                           string
	HostNetwork                    bool
	Phase                          corev1.PodPhase
	// IPs are status.podIPs, or status.podIP when only it is set, as given.
	IPs []string
	// Ready is the PodReady condition.
	Ready bool
}

// PodOf returns what normalization reads of p (nil for nil). It shares
// p's strings.
func PodOf(p *corev1.Pod) *Pod {
	if p == nil {
		return nil
	}
	labels, annotations := Keys(KindPod)
	out := &Pod{
		Meta:           MetaOf(&p.ObjectMeta, labels, annotations),
		ServiceAccount: p.Spec.ServiceAccountName,
		Node:           p.Spec.NodeName,
		HostNetwork:    p.Spec.HostNetwork,
		Phase:          p.Status.Phase,
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		out.ControllerKind, out.ControllerName = ref.Kind, ref.Name
	}
	switch {
	case len(p.Status.PodIPs) > 0:
		out.IPs = make([]string, len(p.Status.PodIPs))
		for i, ip := range p.Status.PodIPs {
			out.IPs[i] = ip.IP
		}
	case p.Status.PodIP != "":
		out.IPs = []string{p.Status.PodIP}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Ready = c.Status == corev1.ConditionTrue
			break
		}
	}
	return out
}

// Only returns the entries of m under keys, or nil when there are none.
// The map is sized to them: pods keep theirs.
func Only(m map[string]string, keys []string) map[string]string {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}
