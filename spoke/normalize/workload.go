package normalize

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Workload returns the workload of a pod, or nil for a pod that cannot be
// addressed: one without an IP, finished (Succeeded or Failed), or on the
// host network (its IP is the node's).
//
// A pod without a uid (one read from a manifest file) gets
// "<cluster>//Pod/<namespace>/<name>", the form Istio gives workload uids,
// so that workload keys stay unique and stable.
//
// A pod whose workload cannot be federated (an address that is not a
// unicast IP address, what the federation's validation refuses) is
// rejected: the error is a [*Rejection].
func Workload(in Inputs, o Options, pod *Pod) (*federationpb.Workload, error) {
	if pod == nil || pod.HostNetwork || pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed || len(pod.IPs) == 0 {
		return nil, nil
	}
	j := rejecter{kind: KindPod, namespace: pod.Namespace, name: pod.Name}
	ips, rej := podIPs(j, pod)
	if rej != nil {
		return nil, rej
	}
	o = o.WithDefaults()
	labels := pod.Labels
	app := cmp.Or(labels[LabelAppName], labels[LabelApp])
	version := cmp.Or(labels[LabelAppVersion], labels[LabelVersion])
	w := &federationpb.Workload{
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
		MeshTls:           pod.Labels[LabelTLSMode] == "istio",
	}
	if err := federation.ValidateWorkload(w); err != nil {
		return nil, j.invalid("", w, err)
	}
	return w, nil
}

// podIPs returns the pod's addresses in canonical form, without duplicates.
func podIPs(j rejecter, pod *Pod) ([]string, *Rejection) {
	var ips []string
	for i, s := range pod.IPs {
		addr, rej := j.address("status.podIPs["+strconv.Itoa(i)+"]", s)
		if rej != nil {
			return nil, rej
		}
		if ip := addr.String(); !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	return ips, nil
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
		if hash := pod.Labels[LabelPodTemplateHash]; hash != "" {
			if name, ok := strings.CutSuffix(pod.ControllerName, "-"+hash); ok {
				return name
			}
		}
	}
	return pod.ControllerName
}
