package leader

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// LeaseClient reads and writes Leases (coordination.k8s.io/v1).
type LeaseClient interface {
	Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// Update writes lease if its resourceVersion is still the stored one.
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// Rate limits of the lease client, its own: the renewals must not queue
// behind a burst of the spoke's other requests (the status writes of
// thousands of ServiceExports take minutes at the spoke's QPS). Renewing
// takes two requests per RetryPeriod.
const (
	leaseQPS   = 5
	leaseBurst = 10
	userAgent  = "meshfed-spoke"
)

// NewLeaseClient returns a LeaseClient for the API server rc points to,
// over a REST client whose scheme holds coordination/v1 alone (client-go's
// typed client would link the clientset), speaking protobuf, with an HTTP
// client and rate limiter of its own. rc is not modified.
func NewLeaseClient(rc *rest.Config) (LeaseClient, error) {
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(rc)
	c.GroupVersion = &coordinationv1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.RateLimiter, c.QPS, c.Burst = nil, leaseQPS, leaseBurst
	if c.UserAgent == "" {
		c.UserAgent = userAgent
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", coordinationv1.SchemeGroupVersion, err)
	}
	return restLeases{client}, nil
}

// restLeases is [LeaseClient] over a REST client.
type restLeases struct{ c *rest.RESTClient }

func (l restLeases) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.c.Get().Namespace(namespace).Resource("leases").Name(name).Do(ctx).Into(out)
	return out, err
}

func (l restLeases) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.c.Post().Namespace(lease.Namespace).Resource("leases").
		VersionedParams(&metav1.CreateOptions{FieldManager: userAgent}, metav1.ParameterCodec).
		Body(lease).Do(ctx).Into(out)
	return out, err
}

func (l restLeases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := l.c.Put().Namespace(lease.Namespace).Resource("leases").Name(lease.Name).
		VersionedParams(&metav1.UpdateOptions{FieldManager: userAgent}, metav1.ParameterCodec).
		Body(lease).Do(ctx).Into(out)
	return out, err
}
