// Package imports is the spoke's end of the clusterset's imports: what
// the hub replicas say the cluster should hold (MCS ServiceImports, the
// endpoints of every exporting cluster, the conditions of the cluster's
// exports), and what the cluster does hold, reported back.
//
// A [Store] has one [Link] per hub replica (each a syncproto.ImportsLink
// on that replica's stream). Each link keeps the set its replica sent. The
// writer that puts the imports into the cluster reads one set at a time
// ([Store.Current]): the preferred replica's, the complete set of the link
// with the lowest hub address. Replicas compute the same set, so which one
// is preferred matters only while they disagree for a moment.
//
// The writer tells the store what the cluster holds ([Held]); every link
// reports it to its replica, in full at the start of each stream, then as
// changes.
//
// Invariants:
//   - Current never goes back to nothing: while no replica streams, the
//     writer keeps the last set it had (a hub outage removes nothing from
//     the cluster).
//   - A link's set is complete only after its replica's first full set on
//     the current stream; a link whose stream ended offers none.
//   - Nothing is reported to a replica before the writer has said what
//     the cluster holds ([Held.Synced]): an empty report from a spoke that
//     has not listed its cluster yet would withdraw its claims on
//     ClusterSetIPs.
package imports
