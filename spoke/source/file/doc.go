// Package file serves a directory of Kubernetes manifests as a cluster, for
// `meshfed spoke --manifests DIR`: demos, tests, and clusters whose state
// is rendered by another tool.
//
// It reads *.yaml, *.yml and *.json files recursively (hidden ones
// excepted) and keeps the objects normalization needs: Services,
// EndpointSlices, Pods, Nodes, Namespaces and MCS ServiceExports. It
// watches the directory and reloads after each burst of changes.
//
// Invariants:
//   - A file is applied whole or not at all: a file that fails to parse
//     keeps its last good objects.
//   - An object in two files is taken from the last file in lexical order
//     of the relative paths.
//   - Services and ServiceExports without a creationTimestamp get the time
//     the source first saw them, which holds until they are deleted.
//   - Inputs passed to the callback are immutable.
package file
