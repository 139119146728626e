// Package leader elects one spoke among those that run for one cluster, on
// a coordination.k8s.io/v1 Lease in the cluster's API server.
//
// The hub keeps one stream per cluster: a second spoke of the same cluster
// would take the cluster over, and the first would take it back. So when
// several spoke pods run for one cluster (a DaemonSet, or a Deployment of
// more than one replica), only the leader streams to the hub and writes
// into the cluster; the others keep their informers' caches warm and take
// over when the leader's lease lapses or is handed over.
//
// The algorithm is client-go's (tools/leaderelection): a candidate takes a
// Lease whose holder has not renewed it for the lease's duration, as timed
// by the candidate's own clock from when it last saw the Lease change; the
// leader renews every RetryPeriod and stops leading once it has failed to
// renew for RenewDeadline, which is shorter than LeaseDuration, so that it
// has stopped before anyone else may take over. It is reimplemented here
// because client-go's package links the whole clientset (its resource
// locks take typed clients, and its LeaseCandidate an informer factory),
// which meshfed-spoke does not link: the Lease is read and written through
// a REST client whose scheme holds coordination/v1 alone.
//
// What that saves, measured with client-go v0.37.2 on linux/amd64: linking
// tools/leaderelection and tools/leaderelection/resourcelock, even unused
// (a file of this package importing both for their side effects), makes
// meshfed-spoke 47.5 MB instead of 32.1 MB, and its resident memory once
// started 26.5 MiB instead of 17.1 MiB (the median of five runs of
// `meshfed-spoke --version` under `/usr/bin/time -f %M`: package init
// registers every API group in the clientset's scheme). Both binaries were
// built with `CGO_ENABLED=0 go build -trimpath -tags grpcnotrace
// ./cmd/meshfed-spoke`. A spoke runs in every cluster, several per cluster
// under election; 300 lines of algorithm, tested against a real API
// server, cost less than 9 MiB in each of them.
//
// Invariants:
//   - [Elector.Leading] turns false before the leader's work is told to
//     stop, and the lease is released (on shutdown) only after that work
//     has returned: a successor never overlaps with it.
//   - A leader that sees another holder in the Lease stops at once; one that
//     cannot renew stops RenewDeadline after its last successful renewal
//     began.
//   - [Elector.HoldWrites] lets a request that writes (anything but GET,
//     HEAD and OPTIONS) through only while the elector leads; it waits for
//     leadership meanwhile, so that what a standby would have written goes
//     out once it leads (a write made stale meanwhile fails on its
//     resourceVersion, and its writer retries from its caches).
package leader
