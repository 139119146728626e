package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"
)

// defaultHubSelector selects the hub chart's pods: its selector labels
// (charts/meshfed-hub/templates/_helpers.tpl) under the default chart
// name, whatever the release is called. --hub-selector narrows it to one
// release (app.kubernetes.io/instance=NAME) or follows a nameOverride.
const defaultHubSelector = "app.kubernetes.io/name=meshfed-hub"

// defaultDebugPort is the hub chart's debug.port, for a pod without a
// container port named "debug".
const defaultDebugPort = 8080

// kubeOptions say how to reach a hub that runs in a cluster.
type kubeOptions struct {
	kubeconfig, context, namespace, selector string
}

// enabled: the hub is to be reached through the cluster's API server.
func (k kubeOptions) enabled() bool { return k.kubeconfig != "" || k.context != "" }

// restConfig loads the kubeconfig as kubectl does: --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config, at --context or its current one.
func (k kubeOptions) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context}).ClientConfig()
	if err != nil {
		return nil, permanent(fmt.Errorf("kubeconfig: %w", err))
	}
	return rc, nil
}

// connector finds a hub pod and forwards a local port to its debug
// port; warnings (no pod ready) go to stderr.
func (k kubeOptions) connector(stderr io.Writer) connector {
	return func(ctx context.Context) (*hubConn, error) {
		rc, err := k.restConfig()
		if err != nil {
			return nil, err
		}
		pods, err := newPodClient(rc)
		if err != nil {
			return nil, permanent(err)
		}
		pod, warning, err := findHubPod(ctx, pods, k.namespace, k.selector)
		if err != nil {
			return nil, err
		}
		if warning != "" {
			fmt.Fprintln(stderr, warning)
		}
		port := debugPort(pod)
		local, stop, lastErr, err := forward(ctx, rc, pods, pod, port)
		if err != nil {
			return nil, err
		}
		client := newHTTPClient()
		return &hubConn{
			base:  "http://" + local,
			where: fmt.Sprintf("the debug port (%d) of pod %s/%s, through a port-forward", port, pod.Namespace, pod.Name),
			hint:  "does the pod still run? is its debug port open?",
			// Each connection through the forward is a stream of its
			// SPDY connection: close them before the connection.
			client: client, close: func() { client.CloseIdleConnections(); stop() },
			detail: lastErr,
		}, nil
	}
}

// podClient lists pods and names the port-forward subresource, over a
// REST client whose scheme holds core/v1 alone: client-go's typed
// clients would link every API group into meshfed.
type podClient struct{ c *rest.RESTClient }

func newPodClient(rc *rest.Config) (podClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return podClient{}, err
	}
	c := rest.CopyConfig(rc)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = "meshfed-status"
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return podClient{}, fmt.Errorf("kubernetes client: %w", err)
	}
	return podClient{client}, nil
}

func (p podClient) list(ctx context.Context, namespace, selector string) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := p.c.Get().Namespace(namespace).Resource("pods").
		VersionedParams(&metav1.ListOptions{LabelSelector: selector}, metav1.ParameterCodec).
		Do(ctx).Into(out)
	return out, err
}

