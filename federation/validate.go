package federation

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Caps on the size of single objects. They bound what one object can cost
// the hub; shard-wide caps are the hub's Limits.
const (
	MaxPortsPerObject = 256
	MaxGateways       = 64
	maxIPs            = 2 // dual stack
	maxStringLen      = 253
)

// ValidationError says which object and field of a shard is invalid and why.
type ValidationError struct {
	Kind   string // "cluster", "gateway", "service", "endpoint", "workload" or "update"
	Key    string // the object's key
	Field  string // a field path such as "ports[1].port"
	Reason string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind)
	if e.Key != "" {
		b.WriteString(" " + e.Key)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Reason)
	return b.String()
}

// Unwrap makes every ValidationError match [ErrInvalid].
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// Object names the offending object as "kind key".
func (e *ValidationError) Object() string { return strings.TrimSpace(e.Kind + " " + e.Key) }

// validator collects the first error found in one object.
type validator struct {
	kind, key string
	err       *ValidationError
	// checks, when set, remembers the outcome of the syntax checks of
	// values that repeat across an update's objects (namespaces, nodes,
	// localities, labels): checked anew for every object, they would be
	// most of the cost of validating a cluster's first shard.
	checks map[checked][]string
}

// checked is one syntax check of one value.
type checked struct {
	check uint8
	value string
}

// The syntax checks remembered.
const (
	checkDNSLabel uint8 = iota
	checkDNS1035Label
	checkSubdomain
	checkLabelValue
)

var checkFuncs = [...]func(string) []string{
	checkDNSLabel:     validation.IsDNS1123Label,
	checkDNS1035Label: validation.IsDNS1035Label,
	checkSubdomain:    validation.IsDNS1123Subdomain,
	checkLabelValue:   validation.IsValidLabelValue,
}

// check runs a syntax check, or returns its remembered outcome.
func (v *validator) check(c uint8, value string) []string {
	if v.checks == nil {
		return checkFuncs[c](value)
	}
	k := checked{c, value}
	msgs, ok := v.checks[k]
	if !ok {
		msgs = checkFuncs[c](value)
		v.checks[k] = msgs
	}
	return msgs
}

func (v *validator) fail(field, format string, args ...any) {
	if v.err == nil {
		v.err = &ValidationError{Kind: v.kind, Key: v.key, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
}

func (v *validator) result() error {
	if v.err == nil {
		return nil
	}
	return v.err
}

func (v *validator) errs(field string, msgs []string) {
	if len(msgs) > 0 {
		v.fail(field, "%s", strings.Join(msgs, "; "))
	}
}

func (v *validator) required(field, value string) bool {
	if value == "" {
		v.fail(field, "required")
		return false
	}
	return true
}

func (v *validator) short(field, value string) {
	if len(value) > maxStringLen {
		v.fail(field, "%d bytes is longer than %d", len(value), maxStringLen)
	}
}

func (v *validator) dnsLabel(field, value string) {
	if v.required(field, value) {
		v.errs(field, v.check(checkDNSLabel, value))
	}
}

func (v *validator) optionalLabelValue(field, value string) {
	v.errs(field, v.check(checkLabelValue, value))
}

// ip checks that s is an IP address in canonical form, so that one address
// has one key.
func (v *validator) ip(field, s string) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		v.fail(field, "%q is not an IP address", s)
	case a.Zone() != "":
		v.fail(field, "%q has a zone", s)
	case a.String() != s:
		v.fail(field, "%q is not in canonical form %q", s, a.String())
	case a.IsUnspecified() || a.IsMulticast():
		v.fail(field, "%q is not a unicast address", s)
	}
}

func (v *validator) port(field string, p uint32) {
	if p == 0 || p > 65535 {
		v.fail(field, "%d is out of range 1-65535", p)
	}
}

func (v *validator) protocol(field string, p federationpb.Protocol) {
	if _, ok := federationpb.Protocol_name[int32(p)]; !ok || p == federationpb.Protocol_PROTOCOL_UNSPECIFIED {
		v.fail(field, "unknown protocol %d", p)
	}
}

