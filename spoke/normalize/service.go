package normalize

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// ExportStatus says whether a service is exported and, when it was meant to
// be but cannot be, why: Reason is a reason of the MCS ServiceExport Valid
// condition ([ReasonNoService], [ReasonInvalidServiceType]) and Message a
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
func Service(in Inputs, o Options, namespace, name string) (*federationpb.Service, ExportStatus) {
	o = o.WithDefaults()
	svc, hasService := in.Service(namespace, name)
	se, hasExport := in.ServiceExport(namespace, name)
	// An export being deleted (held by a finalizer) no longer asks for anything.
	hasExport = hasExport && se.DeletionTimestamp == nil

	var export *federationpb.Export
	switch {
	case hasExport:
		export = &federationpb.Export{
			Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT,
			Time:   timestamp(se.CreationTimestamp),
		}
	case !hasService:
		return nil, ExportStatus{}
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
		return nil, ExportStatus{}
	}

	if !hasService {
		return nil, ExportStatus{
			Reason:  ReasonNoService,
			Message: fmt.Sprintf("service %s/%s does not exist", namespace, name),
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if export.Source == federationpb.ExportSource_EXPORT_SOURCE_ALL {
			return nil, ExportStatus{} // "all" means all that can be exported
		}
		return nil, ExportStatus{
			Reason:  ReasonInvalidServiceType,
			Message: fmt.Sprintf("service %s/%s is of type ExternalName, which cannot be exported", namespace, name),
		}
	}

	return &federationpb.Service{
		Namespace:  namespace,
		Name:       name,
		Hostname:   name + "." + namespace + ".svc." + o.DomainSuffix,
		Ports:      servicePorts(svc.Spec.Ports),
		Type:       serviceType(svc),
		ClusterIps: clusterIPs(svc),
		Export:     export,
	}, ExportStatus{Exported: true}
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

func clusterIPs(svc *corev1.Service) []string {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if ip, ok := canonicalIP(ip); ok {
			out = append(out, ip)
		}
	}
	return out
}

// servicePorts converts ports, dropping those with a number out of range
// (the hub would reject the whole shard for one of them).
func servicePorts(ports []corev1.ServicePort) []*federationpb.ServicePort {
	var out []*federationpb.ServicePort
	for _, p := range ports {
		port, ok := portNumber(p.Port)
		if !ok {
			continue
		}
		sp := &federationpb.ServicePort{
			Name:        p.Name,
			Protocol:    protocol(p.Protocol),
			AppProtocol: deref(p.AppProtocol),
			Port:        port,
		}
		sp.TargetPort, sp.TargetPortName = targetPort(p.TargetPort, port)
		out = append(out, sp)
	}
	return out
}

// targetPort returns a port's numeric or named target. An unset target is
// the port itself: the API server defaults it so, but manifests read from
// files were never defaulted. A quoted number ("8080") is a number.
func targetPort(tp intstr.IntOrString, port uint32) (uint32, string) {
	if tp.Type == intstr.String {
		if tp.StrVal == "" {
			return port, ""
		}
		n, err := strconv.ParseInt(tp.StrVal, 10, 32)
		if err != nil {
			return 0, tp.StrVal
		}
		tp = intstr.FromInt32(int32(n))
	}
	if n, ok := portNumber(tp.IntVal); ok {
		return n, ""
	}
	return port, ""
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
