package normalize

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// ExportStatus says whether a service is exported and, when it was meant to
// be but cannot be, why: Reason is a reason of the MCS ServiceExport Valid
// condition ([ReasonNoService], [ReasonInvalidServiceType], [ReasonRejected]) and Message a
// sentence for humans. Both are empty for a service nobody asked to export.
type ExportStatus struct {
	Exported bool
	Reason   string
	Message  string
}

// Service returns the federation service for namespace/name, or nil when it
// is not exported (or cannot be: see [ExportStatus]).
//
// A ServiceExport exports a service whatever the policy, and its creation
// time is the export time (MCS: the oldest export wins a conflict). A
// label or the [ExportAll] policy exports it since the Service's creation.
//
// An exported Service that cannot be federated as it is (a port out of
// range, an address that is not one, what the federation's validation
// refuses) is rejected: the error is a [*Rejection] and the status says
// [ReasonRejected]. Nothing of such a Service is left out quietly.
func Service(in Inputs, o Options, namespace, name string) (*federationpb.Service, ExportStatus, error) {
	o = o.WithDefaults()
	svc, hasService := in.Service(namespace, name)
	se, hasExport := in.ServiceExport(namespace, name)
	// An export being deleted (held by a finalizer) no longer asks for anything.
	hasExport = hasExport && se.DeletionTimestamp == nil

	var export *federationpb.Export
	switch {
	case hasExport:
		export = &federationpb.Export{
			Source:      federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT,
			Time:        timestamp(se.CreationTimestamp),
			Labels:      keyValues(se.Spec.ExportedLabels),
			Annotations: keyValues(se.Spec.ExportedAnnotations),
		}
	case !hasService:
		return nil, ExportStatus{}, nil
	case svc.Labels[LabelExport] == "true":
		export = &federationpb.Export{
			Source: federationpb.ExportSource_EXPORT_SOURCE_LABEL,
			Time:   timestamp(svc.CreationTimestamp),
		}
	case o.Export == ExportAll && svc.Labels[LabelExport] != "false" && !isClusterPlumbing(namespace, name):
		export = &federationpb.Export{
			Source: federationpb.ExportSource_EXPORT_SOURCE_ALL,
			Time:   timestamp(svc.CreationTimestamp),
		}
	default:
		return nil, ExportStatus{}, nil
	}

	if !hasService {
		return nil, ExportStatus{
			Reason:  ReasonNoService,
			Message: fmt.Sprintf("service %s/%s does not exist", namespace, name),
		}, nil
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if export.Source == federationpb.ExportSource_EXPORT_SOURCE_ALL {
			return nil, ExportStatus{}, nil // "all" means all that can be exported
		}
		return nil, ExportStatus{
			Reason:  ReasonInvalidServiceType,
			Message: fmt.Sprintf("service %s/%s is of type ExternalName, which cannot be exported", namespace, name),
		}, nil
	}

	j := rejecter{kind: KindService, namespace: namespace, name: name, service: namespace + "/" + name}
	ports, rej := servicePorts(j, svc.Spec.Ports)
	var ips []string
	if rej == nil {
		ips, rej = clusterIPs(j, svc)
	}
	var out *federationpb.Service
	if rej == nil {
		out = &federationpb.Service{
			Namespace:  namespace,
			Name:       name,
			Hostname:   name + "." + namespace + ".svc." + o.DomainSuffix,
			Ports:      ports,
			Type:       serviceType(svc),
			ClusterIps: ips,
			Export:     export,

			SessionAffinity:       sessionAffinity(svc.Spec.SessionAffinity),
			InternalTrafficPolicy: string(deref(svc.Spec.InternalTrafficPolicy)),
			TrafficDistribution:   deref(svc.Spec.TrafficDistribution),
			IpFamilies:            ipFamilies(svc.Spec.IPFamilies),
		}
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			out.SessionAffinityTimeoutSeconds = uint32(*c.ClientIP.TimeoutSeconds)
		}
		if err := federation.ValidateService(out); err != nil {
			rej = j.invalid("", out, err)
			if strings.HasPrefix(rej.Field, "ports[") || strings.HasPrefix(rej.Field, "clusterIPs[") {
				rej.Field = "spec." + rej.Field // the same indices as the Service's
			}
		}
	}
	if rej != nil {
		return nil, ExportStatus{Reason: ReasonRejected, Message: rej.Error()}, rej
	}
	return out, ExportStatus{Exported: true}, nil
}

func sessionAffinity(a corev1.ServiceAffinity) federationpb.SessionAffinity {
	if a == corev1.ServiceAffinityClientIP {
		return federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP
	}
	return federationpb.SessionAffinity_SESSION_AFFINITY_NONE
}