// locality checks an object's locality field (its names are constants: this
// runs for every endpoint and workload).
func (v *validator) locality(l *federationpb.Locality) {
	v.optionalLabelValue("locality.region", l.GetRegion())
	v.optionalLabelValue("locality.zone", l.GetZone())
	v.optionalLabelValue("locality.subzone", l.GetSubzone())
}

func (v *validator) network(field, n string) {
	if n != "" {
		v.errs(field, v.check(checkLabelValue, n))
	}
}

func validateDNSLabel(s string) error {
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
	}
	return nil
}

// ValidateCluster checks a shard's cluster facts.
func ValidateCluster(c *federationpb.Cluster) error {
	v := &validator{kind: "cluster", key: c.GetId()}
	v.dnsLabel("id", c.GetId())
	v.network("network", c.GetNetwork())
	if td := c.GetTrustDomain(); td != "" {
		v.errs("trustDomain", validation.IsDNS1123Subdomain(td))
	}
	if len(c.GetGateways()) > MaxGateways {
		v.fail("gateways", "%d gateways is more than %d", len(c.GetGateways()), MaxGateways)
	}
	seen := make(map[string]bool, len(c.GetGateways()))
	for i, g := range c.GetGateways() {
		f := fmt.Sprintf("gateways[%d]", i)
		if _, err := netip.ParseAddr(g.GetAddress()); err == nil {
			v.ip(f+".address", g.GetAddress())
		} else if v.required(f+".address", g.GetAddress()) {
			v.errs(f+".address", validation.IsDNS1123Subdomain(g.GetAddress()))
		}
		v.port(f+".port", g.GetPort())
		if _, ok := federationpb.GatewayProtocol_name[int32(g.GetProtocol())]; !ok || g.GetProtocol() == federationpb.GatewayProtocol_GATEWAY_PROTOCOL_UNSPECIFIED {
			v.fail(f+".protocol", "unknown gateway protocol %d", g.GetProtocol())
		}
		v.network(f+".network", g.GetNetwork())
		v.short(f+".service", g.GetService())
		k := fmt.Sprintf("%s:%d", g.GetAddress(), g.GetPort())
		if seen[k] {
			v.fail(f, "duplicate gateway %s", k)
		}
		seen[k] = true
	}
	return v.result()
}

// MaxClusters bounds the clusters one object may name.
const MaxClusters = 4096

// ValidateServiceName checks a service's namespace and name.
func ValidateServiceName(namespace, name string) error {
	v := &validator{kind: "service", key: ServiceKey(namespace, name)}
	v.dnsLabel("namespace", namespace)
	if v.required("name", name) {
		v.errs("name", validation.IsDNS1035Label(name))
	}
	return v.result()
}

