// Package translate turns the clusterset's snapshots into the resources
// proxies are served: CDS, LDS and RDS shared by every proxy, EDS per
// view (network and locality), and Istio ambient's workload API per
// network.
//
// A [Translator] is fed one snapshot after another, with what changed
// between them and the views proxies use, and emits the changes to the
// sets the server holds ([SetUpdate]) as it builds them: resources to
// upsert, names to remove, views to drop. Both halves follow one incremental design: each
// remembers the names it produced for every service (and, for the
// workload API, every workload), regenerates only what a change touches,
// and removes the names a service no longer produces.
//
// Invariants:
//   - Deterministic and free of I/O: no locks, no clock, no network. The
//     same sequence of inputs gives the same updates, in the same order
//     (but for the upserts of a new view's address set, which is built
//     from a map of every address it sees).
//   - Incremental equals full: after any sequence, the sets built from
//     the updates hold exactly what a new translator builds from the last
//     snapshot alone.
//   - Every resource is encoded once per version and shared by every view
//     and response that carries it; views that see a service alike (the
//     same [resources.AppendAssignmentKey] key) share its load assignments.
//   - Updates come in the order proxies should apply them: clusters
//     before endpoints, listeners before routes.
package translate
