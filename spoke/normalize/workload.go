package normalize

import (
	"cmp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Workload returns the workload of a pod, or nil for a pod that cannot be
// addressed: one without an IP, finished (Succeeded or Failed), or on the
// host network (its IP is the node's).
//
// A pod without a uid (one read from a manifest file) gets
// "<cluster>//Pod/<namespace>/<name>", the form Istio gives workload uids,
// so that workload keys stay unique and stable.
func Workload(in Inputs, o Options, pod *Pod) *federationpb.Workload {
	if pod == nil || pod.HostNetwork || pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
		return nil
	}
	ips := podIPs(pod)
	if len(ips) == 0 {
		return nil
	}
	o = o.WithDefaults()
	labels := pod.Labels
	app := cmp.Or(labels[LabelAppName], labels[LabelApp])
	version := cmp.Or(labels[LabelAppVersion], labels[LabelVersion])
	return &federationpb.Workload{
		Uid:               cmp.Or(string(pod.UID), o.ClusterID+"//Pod/"+pod.Namespace+"/"+pod.Name),
		Namespace:         pod.Namespace,
		Name:              pod.Name,
		Ips:               ips,
		ServiceAccount:    cmp.Or(pod.ServiceAccount, "default"),
		Node:              pod.Node,
		Locality:          nodeLocality(in, pod.Node, ""),
		App:               app,
		Version:           version,
		CanonicalName:     cmp.Or(labels[LabelCanonicalName], app, workloadName(pod)),
		CanonicalRevision: cmp.Or(labels[LabelCanonicalRevision], version, "latest"),
		Network:           networkOverride(in, ClusterNetwork(in, o), pod, pod.Namespace),
		Ready:             pod.Ready,
		Ambient:           pod.Annotations[AnnotationAmbientRedirection] == "enabled",
	}
}

// podIPs returns the pod's addresses in canonical form, without duplicates.
func podIPs(pod *Pod) []string {
	var ips []string
	for _, s := range pod.IPs {
		if ip, ok := canonicalIP(s); ok && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	return ips
}

// workloadName names the workload a pod belongs to when no label does, as
// Istio does: the Deployment of a ReplicaSet's pod (the ReplicaSet's name
// without its pod-template-hash), another controller's name, or the pod's
// own name for a bare pod.
func workloadName(pod *Pod) string {
	if pod.ControllerName == "" {
		return pod.Name
	}
	if pod.ControllerKind == "ReplicaSet" {
		if hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
			if name, ok := strings.CutSuffix(pod.ControllerName, "-"+hash); ok {
				return name
			}
		}
	}
	return pod.ControllerName
}
