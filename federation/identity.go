package federation

import (
	"fmt"
	"net/url"
	"strings"
)

// ClusterID names a cluster in the clusterset. It is a DNS-1123 label.
type ClusterID string

// NetworkID names a network: endpoints on one network reach each other
// directly; other networks are reached through east-west gateways.
type NetworkID string

const spiffeClusterPrefix = "/meshfed/cluster/"

// ClusterSPIFFEID is the identity a spoke's certificate carries for a
// cluster: spiffe://<trust domain>/meshfed/cluster/<id>.
func ClusterSPIFFEID(trustDomain string, id ClusterID) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: spiffeClusterPrefix + string(id)}
}

// HubSPIFFEID is the identity of a hub: spiffe://<trust domain>/meshfed/hub.
func HubSPIFFEID(trustDomain string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: "/meshfed/hub"}
}

// ClusterFromSPIFFEID returns the cluster a spoke identity names.
func ClusterFromSPIFFEID(u *url.URL) (trustDomain string, id ClusterID, err error) {
	if u == nil || u.Scheme != "spiffe" || u.Host == "" {
		return "", "", fmt.Errorf("%w: %v is not a SPIFFE ID", ErrBadIdentity, u)
	}
	name, ok := strings.CutPrefix(u.Path, spiffeClusterPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: %s is not a cluster identity (want spiffe://<trust domain>%s<cluster>)", ErrBadIdentity, u, spiffeClusterPrefix)
	}
	if err := validateDNSLabel(name); err != nil {
		return "", "", fmt.Errorf("%w: %s: cluster %q: %w", ErrBadIdentity, u, name, err)
	}
	return u.Host, ClusterID(name), nil
}
