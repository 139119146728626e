// Package kube serves a cluster's Kubernetes API as normalize.Inputs, for
// `meshfed spoke --kubeconfig PATH` and for spokes running in a pod.
//
// A [Source] runs client-go informers on Services, EndpointSlices, Pods,
// Nodes, Namespaces and MCS ServiceExports (multicluster.x-k8s.io, v1beta1
// where the cluster serves it, else v1alpha1), waits for their caches to
// sync, hands the callback every object once, then batches of changes.
// The MCS CRDs may come after the source started: it asks discovery again
// every [Config.DiscoveryInterval], starts watching ServiceExports when
// the cluster serves them, and says what it serves ([Source.MCS]).
//
// The source only reads. What the spoke writes into its cluster (Events,
// ServiceExport conditions, imports) is package writeback's, which reads
// the source's caches through [Source.Tables].
//
// Invariants:
//   - The first call comes after every cache has synced: the first shard is
//     the whole cluster, so a restarted spoke never withdraws from the hub
//     what it has not listed yet.
//   - Caches hold only what normalization reads: each informer's transform
//     builds a new, minimal object from an allow-list of fields, labels and
//     annotations ([normalize.Keys]) before the object reaches the cache, so
//     the spoke never holds a second full copy of the cluster.
//   - Every change to a cache is reported after the cache holds it: the
//     callback may see objects newer than the changes it was given, never
//     older, and a later call reports what it saw early.
//   - The callback runs on one goroutine. A change after a quiet period is
//     delivered at once; later ones wait until [Config.BatchWindow] has
//     passed since the previous delivery began, and leave together.
//   - Updates that change nothing the caches keep (a Node's heartbeat, a
//     Pod's container statuses, an informer resync) are not reported.
//   - meshfed's own MCS EndpointSlices are never read as the cluster's
//     endpoints: the EndpointSlice informer lists only slices labelled
//     kubernetes.io/service-name, which they never carry.
//
// The source reads the cluster through an [API]: a ListerWatcher per kind
// and the MCS discovery. [NewAPI] builds it over package kubeclient's REST
// clients, whose schemes hold only the spoke's kinds, not client-go's
// clientset (which links and registers every built-in API group). Tests
// build an API over client-go's fake clientsets.
package kube