// ValidateService checks one service.
func ValidateService(s *federationpb.Service) error {
	v := &validator{kind: "service", key: KeyOfService(s)}
	v.dnsLabel("namespace", s.GetNamespace())
	if v.required("name", s.GetName()) {
		v.errs("name", validation.IsDNS1035Label(s.GetName()))
	}
	prefix := s.GetName() + "." + s.GetNamespace() + ".svc."
	if suffix, ok := strings.CutPrefix(s.GetHostname(), prefix); !ok || suffix == "" {
		v.fail("hostname", "%q is not %s<domain>", s.GetHostname(), prefix)
	} else {
		v.errs("hostname", validation.IsDNS1123Subdomain(s.GetHostname()))
	}
	switch s.GetType() {
	case federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP, federationpb.ServiceType_SERVICE_TYPE_HEADLESS,
		federationpb.ServiceType_SERVICE_TYPE_NODE_PORT, federationpb.ServiceType_SERVICE_TYPE_LOAD_BALANCER:
	default:
		v.fail("type", "unknown service type %d", s.GetType())
	}
	if len(s.GetClusterIps()) > maxIPs {
		v.fail("clusterIPs", "%d addresses is more than %d", len(s.GetClusterIps()), maxIPs)
	}
	for i, ip := range s.GetClusterIps() {
		v.ip(fmt.Sprintf("clusterIPs[%d]", i), ip)
	}
	if s.GetType() == federationpb.ServiceType_SERVICE_TYPE_HEADLESS && len(s.GetClusterIps()) > 0 {
		v.fail("clusterIPs", "a headless service has no cluster IPs")
	}
	ports := s.GetPorts()
	if len(ports) > MaxPortsPerObject {
		v.fail("ports", "%d ports is more than %d", len(ports), MaxPortsPerObject)
	}
	names := make(map[string]bool, len(ports))
	numbers := make(map[string]bool, len(ports))
	for i, p := range ports {
		f := fmt.Sprintf("ports[%d]", i)
		if p.GetName() != "" {
			v.errs(f+".name", validation.IsDNS1123Label(p.GetName()))
		} else if len(ports) > 1 {
			v.fail(f+".name", "required when a service has several ports")
		}
		if names[p.GetName()] {
			v.fail(f+".name", "duplicate port name %q", p.GetName())
		}
		names[p.GetName()] = true
		v.protocol(f+".protocol", p.GetProtocol())
		v.port(f+".port", p.GetPort())
		k := fmt.Sprintf("%s/%d", p.GetProtocol(), p.GetPort())
		if numbers[k] {
			v.fail(f+".port", "duplicate port %d", p.GetPort())
		}
		numbers[k] = true
		v.short(f+".appProtocol", p.GetAppProtocol())
		switch {
		case p.GetTargetPortName() != "":
			v.errs(f+".targetPortName", validation.IsValidPortName(p.GetTargetPortName()))
			if p.GetTargetPort() != 0 {
				v.fail(f+".targetPort", "set together with targetPortName")
			}
		case p.GetTargetPort() != 0:
			v.port(f+".targetPort", p.GetTargetPort())
		}
	}
	if s.GetExport().GetSource() == federationpb.ExportSource_EXPORT_SOURCE_UNSPECIFIED {
		v.fail("export.source", "required")
	} else if _, ok := federationpb.ExportSource_name[int32(s.GetExport().GetSource())]; !ok {
		v.fail("export.source", "unknown export source %d", s.GetExport().GetSource())
	}
	if t := s.GetExport().GetTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			v.fail("export.time", "%v", err)
		}
	}
	v.mcsProperties(s)
	v.keyValues("export.labels", s.GetExport().GetLabels(), true)
	v.keyValues("export.annotations", s.GetExport().GetAnnotations(), false)
	return v.result()
}

// Bounds of what an export carries into its import.
const (
	// maxSessionAffinityTimeout is Kubernetes' own bound (one day).
	maxSessionAffinityTimeout = 86400
	// MaxExportedKeys bounds an export's exported labels, and its
	// exported annotations.
	MaxExportedKeys = 64
	// maxAnnotationBytes bounds the exported annotations' keys and values
	// together (Kubernetes allows 256 KiB on one object; an import is
	// written into every member cluster).
	maxAnnotationBytes = 16 << 10
)

// mcsProperties checks what MCS copies from the oldest export into the
// ServiceImport.
func (v *validator) mcsProperties(s *federationpb.Service) {
	if _, ok := federationpb.SessionAffinity_name[int32(s.GetSessionAffinity())]; !ok {
		v.fail("sessionAffinity", "unknown session affinity %d", s.GetSessionAffinity())
	}
	if t := s.GetSessionAffinityTimeoutSeconds(); t > maxSessionAffinityTimeout {
		v.fail("sessionAffinityTimeoutSeconds", "%d is more than %d", t, maxSessionAffinityTimeout)
	}
	switch s.GetInternalTrafficPolicy() {
	case "", "Cluster", "Local":
	default:
		v.fail("internalTrafficPolicy", "%q is neither Cluster nor Local", s.GetInternalTrafficPolicy())
	}
	if d := s.GetTrafficDistribution(); d != "" {
		v.errs("trafficDistribution", validation.IsQualifiedName(d))
	}
	fams := s.GetIpFamilies()
	if len(fams) > maxIPs {
		v.fail("ipFamilies", "%d families is more than %d", len(fams), maxIPs)
	}
	for i, f := range fams {
		if f != federationpb.IPFamily_IP_FAMILY_IPV4 && f != federationpb.IPFamily_IP_FAMILY_IPV6 {
			v.fail(fmt.Sprintf("ipFamilies[%d]", i), "unknown IP family %d", f)
		}
		if i > 0 && f == fams[0] {
			v.fail(fmt.Sprintf("ipFamilies[%d]", i), "duplicate IP family %s", f)
		}
	}
}

