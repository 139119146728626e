package leader

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Config configures leader election.
type Config struct {
	// Enabled: campaign for the Lease, and lead only while holding it.
	// Off, the spoke leads alone (the default: one spoke per cluster).
	Enabled bool
	// LeaseName and Namespace name the Lease. An empty Namespace is the
	// pod's (see [PodNamespace]); the caller resolves it.
	LeaseName, Namespace string
	// Identity names this spoke in the Lease (default: the host name, which
	// is the pod's name, and a random suffix, so that a restarted pod is a
	// new holder).
	Identity string
	// LeaseDuration is how long a standby waits, from when it last saw the
	// Lease change, before it takes the Lease over; RenewDeadline how long
	// the leader keeps leading without a successful renewal; RetryPeriod
	// how often the leader renews and a standby tries.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Defaults of client-go's leader election (and of kube-controller-manager's
// --leader-elect-* flags): a crashed leader is replaced after the lease
// duration and a jittered retry (15 to 20 s), one that shuts down (and
// releases the Lease) within a jittered retry.
const (
	DefaultLeaseName     = "meshfed-spoke"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// jitterFactor: a standby waits RetryPeriod times a random factor in
// [1, 1+jitterFactor) between tries, so that standbys do not try in step.
const jitterFactor = 1.2

// DefaultConfig returns the defaults, with election off.
func DefaultConfig() Config {
	return Config{
		LeaseName:     DefaultLeaseName,
		LeaseDuration: DefaultLeaseDuration,
		RenewDeadline: DefaultRenewDeadline,
		RetryPeriod:   DefaultRetryPeriod,
	}
}

// AddFlags declares the --leader-elect flags, defaulting to c's values.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "leader-elect", c.Enabled, "run as one of several spokes of this cluster: only the holder of a coordination.k8s.io Lease streams to the hub and writes into the cluster, the others stand by with warm caches (needs a Kubernetes source)")
	fs.StringVar(&c.LeaseName, "leader-elect-lease-name", c.LeaseName, "name of the leader election's Lease")
	fs.StringVar(&c.Namespace, "leader-elect-namespace", c.Namespace, "namespace of the leader election's Lease (default: the pod's namespace, from $POD_NAMESPACE or the service account's namespace file; outside a pod, --system-namespace)")
	fs.DurationVar(&c.LeaseDuration, "leader-elect-lease-duration", c.LeaseDuration, "how long a standby waits for a silent leader before it takes over")
	fs.DurationVar(&c.RenewDeadline, "leader-elect-renew-deadline", c.RenewDeadline, "how long the leader keeps leading without renewing its lease (less than the lease duration)")
	fs.DurationVar(&c.RetryPeriod, "leader-elect-retry-period", c.RetryPeriod, "how often the leader renews its lease and a standby tries to take it")
}

// Validate reports the problems in c. The durations are checked even when
// election is off, so that a bad flag is caught before it is turned on.
func (c Config) Validate() error {
	var errs []error
	if c.Enabled {
		if msgs := validation.IsDNS1123Subdomain(c.LeaseName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-elect-lease-name %q: %s", c.LeaseName, strings.Join(msgs, "; ")))
		}
		if c.Namespace != "" {
			if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("--leader-elect-namespace %q: %s", c.Namespace, strings.Join(msgs, "; ")))
			}
		}
	}
	switch {
	case c.RetryPeriod <= 0 || c.RenewDeadline <= 0 || c.LeaseDuration <= 0:
		errs = append(errs, errors.New("--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive"))
	case c.LeaseDuration <= c.RenewDeadline:
		// The leader must have stopped before a standby may take over.
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration %v must be longer than --leader-elect-renew-deadline %v", c.LeaseDuration, c.RenewDeadline))
	case float64(c.RenewDeadline) <= jitterFactor*float64(c.RetryPeriod):
		errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline %v must be longer than %v × --leader-elect-retry-period %v", c.RenewDeadline, jitterFactor, c.RetryPeriod))
	case c.LeaseDuration%time.Second != 0:
		// A Lease holds whole seconds.
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration %v is not a whole number of seconds", c.LeaseDuration))
	}
	return errors.Join(errs...)
}

// serviceAccountNamespace is where the kubelet writes the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace returns the namespace of the pod the process runs in: from
// $POD_NAMESPACE (the downward API), else the service account's namespace
// file; false outside a pod.
func PodNamespace() (string, bool) {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, true
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns, true
		}
	}
	return "", false
}
