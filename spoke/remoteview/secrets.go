package remoteview

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/federation"
)

// Labels and annotations of the remote secrets.
const (
	// LabelMultiCluster is what istiod selects remote secrets by.
	LabelMultiCluster = "istio/multiCluster"
	// LabelRemoteView marks a Secret as meshfed's, naming the member whose
	// view it opens: meshfed deletes such Secrets, and no other.
	LabelRemoteView = "meshfed.io/remote-view-of"
	// AnnotationCluster names the remote cluster, as istioctl's remote
	// secrets do.
	AnnotationCluster = "networking.istio.io/cluster"
	// DefaultSecretPrefix starts every remote secret's name by default.
	DefaultSecretPrefix = "meshfed-remote-"
)

// SecretsAPI writes Secrets in istiod's namespace.
type SecretsAPI interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.SecretList, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
	Create(ctx context.Context, s *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error)
	Update(ctx context.Context, s *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	// ConfigMap reads a ConfigMap of the same namespace (the owner).
	ConfigMap(ctx context.Context, name string) (*corev1.ConfigMap, error)
}

// SecretsConfig is what the remote secrets say.
type SecretsConfig struct {
	// URL is where istiod reaches the views (https://host:port, without
	// the /clusters/<id> a secret adds).
	URL string
	// CA is the PEM bundle that signs the views' certificate.
	CA []byte
	// Token is the bearer token the views require.
	Token string
	// Prefix starts each secret's name, the member's ID ends it ("":
	// DefaultSecretPrefix). A Secret of that name that is not meshfed's is
	// taken over: with "istio-remote-secret-", istioctl's own names, the
	// spoke rewrites Istio's remote secrets in place and istiod swaps
	// each remote cluster for its view make-before-break.
	Prefix string
	// Owner, when set, is a ConfigMap of the secrets' namespace that owns
	// them: deleting it (the spoke chart's uninstall does) has the garbage
	// collector delete every remote secret, so that none is left pointing
	// at a spoke that is gone. While it is missing, nothing is written.
	Owner string
	// RetryAfter is how long a failed sync waits before the next (0:
	// five seconds).
	RetryAfter time.Duration
	// Metrics, when set, registers the writer's metrics.
	Metrics prometheus.Registerer
}

// Secrets keeps one remote secret per member in istiod's namespace, so
// that istiod reads each member's view as a remote cluster: created when
// a member's view is, updated when what it says changes, deleted when the
// member goes (withdrawn). Nothing is written before the first set of
// imports: a spoke that has not heard from a hub does not know the
// members.
type Secrets struct {
	api     SecretsAPI
	cfg     SecretsConfig
	members func() ([]federation.ClusterID, <-chan struct{})
	log     *slog.Logger
	metrics *secretMetrics
}

// NewSecrets returns the writer of the remote secrets of members (a
// Server's Members).
func NewSecrets(api SecretsAPI, cfg SecretsConfig, members func() ([]federation.ClusterID, <-chan struct{}), log *slog.Logger) *Secrets {
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = 5 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultSecretPrefix
	}
	return &Secrets{api: api, cfg: cfg, members: members, log: log, metrics: newSecretMetrics(cfg.Metrics)}
}

// Run keeps the secrets until ctx ends.
func (s *Secrets) Run(ctx context.Context) error {
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	for {
		members, changed := s.members()
		if members != nil {
			if err := s.sync(ctx, members); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.metrics.failures.Inc()
				s.log.Warn("remote secrets not written; retrying", "err", err, "after", s.cfg.RetryAfter)
				retry.Reset(s.cfg.RetryAfter)
			}
		}
		select {
		case <-changed:
		case <-retry.C:
		case <-ctx.Done():
			return nil
		}
	}
}