// keyValues checks exported labels (or annotations): sorted by key, each
// key once, keys qualified names, label values valid label values.
func (v *validator) keyValues(field string, kvs []*federationpb.KeyValue, labels bool) {
	if len(kvs) > MaxExportedKeys {
		v.fail(field, "%d entries is more than %d", len(kvs), MaxExportedKeys)
		return
	}
	size := 0
	for i, kv := range kvs {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.errs(f+".key", validation.IsQualifiedName(kv.GetKey()))
		if i > 0 && kv.GetKey() <= kvs[i-1].GetKey() {
			v.fail(f+".key", "%q is not after %q: keys are sorted and unique", kv.GetKey(), kvs[i-1].GetKey())
		}
		if labels {
			v.errs(f+".value", validation.IsValidLabelValue(kv.GetValue()))
		}
		size += len(kv.GetKey()) + len(kv.GetValue())
	}
	if !labels && size > maxAnnotationBytes {
		v.fail(field, "%d bytes is more than %d", size, maxAnnotationBytes)
	}
}

// ValidateEndpoint checks one endpoint.
func ValidateEndpoint(e *federationpb.Endpoint) error {
	return validateEndpoint(e, EndpointKey(e), nil)
}

func validateEndpoint(e *federationpb.Endpoint, key string, checks map[checked][]string) error {
	v := &validator{kind: "endpoint", key: key, checks: checks}
	v.dnsLabel("namespace", e.GetNamespace())
	if v.required("service", e.GetService()) {
		v.errs("service", v.check(checkDNS1035Label, e.GetService()))
	}
	v.ip("address", e.GetAddress())
	if len(e.GetPorts()) > MaxPortsPerObject {
		v.fail("ports", "%d ports is more than %d", len(e.GetPorts()), MaxPortsPerObject)
	}
	for i, p := range e.GetPorts() {
		if v.err != nil {
			break
		}
		// Field names only for the error: a Sprintf per port per endpoint
		// would be a measurable part of validating a shard.
		pv := &validator{kind: v.kind, key: v.key, checks: v.checks}
		if p.GetName() != "" {
			pv.errs(".name", pv.check(checkDNSLabel, p.GetName()))
		}
		pv.protocol(".protocol", p.GetProtocol())
		pv.port(".port", p.GetPort())
		pv.short(".appProtocol", p.GetAppProtocol())
		if pv.err != nil {
			pv.err.Field = fmt.Sprintf("ports[%d]", i) + pv.err.Field
			v.err = pv.err
		}
	}
	if n := e.GetNode(); n != "" {
		v.errs("node", v.check(checkSubdomain, n))
	}
	v.locality(e.GetLocality())
	if w := e.GetWorkload(); w != nil {
		v.short("workload.kind", w.GetKind())
		v.short("workload.name", w.GetName())
		v.short("workload.uid", w.GetUid())
	}
	if h := e.GetHostname(); h != "" {
		v.errs("hostname", validation.IsDNS1123Label(h))
	}
	v.network("network", e.GetNetwork())
	return v.result()
}

// ValidateWorkload checks one workload.
func ValidateWorkload(w *federationpb.Workload) error {
	return validateWorkload(w, nil)
}

