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

// Gateways returns the cluster's east-west gateways: every address of every
// Service in o.GatewayNamespaces labelled topology.istio.io/network that
// has port 15443 (mTLS,
// [federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS]) or 15008 (HBONE).
// The label or annotation networking.istio.io/gatewayPort replaces the mTLS
// port (it is HBONE when it says 15008); the port then need not be listed
// on the Service, as with Istio. Addresses are the load balancer's (IP,
// else hostname), then spec.externalIPs; a Service with neither is no
// gateway, as nothing outside the cluster can reach it.
func Gateways(in Inputs, o Options) []*federationpb.Gateway {
	var out []*federationpb.Gateway
	for _, svc := range gatewayCandidates(in, o.WithDefaults().GatewayNamespaces) {
		network := svc.Labels[LabelNetwork]
		if network == "" {
			continue
		}
		addrs := gatewayAddresses(svc)
		for _, gp := range gatewayPorts(svc) {
			for _, addr := range addrs {
				out = append(out, &federationpb.Gateway{
					Address:  addr,
					Port:     gp.port,
					Protocol: gp.protocol,
					Network:  network,
					Service:  federation.ServiceKey(svc.Namespace, svc.Name),
				})
			}
		}
	}
	slices.SortFunc(out, func(a, b *federationpb.Gateway) int {
		return cmp.Or(
			strings.Compare(a.Network, b.Network),
			strings.Compare(a.Service, b.Service),
			strings.Compare(a.Address, b.Address),
			cmp.Compare(a.Port, b.Port),
			cmp.Compare(a.Protocol, b.Protocol),
		)
	})
	return out
}

// gatewayCandidates lists the Services of namespaces, each namespace once.
func gatewayCandidates(in Inputs, namespaces []string) []*corev1.Service {
	var out []*corev1.Service
	for i, ns := range namespaces {
		if ns == "" || slices.Contains(namespaces[:i], ns) {
			continue
		}
		out = append(out, in.Services(ns)...)
	}
	return out
}

type gatewayPort struct {
	port     uint32
	protocol federationpb.GatewayProtocol
}

func gatewayPorts(svc *corev1.Service) []gatewayPort {
	tlsPort := uint32(0)
	if override, ok := gatewayPortOverride(svc); ok {
		if override == GatewayPortHBONE {
			return []gatewayPort{{GatewayPortHBONE, federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE}}
		}
		tlsPort = override
	}
	var out []gatewayPort
	hasHBONE := false
	for _, p := range svc.Spec.Ports {
		switch {
		case p.Port == GatewayPortTLS && tlsPort == 0:
			tlsPort = GatewayPortTLS
		case p.Port == GatewayPortHBONE:
			hasHBONE = true
		}
	}
	if tlsPort != 0 {
		out = append(out, gatewayPort{tlsPort, federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS})
	}
	if hasHBONE {
		out = append(out, gatewayPort{GatewayPortHBONE, federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE})
	}
	return out
}

// gatewayPortOverride reads networking.istio.io/gatewayPort, the label
// first, then the annotation. An unparsable value is ignored.
func gatewayPortOverride(svc *corev1.Service) (uint32, bool) {
	for _, m := range []map[string]string{svc.Labels, svc.Annotations} {
		v, ok := m[LabelGatewayPort]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil {
			continue
		}
		if port, ok := portNumber(int32(n)); ok {
			return port, true
		}
	}
	return 0, false
}

func gatewayAddresses(svc *corev1.Service) []string {
	var out []string
	add := func(addr string) {
		if addr != "" && !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		add(cmp.Or(ing.IP, ing.Hostname))
	}
	for _, ip := range svc.Spec.ExternalIPs {
		add(ip)
	}
	return out
}