// ipFamilies converts a Service's IP families. An unknown family is kept
// as unspecified, which the federation's validation rejects by name.
func ipFamilies(fs []corev1.IPFamily) []federationpb.IPFamily {
	if len(fs) == 0 {
		return nil
	}
	out := make([]federationpb.IPFamily, len(fs))
	for i, f := range fs {
		switch f {
		case corev1.IPv4Protocol:
			out[i] = federationpb.IPFamily_IP_FAMILY_IPV4
		case corev1.IPv6Protocol:
			out[i] = federationpb.IPFamily_IP_FAMILY_IPV6
		}
	}
	return out
}

// keyValues returns a map's entries sorted by key.
func keyValues(m map[string]string) []*federationpb.KeyValue {
	if len(m) == 0 {
		return nil
	}
	out := make([]*federationpb.KeyValue, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, &federationpb.KeyValue{Key: k, Value: m[k]})
	}
	return out
}

// isClusterPlumbing reports the services [ExportAll] leaves alone.
func isClusterPlumbing(namespace, name string) bool {
	return strings.HasPrefix(namespace, "kube-") || (namespace == "default" && name == "kubernetes")
}

func serviceType(svc *corev1.Service) federationpb.ServiceType {
	switch {
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return federationpb.ServiceType_SERVICE_TYPE_HEADLESS
	case svc.Spec.Type == corev1.ServiceTypeNodePort:
		return federationpb.ServiceType_SERVICE_TYPE_NODE_PORT
	case svc.Spec.Type == corev1.ServiceTypeLoadBalancer:
		return federationpb.ServiceType_SERVICE_TYPE_LOAD_BALANCER
	default:
		return federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP
	}
}

// clusterIPs returns the Service's cluster IPs in canonical form (none for
// a headless Service).
func clusterIPs(j rejecter, svc *corev1.Service) ([]string, *Rejection) {
	field, ips := "spec.clusterIPs", svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		field, ips = "spec.clusterIP", []string{svc.Spec.ClusterIP}
	}
	var out []string
	for i, ip := range ips {
		if ip == corev1.ClusterIPNone {
			continue
		}
		f := field
		if field == "spec.clusterIPs" {
			f = field + "[" + strconv.Itoa(i) + "]"
		}
		addr, rej := j.address(f, ip)
		if rej != nil {
			return nil, rej
		}
		out = append(out, addr.String())
	}
	return out, nil
}

// servicePorts converts ports. One port out of range rejects the Service:
// without it, the Service would be federated with a port less, and the
// clients of that port would lose it with no word.
func servicePorts(j rejecter, ports []corev1.ServicePort) ([]*federationpb.ServicePort, *Rejection) {
	if len(ports) > federation.MaxPortsPerObject {
		return nil, j.reject(RejectTooManyPorts, "spec.ports", strconv.Itoa(len(ports)),
			"%d ports is more than %d", len(ports), federation.MaxPortsPerObject)
	}
	var out []*federationpb.ServicePort
	for i, p := range ports {
		f := "spec.ports[" + strconv.Itoa(i) + "]"
		port, rej := j.port(f+".port", p.Port)
		if rej == nil {
			rej = j.utf8(f+".name", p.Name, f+".appProtocol", deref(p.AppProtocol))
		}
		if rej != nil {
			return nil, rej
		}
		sp := &federationpb.ServicePort{
			Name:        p.Name,
			Protocol:    protocol(p.Protocol),
			AppProtocol: deref(p.AppProtocol),
			Port:        port,
		}
		if sp.TargetPort, sp.TargetPortName, rej = targetPort(j, f+".targetPort", p.TargetPort, port); rej != nil {
			return nil, rej
		}
		out = append(out, sp)
	}
	return out, nil
}

// targetPort returns a port's numeric or named target. An unset target is
// the port itself: the API server defaults it so, but manifests read from
// files were never defaulted. A quoted number ("8080") is a number.
func targetPort(j rejecter, field string, tp intstr.IntOrString, port uint32) (uint32, string, *Rejection) {
	if tp.Type == intstr.String {
		if tp.StrVal == "" {
			return port, "", nil
		}
		n, err := strconv.ParseInt(tp.StrVal, 10, 32)
		if err != nil {
			return 0, tp.StrVal, j.utf8(field, tp.StrVal)
		}
		tp = intstr.FromInt32(int32(n))
	}
	if tp.IntVal == 0 {
		return port, "", nil
	}
	n, rej := j.port(field, tp.IntVal)
	return n, "", rej
}

func portNumber(p int32) (uint32, bool) {
	if p < 1 || p > 65535 {
		return 0, false
	}
	return uint32(p), true
}

func protocol(p corev1.Protocol) federationpb.Protocol {
	switch p {
	case corev1.ProtocolTCP, "":
		return federationpb.Protocol_PROTOCOL_TCP
	case corev1.ProtocolUDP:
		return federationpb.Protocol_PROTOCOL_UDP
	case corev1.ProtocolSCTP:
		return federationpb.Protocol_PROTOCOL_SCTP
	default:
		return federationpb.Protocol_PROTOCOL_UNSPECIFIED
	}
}