// findHubPod picks the hub pod to ask: a ready one (the first by name),
// else one that runs but is not ready, which a hub warming up is (its
// /debug views answer), with a warning saying so. When there is none, it
// says which pods there are and why none will do; an error that waiting
// may cure is not permanent.
func findHubPod(ctx context.Context, pods podClient, namespace, selector string) (*corev1.Pod, string, error) {
	if _, err := labels.Parse(selector); err != nil {
		return nil, "", permanent(fmt.Errorf("--hub-selector %q: %w", selector, err))
	}
	list, err := pods.list(ctx, namespace, selector)
	switch {
	case apierrors.IsForbidden(err):
		return nil, "", permanent(fmt.Errorf("list the hub's pods in namespace %s: %w (meshfed status needs list on pods and create on pods/portforward there)", namespace, err))
	case apierrors.IsUnauthorized(err):
		return nil, "", permanent(fmt.Errorf("list the hub's pods in namespace %s: %w (are the kubeconfig's credentials current?)", namespace, err))
	case err != nil:
		return nil, "", fmt.Errorf("list the hub's pods in namespace %s: %w", namespace, err)
	}
	items := slices.Clone(list.Items)
	slices.SortFunc(items, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	var running *corev1.Pod
	for i := range items {
		p := &items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if podReady(p) {
			return p, "", nil
		}
		if running == nil {
			running = p
		}
	}
	if running != nil {
		return running, fmt.Sprintf("no hub pod in namespace %s is ready; asking %s, which runs (a hub is not ready while it warms up)", namespace, running.Name), nil
	}
	if len(items) == 0 {
		return nil, "", fmt.Errorf("no pod in namespace %s matches %s: is the hub installed there? (set --namespace, or --hub-selector for a chart installed under another name)", namespace, selector)
	}
	states := make([]string, 0, len(items))
	for _, p := range items {
		state := string(p.Status.Phase)
		if state == "" {
			state = "no status yet"
		}
		if p.DeletionTimestamp != nil {
			state = "terminating"
		}
		states = append(states, fmt.Sprintf("%s (%s)", p.Name, state))
	}
	return nil, "", fmt.Errorf("no hub pod in namespace %s runs: %s", namespace, strings.Join(states, ", "))
}

func podReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// debugPort is the pod's container port named "debug" (the hub chart's
// name for debug.port), or the chart's default.
func debugPort(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "debug" {
				return int(port.ContainerPort)
			}
		}
	}
	return defaultDebugPort
}

// forward opens a port-forward to port of pod, as kubectl port-forward
// does (SPDY through the API server and the pod's kubelet), on a free
// port of 127.0.0.1. It returns that address, a function that ends the
// forward, and one that says what last went wrong in it (the kubelet's
// word on a connection it could not forward), for a request that fails.
// The hub sees the connections arrive on its loopback interface, so a
// debug port bound to 127.0.0.1 is reachable too.
func forward(ctx context.Context, rc *rest.Config, pods podClient, pod *corev1.Pod, port int) (local string, stop func(), lastErr func() string, err error) {
	what := fmt.Sprintf("port-forward to port %d of pod %s/%s", port, pod.Namespace, pod.Name)
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return "", nil, nil, permanent(fmt.Errorf("%s: %w", what, err))
	}
	url := pods.c.Post().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	// The forward outlives this call, until stop; client-go logs what
	// fails in it, which errs keeps for the messages instead.
	errs := &lastError{}
	fctx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logr.FromSlogHandler(errs)))
	readyCh := make(chan struct{})
	pf, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, readyCh, io.Discard, io.Discard)
	if err != nil {
		cancel()
		return "", nil, nil, permanent(fmt.Errorf("%s: %w", what, err))
	}
	// ForwardPorts returns once the forward fails to open, or ends.
	var failed error
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed = pf.ForwardPorts()
	}()
	stop = func() {
		cancel()
		<-done
	}
	select {
	case <-readyCh:
	case <-done:
		cancel()
		err := cmp.Or(failed, errors.New("it ended before it was ready"))
		// A refused upgrade comes back as the API server's message alone,
		// not as a Status.
		if apierrors.IsForbidden(err) || strings.Contains(err.Error(), " is forbidden: ") {
			return "", nil, nil, permanent(fmt.Errorf("%s: %w (meshfed status needs create on pods/portforward in namespace %s)", what, err, pod.Namespace))
		}
		return "", nil, nil, fmt.Errorf("%s: %w", what, err)
	case <-ctx.Done():
		stop()
		return "", nil, nil, fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		stop()
		return "", nil, nil, fmt.Errorf("%s: no local port: %w", what, cmp.Or(err, errors.New("none bound")))
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), stop, errs.get, nil
}

// lastError is a slog.Handler that keeps the error of the last record
// logged at error level.
type lastError struct {
	mu  sync.Mutex
	err string
}

func (l *lastError) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelError
}

func (l *lastError) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			msg += ": " + a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = msg
	return nil
}

func (l *lastError) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lastError) WithGroup(string) slog.Handler      { return l }

func (l *lastError) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
