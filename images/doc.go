// Package images tests the container images of meshfed-hub and
// meshfed-spoke that `make image` builds with hack/image (docs/images.md).
// It has no code of its own: its test builds the images into a temporary
// OCI image layout, reads the layout with the standard library alone (so
// that go-containerregistry stays out of the main module), checks each
// image's platforms, config and layer, and runs the binaries unpacked from
// the layers: a hub, and a spoke that joins it.
package images