func validateWorkload(w *federationpb.Workload, checks map[checked][]string) error {
	v := &validator{kind: "workload", key: w.GetUid(), checks: checks}
	if v.required("uid", w.GetUid()) {
		v.short("uid", w.GetUid())
		if strings.ContainsFunc(w.GetUid(), func(r rune) bool { return r <= ' ' || r > '~' }) {
			v.fail("uid", "%q has spaces or non-printable characters", w.GetUid())
		}
	}
	v.dnsLabel("namespace", w.GetNamespace())
	if v.required("name", w.GetName()) {
		v.errs("name", validation.IsDNS1123Subdomain(w.GetName()))
	}
	if len(w.GetIps()) == 0 || len(w.GetIps()) > maxIPs {
		v.fail("ips", "%d addresses, want 1 or %d", len(w.GetIps()), maxIPs)
	}
	for i, ip := range w.GetIps() {
		if v.err != nil {
			break
		}
		v.ip("ips", ip)
		if v.err != nil {
			v.err.Field = fmt.Sprintf("ips[%d]", i)
		}
	}
	if sa := w.GetServiceAccount(); sa != "" {
		v.errs("serviceAccount", v.check(checkSubdomain, sa))
	}
	if n := w.GetNode(); n != "" {
		v.errs("node", v.check(checkSubdomain, n))
	}
	v.locality(w.GetLocality())
	v.optionalLabelValue("app", w.GetApp())
	v.optionalLabelValue("version", w.GetVersion())
	v.optionalLabelValue("canonicalName", w.GetCanonicalName())
	v.optionalLabelValue("canonicalRevision", w.GetCanonicalRevision())
	v.network("network", w.GetNetwork())
	return v.result()
}

// ValidateUpdate checks every object of an update (or of one chunk of it)
// and that no object appears twice. It does not check shard-wide caps.
func ValidateUpdate(u *federationpb.ShardUpdate) error {
	if u.GetVersion() == 0 {
		return &ValidationError{Kind: "update", Field: "version", Reason: "must be greater than 0"}
	}
	if u.GetFull() && (len(u.GetRemovedServices())+len(u.GetRemovedEndpoints())+len(u.GetRemovedWorkloads()) > 0) {
		return &ValidationError{Kind: "update", Field: "removed", Reason: "a full update has no removals"}
	}
	if c := u.GetCluster(); c != nil {
		if err := ValidateCluster(c); err != nil {
			return err
		}
	}
	type object struct{ kind, key string }
	seen := make(map[object]struct{}, len(u.GetServices())+len(u.GetEndpoints())+len(u.GetWorkloads())+
		len(u.GetRemovedServices())+len(u.GetRemovedEndpoints())+len(u.GetRemovedWorkloads()))
	dup := func(kind, key string) error {
		k := object{kind, key}
		if _, ok := seen[k]; ok {
			return &ValidationError{Kind: kind, Key: key, Reason: "appears twice in one update"}
		}
		seen[k] = struct{}{}
		return nil
	}
	for _, s := range u.GetServices() {
		if err := ValidateService(s); err != nil {
			return err
		}
		if err := dup("service", KeyOfService(s)); err != nil {
			return err
		}
	}
	checks := map[checked][]string{}
	for _, e := range u.GetEndpoints() {
		key := EndpointKey(e)
		if err := validateEndpoint(e, key, checks); err != nil {
			return err
		}
		if err := dup("endpoint", key); err != nil {
			return err
		}
	}
	for _, w := range u.GetWorkloads() {
		if err := validateWorkload(w, checks); err != nil {
			return err
		}
		if err := dup("workload", w.GetUid()); err != nil {
			return err
		}
	}
	for _, k := range u.GetRemovedServices() {
		if err := validateKey("service", k, 2); err != nil {
			return err
		}
		if err := dup("service", k); err != nil {
			return err
		}
	}
	for _, k := range u.GetRemovedEndpoints() {
		if err := validateKey("endpoint", k, 3); err != nil {
			return err
		}
		if err := dup("endpoint", k); err != nil {
			return err
		}
	}
	for _, k := range u.GetRemovedWorkloads() {
		if k == "" || len(k) > maxStringLen {
			return &ValidationError{Kind: "workload", Key: k, Field: "removed", Reason: "not a workload uid"}
		}
		if err := dup("workload", k); err != nil {
			return err
		}
	}
	return nil
}

func validateKey(kind, key string, parts int) error {
	if len(key) > 2*maxStringLen || strings.Count(key, "/") != parts-1 || strings.Contains(key, "//") ||
		strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return &ValidationError{Kind: kind, Key: key, Field: "removed", Reason: fmt.Sprintf("not a %s key", kind)}
	}
	return nil
}
