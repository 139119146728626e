// Package writeback writes into the spoke's own cluster what the spoke and
// the clusterset decided: the Warning Events of objects the shard builder
// rejects, the MCS conditions of the cluster's ServiceExports (Valid from
// what the builder does with them; Conflict and Ready from the
// clusterset's import of the service), and the clusterset's imports
// (package importwriter: ServiceImports and the MCS EndpointSlices of each
// exporting cluster).
//
// The spoke is built as reflectors → tables → reconcilers: the kube
// source's informers fill its caches and only read; the write-back reads
// those caches ([kube.Tables]) and is told their changes by spoke.New's
// wiring ([WriteBack.Changed]), and the shard builder reports its
// rejections to it ([WriteBack.Rejected], [WriteBack.Accepted]).
//
// Invariants:
//   - Nothing is written before the source's caches have synced.
//   - ServiceExport status is written only when a condition the spoke owns
//     (Valid; with imports, Conflict and Ready) differs from what the
//     object has, from one worker, retried with backoff; other
//     controllers' conditions are kept. Conflict and Ready are left as
//     they are until a hub has sent a set: a restarted spoke does not flap
//     them.
//   - A rejected object gets one Warning Event (reason MeshfedRejected)
//     per rejection until it changes, from one worker, at most 5 a second
//     after a burst of 50; the Valid condition of a service with a
//     rejected Service or EndpointSlice is false with that reason and
//     says why.
//   - The writers of a kind start when the cluster serves it (the MCS
//     CRDs may come later): installing them needs no restart.
package writeback
