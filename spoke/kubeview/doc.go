// Package kubeview serves a read-only Kubernetes API over objects held in
// memory: what a client-go informer asks of an API server (list, watch,
// and the streaming list that starts a watch with the current objects),
// for a fixed set of resources, and nothing else.
//
// The spoke serves one [View] per other cluster of the clusterset to its
// own istiod, as the API of a remote cluster that holds only what that
// cluster exports. istiod then runs Istio's own multicluster code over it,
// unchanged, with no credential to any cluster.
//
// Invariants:
//   - A View is written only by [View.Replace], which gives a resource its
//     whole set of objects; objects whose content did not change keep
//     their resourceVersion and make no event.
//   - resourceVersions are one counter per View, increasing with every
//     change of any resource, as etcd's are per API server.
//   - A watch resumes from any resourceVersion whose later events the
//     View still holds (the last HistoryLimit of its resource); older,
//     it ends with 410 Expired and the client lists again, as it does
//     against an API server.
//   - Every request is answered in JSON; nothing a client sends changes
//     the View.
package kubeview
