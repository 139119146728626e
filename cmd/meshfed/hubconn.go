package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/meshfed/meshfed/hub/debug"
)

// hubConn is a way to a hub's debug port: its address directly, or a
// local port forwarded to a hub pod's. Everything status asks goes
// through it, so the port-forward changes nothing but how it is opened.
type hubConn struct {
	base   string // http://host:port
	where  string // the hub's debug port, for messages
	hint   string // what to check when the port cannot be reached
	client *http.Client
	close  func()
	// detail, when set, says what last went wrong on the way to the
	// port (the kubelet's word on a connection it could not forward).
	detail func() string
}

// connector opens a hubConn.
type connector func(ctx context.Context) (*hubConn, error)

// directHub connects to the debug port at addr.
func directHub(addr string) connector {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return func(context.Context) (*hubConn, error) {
		client := newHTTPClient()
		return &hubConn{
			base: base, where: "the hub's debug port at " + addr,
			hint:   "is the hub running? set --debug-addr, or --kubeconfig to reach a hub in a cluster",
			client: client, close: client.CloseIdleConnections,
		}, nil
	}
}

// newHTTPClient returns a client with connections of its own, which
// close() closes: nothing is left behind once status returns.
func newHTTPClient() *http.Client {
	t, _ := http.DefaultTransport.(*http.Transport)
	return &http.Client{Transport: t.Clone()}
}

// hubStatus is the hub's answer.
type hubStatus struct {
	// raw is /debug/clusters as the hub served it, and clusters the same
	// decoded.
	raw      []byte
	clusters debug.ClustersResponse
	// readyChecked: /readyz was asked; ready is its answer, notReady what
	// it said otherwise.
	readyChecked, ready bool
	notReady            string
}

// permanentError is an error that asking again will not fix: --wait
// gives up on it at once.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

// status asks the hub for its clusters and, with readiness, whether it is
// ready (/readyz: its warm-up is over, so proxies are served).
func (c *hubConn) status(ctx context.Context, readiness bool) (*hubStatus, error) {
	code, body, err := c.get(ctx, "/debug/clusters")
	if err != nil {
		return nil, err
	}
	switch code {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, permanent(fmt.Errorf("%s answered %d %s to /debug/clusters: it is not a hub's debug port (a spoke's has no /debug/clusters)",
			c.where, code, http.StatusText(code)))
	default:
		return nil, fmt.Errorf("%s answered %d %s to /debug/clusters: %s", c.where, code, http.StatusText(code), firstLine(body))
	}
	s := &hubStatus{raw: body}
	if err := json.Unmarshal(body, &s.clusters); err != nil {
		return nil, permanent(fmt.Errorf("%s: /debug/clusters is not what a hub serves: %w", c.where, err))
	}
	if readiness {
		code, body, err := c.get(ctx, "/readyz")
		if err != nil {
			return nil, err
		}
		s.readyChecked, s.ready = true, code == http.StatusOK
		if !s.ready {
			s.notReady = fmt.Sprintf("/readyz answers %d: %s", code, firstLine(body))
		}
	}
	return s, nil
}

// get fetches path, telling a port that cannot be reached from an answer
// that is not the one expected.
func (c *hubConn) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, nil, permanent(err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL says nothing the message does not
		}
		if c.detail != nil {
			if d := c.detail(); d != "" {
				err = fmt.Errorf("%w; the port-forward says: %s", err, d)
			}
		}
		return 0, nil, fmt.Errorf("cannot reach %s (%s): %w", c.where, c.hint, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read %s's answer: %w", c.where, err)
	}
	return resp.StatusCode, body, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
