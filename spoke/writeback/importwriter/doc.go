// Package importwriter writes the clusterset's MCS imports into the
// spoke's own cluster: one ServiceImport per MCS import of the store's
// current set (Import.mcs; a spoke that serves its mesh is sent every
// federated service) in every namespace the cluster has, and the
// EndpointSlices of each exporting cluster, and reports back to the store
// what the cluster holds. The hub never holds cluster credentials: this is where
// the clusterset's decisions become objects.
//
// Ownership: a ServiceImport meshfed writes is labelled
// app.kubernetes.io/managed-by=meshfed-spoke, an EndpointSlice
// endpointslice.kubernetes.io/managed-by=spoke.meshfed.io. The writer's
// informers select on these labels, so it caches, compares, updates and
// deletes only meshfed's objects; an object of the same name without the
// label is another's, which it leaves alone and reports (a log line when
// the conflict starts and ends, and meshfed_spoke_import_conflicts).
//
// The ServiceImport's labels and annotations are the winning export's
// exported ones, as KEP-1645 asks, plus two of meshfed's: the ownership
// label, in the app.kubernetes.io/ prefix Kubernetes keeps for tooling
// metadata (the role endpointslice.kubernetes.io/managed-by plays on
// slices; it wins over an exported label of its key), and the annotation
// meshfed.io/imported-keys, which lists the exported keys meshfed wrote so
// that it removes those the export drops and keeps what others (an
// admission webhook, a cost-allocation controller) add, instead of
// fighting them in a write loop. Nothing that reads ServiceImports selects
// them by label: the exported labels are all there, unchanged.
//
// Slices are named "<service>-<cluster>-<family>-<hash>", the hash over
// the service, the exporting cluster, the address family, the port set and
// the slice's index: a restarted writer computes the names it wrote before
// and finds its objects, instead of creating a second set (as
// generateName would after a lost create response) or relabelling.
//
// Invariants:
//   - Nothing is written or deleted before the store has a complete set
//     and the writer's caches have synced: a spoke that restarts while its
//     hubs are away keeps what the cluster holds.
//   - An import is synced by one worker at a time (a work queue keyed by
//     import); a sync writes only what differs from the cache, so a
//     restarted writer with the same set sends no request.
//   - What is reported as held comes from the informers (what the API
//     server has), never from what the writer meant to write;
//     [imports.Held.Synced] is called once they have listed the cluster.
//   - meshfed's slices never carry kubernetes.io/service-name (kube-proxy
//     would send the local Service's traffic to them) and name their
//     ServiceImport as owner, so that Kubernetes' garbage collector removes
//     them with it; the writer does not rely on that and deletes the slices
//     it no longer wants itself.
package importwriter
