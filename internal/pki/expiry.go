package pki

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Expiring is a certificate in use, or a set of them, that expires:
// [*KeyPair] (its certificate) and [*Bundle] (its first CA to expire).
type Expiring interface {
	NotAfter() time.Time
}

var (
	_ Expiring = (*KeyPair)(nil)
	_ Expiring = (*Bundle)(nil)
)

// ExpiryCollector exports when certificates expire, as the gauge
// <namespace>_certificate_expiry_timestamp_seconds{role} (NotAfter in
// seconds since the Unix epoch), so that an alert can fire while there is
// time to rotate them. It reads each certificate when scraped: a reload of
// its files shows at the next scrape (a scrape also checks the files, as a
// handshake does).
type ExpiryCollector struct {
	desc  *prometheus.Desc
	roles []string
	certs map[string]Expiring
}

var _ prometheus.Collector = (*ExpiryCollector)(nil)

// NewExpiryCollector returns a collector of the expiry of certs, keyed by
// the role label: the hub's {"federation", "xds", "ca"}, for instance.
func NewExpiryCollector(namespace string, certs map[string]Expiring) *ExpiryCollector {
	return &ExpiryCollector{
		desc: prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "certificate_expiry_timestamp_seconds"),
			"When the certificate in use expires (its NotAfter), in seconds since the Unix epoch; for a CA bundle, its first certificate to expire.",
			[]string{"role"}, nil),
		roles: slices.Sorted(maps.Keys(certs)),
		certs: maps.Clone(certs),
	}
}

// Describe implements prometheus.Collector.
func (c *ExpiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *ExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, role := range c.roles {
		notAfter := c.certs[role].NotAfter()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(notAfter.Unix()), role)
	}
}
