package dnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testproc"
)

// Zones CoreDNS answers: a cluster's own, and the MCS ClusterSet's.
const (
	ClusterZone    = "cluster.local"
	ClusterSetZone = "clusterset.local"
)

// corefile is the whole configuration: the kubernetes plugin, authoritative
// for both zones, with clusterset.local served from ServiceImports
// (multicluster), and the ready plugin that Start polls. No fallthrough
// (kubeadm's Corefile has it for the reverse zones only): a name that does
// not exist is NXDOMAIN, where fallthrough to no next plugin would make it
// SERVFAIL.
const corefile = `.:%[1]d {
	bind 127.0.0.1
	errors
	ready 127.0.0.1:%[2]d
	kubernetes %[3]s %[4]s {
		kubeconfig %[5]q
		multicluster %[4]s
	}
}
`

const (
	// startTimeout bounds CoreDNS's start, its first list of every Service,
	// EndpointSlice, Namespace and ServiceImport included, on a 2-core
	// machine that runs other packages' tests too.
	startTimeout = 60 * time.Second
	// stopTimeout bounds the wait for CoreDNS to exit on SIGTERM, after
	// which it is killed.
	stopTimeout = 10 * time.Second
	// WaitTimeout bounds [Server.WaitFor]: an API write reaches CoreDNS's
	// caches through a watch, in milliseconds unless the machine is busy.
	WaitTimeout = 30 * time.Second
	// pollInterval is how often a wait asks again.
	pollInterval = 20 * time.Millisecond
	// readyPollInterval is how often Start asks the ready plugin, which
	// logs every time it answers not ready.
	readyPollInterval = 100 * time.Millisecond
	// startAttempts is how many times Start picks new ports when another
	// process took the ones it picked before CoreDNS bound them.
	startAttempts = 3
)

// errPortTaken reports that CoreDNS exited because a port it was given had
// been taken meanwhile.
var errPortTaken = errors.New("address already in use")

// Server is a running CoreDNS.
type Server struct {
	// Addr is 127.0.0.1:port, where CoreDNS answers over UDP and TCP.
	Addr string

	readyURL string
	proc     *testproc.Process
}

// Start runs CoreDNS against c's API server as c's administrator, waits
// until it has synced and answers, and stops it in t.Cleanup. It fails the
// test when the binary is missing (see [Binary]) or CoreDNS does not start.
func Start(t testing.TB, c *kubetest.Cluster) *Server {
	t.Helper()
	return StartKubeconfig(t, c.Kubeconfig)
}

// StartKubeconfig is [Start] with the API server and identity of a
// kubeconfig file (a ServiceAccount token's, say, to try an RBAC role).
func StartKubeconfig(t testing.TB, kubeconfig string) *Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s := launch(t, kubeconfig)
		ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
		err := s.waitReady(ctx)
		cancel()
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			t.Fatalf("dnstest: %v", err)
		}
	}
}

// Binary returns the path of the coredns that `make test-assets` builds
// into the KUBEBUILDER_ASSETS folder, or an error that says how to get it.
func Binary() (string, error) {
	dir, err := kubetest.AssetsDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "coredns")
	info, err := os.Stat(path)
	if err == nil && (info.IsDir() || info.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("dnstest: %s=%s has no usable coredns (%w): run `make test-assets`", kubetest.AssetsEnv, dir, err)
	}
	return path, nil
}

// launch starts CoreDNS on free ports without waiting for it, and stops it
// in t.Cleanup.
func launch(t testing.TB, kubeconfig string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(kubeconfig, "\"\\\n") {
		t.Fatalf("dnstest: kubeconfig path %q: a Corefile cannot quote it", kubeconfig)
	}
	port, err := freePort(true)
	if err != nil {
		t.Fatalf("dnstest: DNS port: %v", err)
	}
	readyPort, err := freePort(false)
	if err != nil {
		t.Fatalf("dnstest: ready port: %v", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, fmt.Appendf(nil, corefile, port, readyPort, ClusterZone, ClusterSetZone, kubeconfig), 0o600); err != nil {
		t.Fatalf("dnstest: %v", err)
	}
	s := &Server{
		Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		readyURL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(readyPort)) + "/ready",
	}
	cmd := exec.Command(bin, "-conf", conf)
	cmd.Dir = dir
	s.proc = testproc.Start(t, "coredns", cmd, filepath.Join(dir, "coredns.log"), stopTimeout)
	return s
}

