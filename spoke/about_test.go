package spoke

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/testlog"
	"github.com/meshfed/meshfed/spoke/about"
)

// TestClusterIDFromAboutAPI: a spoke takes its cluster ID from the
// cluster's ClusterProperty cluster.clusterset.k8s.io, and refuses to
// start when --cluster-id or its certificate says otherwise, naming every
// source.
func TestClusterIDFromAboutAPI(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	c.InstallAboutAPI(t)
	for name, value := range map[string]string{about.ClusterIDProperty: "east", about.ClustersetProperty: "prod"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "about.k8s.io/v1beta1", "kind": "ClusterProperty",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"value": value},
		}}
		if err := c.CRClient.Create(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	certs := t.TempDir()
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east", "west"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	config := func(id, cert string) Config {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Kubeconfig, cfg.Hub = id, c.Kubeconfig, "127.0.0.1:1"
		cfg.CertFile, cfg.KeyFile, cfg.CAFile = filepath.Join(certs, cert+".crt"), filepath.Join(certs, cert+".key"), filepath.Join(certs, "ca.crt")
		return cfg
	}
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	s, err := New(t.Context(), config("", "east"), log)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.ClusterID != "east" || s.clusterset != "prod" {
		t.Errorf("cluster %q of clusterset %q, want east of prod", s.cfg.ClusterID, s.clusterset)
	}
	if _, err := New(t.Context(), config("east", "east"), log); err != nil {
		t.Errorf("--cluster-id agreeing with the ClusterProperty: %v", err)
	}
	for _, tc := range []struct {
		id, cert string
		want     []string
	}{
		{"west", "west", []string{`ClusterProperty cluster.clusterset.k8s.io says "east"`, `--cluster-id says "west"`}},
		{"", "west", []string{`ClusterProperty cluster.clusterset.k8s.io "east"`, `--cluster-id ""`, "west.crt", "spiffe://cluster.local/meshfed/cluster/west"}},
	} {
		_, err := New(t.Context(), config(tc.id, tc.cert), log)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("--cluster-id %q, certificate of %s: %v, want an error saying %s", tc.id, tc.cert, err, w)
			}
		}
	}
}
