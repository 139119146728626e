// Package clustersetip assigns MCS ClusterSetIPs: one virtual IP per IP
// family of each ClusterSetIP import, from the clusterset's pools
// (--clusterset-cidr).
//
// The hub keeps no storage, and every hub replica must give an import the
// same IPs for its whole life. So an assignment is a pure function of what
// every replica sees alike: the imports, and the IPs the member clusters'
// ServiceImports already hold (their claims, reported by the spokes).
//
// Invariants:
//   - [Assign] depends only on its inputs' values, not on their order.
//   - No two imports get the same IP.
//   - An import keeps an IP its clusters hold while the IP is in the pool
//     and no older import holds it: imports coming and going never move
//     another import's IP.
//   - An import whose clusters hold no IP yet gets one derived from a hash
//     of its key and family, probing upwards past taken IPs, so that
//     replicas starting from nothing agree without talking.
//   - Two imports holding the same IP (only after a split of the
//     clusterset, or a pool changed by hand) are resolved by age: the older
//     import keeps it, the other gets a new one, and the collision is
//     reported.
//   - A pool that is full is an error on each import that finds no IP, not
//     a failure of the others.
package clustersetip