// freePort returns a loopback port that is free at the moment for TCP and,
// with udp, for UDP too.
func freePort(udp bool) (int, error) {
	var lastErr error
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !udp {
			return port, l.Close()
		}
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		_ = l.Close()
		if err == nil {
			return port, u.Close()
		}
		lastErr = err
	}
	return 0, fmt.Errorf("no port free for both TCP and UDP: %w", lastErr)
}

// waitReady polls the ready plugin until it reports the kubernetes plugin
// synced, then the DNS port until it answers.
func (s *Server) waitReady(ctx context.Context) error {
	// No keep-alive: no connection (and goroutine) outlives the wait.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	ticker := time.NewTicker(readyPollInterval)
	defer ticker.Stop()
	ready := false
	var last error
	for {
		if !ready {
			ready, last = testproc.HTTPReady(ctx, client, s.readyURL)
		}
		if ready {
			var a Answer
			if a, last = s.Lookup(ctx, ClusterSetZone, dns.TypeSOA); last == nil && a.Rcode != "NOERROR" {
				last = fmt.Errorf("SOA %s: %s", ClusterSetZone, a.Rcode)
			}
			if last == nil {
				return nil
			}
		}
		select {
		case <-s.proc.Done():
			err := fmt.Errorf("coredns exited: %w%s", s.proc.Err(), s.logTail())
			if s.proc.LogContains(errPortTaken.Error()) {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("coredns not ready: %w (last: %w)%s", ctx.Err(), last, s.logTail())
		case <-ticker.C:
		}
	}
}

// logTail returns the end of CoreDNS's output, to explain a failure.
func (s *Server) logTail() string {
	return s.proc.LogTail(20)
}

// Answer is a DNS reply reduced to what tests compare.
type Answer struct {
	// Rcode is the reply's code as DNS names it: NOERROR, NXDOMAIN, ...
	Rcode string
	// Records holds the data of the answer section's records of the asked
	// type, in their presentation format without the name, TTL and class:
	// "10.0.0.1" for A, "fd00::1" for AAAA, "0 50 8080 target." (priority,
	// weight, port, target) for SRV. Sorted; nil when there is none.
	Records []string
}

// String formats a as "NOERROR [10.0.0.1 10.0.0.2]".
func (a Answer) String() string {
	return fmt.Sprintf("%s %v", a.Rcode, a.Records)
}

// Lookup asks the server for name's records of type qtype (dns.TypeA,
// dns.TypeAAAA, dns.TypeSRV, ...), over UDP, and over TCP when the UDP reply
// is truncated. name may omit the final dot.
func (s *Server) Lookup(ctx context.Context, name string, qtype uint16) (Answer, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = false
	reply, _, err := (&dns.Client{Net: "udp"}).ExchangeContext(ctx, m, s.Addr)
	if err == nil && reply.Truncated {
		reply, _, err = (&dns.Client{Net: "tcp"}).ExchangeContext(ctx, m, s.Addr)
	}
	if err != nil {
		return Answer{}, fmt.Errorf("dnstest: %s %s: %w", dns.TypeToString[qtype], name, err)
	}
	a := Answer{Rcode: dns.RcodeToString[reply.Rcode]}
	for _, rr := range reply.Answer {
		if rr.Header().Rrtype != qtype {
			continue
		}
		a.Records = append(a.Records, strings.TrimPrefix(rr.String(), rr.Header().String()))
	}
	slices.Sort(a.Records)
	return a, nil
}

// WaitFor asks for name's records of type qtype until the answer is want,
// and fails the test with the last answer when it is not within
// [WaitTimeout].
func (s *Server) WaitFor(t testing.TB, name string, qtype uint16, want Answer) {
	t.Helper()
	want.Records = slices.Sorted(slices.Values(want.Records))
	deadline := time.Now().Add(WaitTimeout)
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var last any = "none"
	for {
		got, err := s.Lookup(ctx, name, qtype)
		switch {
		case err == nil && got.Rcode == want.Rcode && slices.Equal(got.Records, want.Records):
			return
		case err == nil:
			last = got
		case time.Now().Before(deadline): // not the query the deadline cut short
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s %s: want %v within %v, last: %v%s", dns.TypeToString[qtype], name, want, WaitTimeout, last, s.logTail())
		case <-ticker.C:
		}
	}
}
