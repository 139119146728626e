// Package kube serves a cluster's Kubernetes API as normalize.Inputs, for
// `meshfed spoke --kubeconfig PATH` and for spokes running in a pod.
//
// A [Source] runs client-go informers on Services, EndpointSlices, Pods,
// Nodes, Namespaces and MCS ServiceExports (multicluster.x-k8s.io, v1beta1
// where the cluster serves it, else v1alpha1), waits for their caches to
// sync, hands the callback every object once, then batches of changes.
// After each batch it sets the MCS Valid condition of the ServiceExports
// the batch touched. With an imports store ([Config.Imports]) it also
// writes the clusterset's imports into the cluster (package importwriter)
// and the Conflict and Ready conditions of the cluster's exports. The MCS
// CRDs may come after the source started: it asks discovery again every
// [Config.DiscoveryInterval] and starts what the cluster serves then.
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
//   - ServiceExport status is written only when a condition the source
//     owns (Valid; with imports, Conflict and Ready) differs from what the
//     object has, from one worker, retried with backoff; other
//     controllers' conditions are kept. Conflict and Ready are left as
//     they are until a hub has sent a set: a restarted spoke does not flap
//     them.
//   - meshfed's own MCS EndpointSlices are never read as the cluster's
//     endpoints: the EndpointSlice informer lists only slices labelled
//     kubernetes.io/service-name, which they never carry.
//   - The source is the shard builder's reporter of rejected objects
//     ([Source.Rejected], [Source.Accepted]): it records one Warning Event
//     (reason MeshfedRejected) on a rejected object per rejection until it
//     changes, from one worker, at most 5 a second after a burst of 50;
//     and the Valid condition of a service with a rejected Service or
//     EndpointSlice is false with that reason and says why.
//
// The source reads the cluster through an [API]: a ListerWatcher per kind,
// the MCS calls, and the creation of Events. [NewAPI] builds it over REST clients whose
// scheme holds only these kinds, not client-go's clientset (which links
// and registers every built-in API group); a real API server needs nothing
// more than [NewForConfig] with its rest.Config. Tests build an API over
// client-go's fake clientsets.
package kube
