// Package demofleet runs the demo's clusterset in a test's process, for
// the tests outside package e2e that need a live one (the web view's in a
// browser, the monitoring charts'): a hub on loopback, with fresh
// certificates and a cluster policy naming the demo's clusters and
// networks, and a spoke per demo cluster reading the demo's manifests
// from a directory the test may edit.
package demofleet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshfed/meshfed/examples/demo"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/testlog"
	"github.com/meshfed/meshfed/spoke"
)

// Clusters are the demo's clusters, with their networks.
var Clusters = map[string]string{"east": "network-east", "west": "network-west"}

// Fleet is a running demo clusterset.
type Fleet struct {
	Hub *hub.Hub
	// Manifests holds each cluster's manifests, in a directory named after
	// it: an edit is federated as in the demo.
	Manifests string
}

// Start runs the fleet until the test ends. Its components log into the
// test's log when it fails.
func Start(t testing.TB) *Fleet {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east", "west"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "clusters.yaml")
	policy := "clusters:\n"
	for id, network := range Clusters {
		policy += "- id: " + id + "\n  networks: [" + network + "]\n"
	}
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &Fleet{Manifests: filepath.Join(dir, "manifests")}
	if err := os.CopyFS(f.Manifests, demo.Manifests); err != nil {
		t.Fatal(err)
	}
	log, _ := testlog.New(t)
	cfg := hub.DefaultConfig()
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key"), filepath.Join(certs, "ca.crt")
	cfg.XDSCertFile, cfg.XDSKeyFile = cfg.CertFile, cfg.KeyFile
	cfg.ClustersConfig = policyFile
	h, err := hub.New(cfg, log.With("process", "hub"))
	if err != nil {
		t.Fatal(err)
	}
	f.Hub = h
	run(t, h.Run)
	for id, network := range Clusters {
		scfg := spoke.DefaultConfig()
		scfg.ClusterID, scfg.Network, scfg.Hub, scfg.ServerName = id, network, h.FederationAddr().String(), "localhost"
		scfg.Manifests = filepath.Join(f.Manifests, id)
		scfg.CertFile, scfg.KeyFile, scfg.CAFile = filepath.Join(certs, id+".crt"), filepath.Join(certs, id+".key"), filepath.Join(certs, "ca.crt")
		s, err := spoke.New(t.Context(), scfg, log.With("process", "spoke-"+id))
		if err != nil {
			t.Fatal(err)
		}
		run(t, s.Run)
	}
	return f
}

// run runs fn until the test ends, and fails the test if it returns an
// error.
func run(t testing.TB, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}
