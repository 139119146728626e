package debughttp

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Options say which requests a debug port answers. The zero value keeps
// the Host check for every request that arrives over loopback and accepts
// no names beyond localhost.
type Options struct {
	// Addr is the listener's address. On a loopback address (127.0.0.0/8,
	// ::1 or localhost) every request gets the Host check; on any other,
	// only those that arrive through a loopback address (a wildcard
	// listener reached at 127.0.0.1) do, since the port is reachable from
	// the network there anyway and probes and scrapers name the pod IP.
	Addr net.Addr
	// Hosts are further names a request over loopback may carry in its
	// Host header, besides localhost and IP addresses. Ports and case do
	// not matter; there are no wildcards.
	Hosts []string
}

// Harden returns h behind the debug port's guard: GET and HEAD only (405
// with an Allow header otherwise), and, for a request that arrived over
// loopback, a Host header naming localhost, an IP address or one of
// opts.Hosts (421 otherwise).
//
// Any IP address is accepted as Host, not only loopback ones: DNS
// rebinding needs a name the attacker controls, and a page whose origin
// is an IP address was served by whatever listens there. That keeps
// proxies working that forward to loopback and keep the pod IP as Host
// (sidecars, port forwarders).
//
// A misdirected request gets 421 Misdirected Request, not 403 Forbidden:
// the server is not the authority for the name the client used, which is
// what 421 says (RFC 9110, section 15.5.20), whereas 403 would suggest
// that other credentials could help. The body says which names work.
func Harden(h http.Handler, opts Options) http.Handler {
	names := make(map[string]bool, len(opts.Hosts))
	for _, n := range opts.Hosts {
		names[hostname(n)] = true
	}
	loopbackListener := isLoopback(opts.Addr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (loopbackListener || arrivedOverLoopback(r)) && !allowedHost(r.Host, names) {
			http.Error(w, fmt.Sprintf("host %q is not served on this loopback debug port: use localhost or an IP address, or add the name to --debug-hosts", hostname(r.Host)),
				http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: the debug port is read-only", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// arrivedOverLoopback reports whether r came in on a loopback address,
// as a wildcard listener sees a local browser's request.
func arrivedOverLoopback(r *http.Request) bool {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return isLoopback(local)
}

func isLoopback(a net.Addr) bool {
	switch a := a.(type) {
	case nil:
		return false
	case *net.TCPAddr:
		return a != nil && a.IP.IsLoopback()
	}
	host := a.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = hostname(host)
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// allowedHost reports whether a Host header may reach a loopback debug
// port. A request without one is not from a browser, which always sends
// it.
func allowedHost(hostport string, names map[string]bool) bool {
	h := hostname(hostport)
	if h == "" || h == "localhost" || names[h] {
		return true
	}
	_, err := netip.ParseAddr(h)
	return err == nil
}

// hostname is the host of a Host header or a configured name, without
// port, brackets or the root's trailing dot, in lower case.
func hostname(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	} else {
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// ParseHosts parses the value of a --debug-hosts flag: host names or IP
// addresses separated by commas, without ports (every port of a name is
// accepted). It returns them as [Options] matches them.
func ParseHosts(v string) ([]string, error) {
	var hosts []string
	for entry := range strings.SplitSeq(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		if host, port, err := net.SplitHostPort(entry); err == nil {
			if _, err := strconv.ParseUint(port, 10, 16); err == nil && validHost(hostname(host)) {
				return nil, fmt.Errorf("debug host %q: give the name without a port (every port is accepted)", entry)
			}
			return nil, fmt.Errorf("debug host %q: not a host name or IP address", entry)
		}
		h := hostname(entry)
		if !validHost(h) {
			return nil, fmt.Errorf("debug host %q: not a host name or IP address", entry)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// validHost reports whether h is an IP address or a DNS name:
// dot-separated labels of letters, digits, hyphens and underscores
// (internal names use them).
func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		if strings.ContainsFunc(label, func(c rune) bool {
			return (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_'
		}) {
			return false
		}
	}
	return true
}
