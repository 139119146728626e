// Package promql checks the hub chart's dashboard and alerts with
// Prometheus's own PromQL parser: every expression parses, and every
// metric it reads is one a real hub exports. It is a module of its own so
// that Prometheus's packages stay out of meshfed's module graph; `make
// test` runs it. The expressions come from the chart through
// charts/testdata/monitoring-expressions.golden.json, which the charts'
// own tests keep equal to the rendered chart.
package promql