// sync makes the secrets those of members.
func (s *Secrets) sync(ctx context.Context, members []federation.ClusterID) error {
	list, err := s.api.List(ctx, metav1.ListOptions{LabelSelector: LabelRemoteView})
	if err != nil {
		return fmt.Errorf("list the remote secrets: %w", err)
	}
	have := map[string]*corev1.Secret{}
	for i := range list.Items {
		have[list.Items[i].Name] = &list.Items[i]
	}
	var owner []metav1.OwnerReference
	if s.cfg.Owner != "" {
		cm, err := s.api.ConfigMap(ctx, s.cfg.Owner)
		if err != nil {
			return fmt.Errorf("the remote secrets' owner, ConfigMap %s: %w", s.cfg.Owner, err)
		}
		owner = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}}
	}
	want := map[string]*corev1.Secret{}
	for _, id := range members {
		sec := s.secret(id)
		sec.OwnerReferences = owner
		want[sec.Name] = sec
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		sec, old := want[name], have[name]
		switch {
		case old == nil:
			_, err := s.api.Create(ctx, sec, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Not meshfed's yet (not listed by the label): take it over.
				var cur *corev1.Secret
				if cur, err = s.api.Get(ctx, name, metav1.GetOptions{}); err == nil {
					sec.ResourceVersion = cur.ResourceVersion
					_, err = s.api.Update(ctx, sec, metav1.UpdateOptions{})
				}
				if err == nil {
					s.log.Info("remote secret taken over", "member", sec.Labels[LabelRemoteView], "secret", name)
					continue
				}
			}
			if err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			s.log.Info("remote secret written", "member", sec.Labels[LabelRemoteView], "secret", name)
		case !maps.EqualFunc(old.Data, sec.Data, func(a, b []byte) bool { return string(a) == string(b) }) ||
			!maps.Equal(old.Labels, sec.Labels) || !maps.Equal(old.Annotations, sec.Annotations) ||
			!slices.EqualFunc(old.OwnerReferences, sec.OwnerReferences, func(a, b metav1.OwnerReference) bool { return a.UID == b.UID && a.Name == b.Name && a.Kind == b.Kind }):
			sec.ResourceVersion = old.ResourceVersion
			if _, err := s.api.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update %s: %w", name, err)
			}
			s.log.Info("remote secret updated", "member", sec.Labels[LabelRemoteView], "secret", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if want[name] != nil {
			continue
		}
		if err := s.api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		s.log.Info("remote secret deleted: the member left", "member", have[name].Labels[LabelRemoteView], "secret", name)
	}
	s.metrics.secrets.Set(float64(len(want)))
	return nil
}

// secret is member id's remote secret: a kubeconfig of its view.
func (s *Secrets) secret(id federation.ClusterID) *corev1.Secret {
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
contexts:
- name: %[1]s
  context: {cluster: %[1]s, user: meshfed}
current-context: %[1]s
users:
- name: meshfed
  user: {token: %[4]s}
`, id, strings.TrimSuffix(s.cfg.URL, "/")+PathPrefix+string(id), base64.StdEncoding.EncodeToString(s.cfg.CA), s.cfg.Token)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.cfg.Prefix + string(id),
			Labels:      map[string]string{LabelMultiCluster: "true", LabelRemoteView: string(id)},
			Annotations: map[string]string{AnnotationCluster: string(id)},
		},
		Data: map[string][]byte{string(id): []byte(kubeconfig)},
	}
}

// RESTSecrets is [SecretsAPI] over a core REST client, in namespace (the
// spoke links no clientset).
func RESTSecrets(c rest.Interface, namespace string) SecretsAPI {
	return restSecrets{c: c, namespace: namespace}
}

type restSecrets struct {
	c         rest.Interface
	namespace string
}

func (r restSecrets) List(ctx context.Context, opts metav1.ListOptions) (*corev1.SecretList, error) {
	out := &corev1.SecretList{}
	err := r.c.Get().Namespace(r.namespace).Resource("secrets").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (r restSecrets) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	err := r.c.Get().Namespace(r.namespace).Resource("secrets").Name(name).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (r restSecrets) Create(ctx context.Context, s *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	err := r.c.Post().Namespace(r.namespace).Resource("secrets").VersionedParams(&opts, metav1.ParameterCodec).Body(s).Do(ctx).Into(out)
	return out, err
}

func (r restSecrets) Update(ctx context.Context, s *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	err := r.c.Put().Namespace(r.namespace).Resource("secrets").Name(s.Name).VersionedParams(&opts, metav1.ParameterCodec).Body(s).Do(ctx).Into(out)
	return out, err
}

func (r restSecrets) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.c.Delete().Namespace(r.namespace).Resource("secrets").Name(name).Body(&opts).Do(ctx).Error()
}

func (r restSecrets) ConfigMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := r.c.Get().Namespace(r.namespace).Resource("configmaps").Name(name).Do(ctx).Into(out)
	return out, err
}
