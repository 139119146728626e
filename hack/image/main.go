// Command image builds the OCI images of meshfed-hub and meshfed-spoke
// without a container daemon: it cross-compiles each binary statically for
// every platform, packs it into a single reproducible layer on an empty
// (scratch) base, and writes one multi-platform image index per binary into
// an OCI image layout directory (docs/images.md). `make image` runs it.
//
// The images carry no registry host: the layout names them
// meshfed/meshfed-hub:<version> and meshfed/meshfed-spoke:<version>, and
// whoever pushes them picks the registry.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// image is one binary of the main module and the image that ships it.
type image struct {
	name        string // the binary, the entrypoint /<name> and the repository meshfed/<name>
	pkg         string // the main package, relative to the main module
	description string
}

var allImages = []image{
	{"meshfed-hub", "./cmd/meshfed-hub", "meshfed hub: merges the clusters' service shards into one clusterset and serves it over xDS"},
	{"meshfed-spoke", "./cmd/meshfed-spoke", "meshfed spoke: streams its cluster's exported services to the hub"},
}

const (
	// repositoryPrefix has no registry host on purpose: the charts prefix
	// their own (image.repository), and a push names the destination.
	repositoryPrefix = "meshfed/"
	// nonroot is the distroless "nonroot" user the charts run as
	// (runAsUser/runAsGroup 65532).
	nonroot = "65532"
	license = "Apache-2.0" // SPDX id of LICENSE
)

// config is what one run builds.
type config struct {
	root      string // the main module
	out       string // the OCI layout directory, replaced as a whole
	goBin     string
	ldflags   string
	tags      string // go build -tags
	version   string // the images' tag and org.opencontainers.image.version
	revision  string
	images    []image
	platforms []v1.Platform
	created   time.Time // every timestamp in the images
}

// A tag as the OCI distribution spec allows it.
var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseFlags(args, os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "meshfed-image-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	byName := make(map[string][]mutate.IndexAddendum, len(cfg.images))
	for _, p := range cfg.platforms {
		dir := filepath.Join(work, p.OS+"_"+p.Architecture)
		start := time.Now()
		if err := cfg.build(ctx, p, dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "image: built %s for %s/%s in %s\n", cfg.names(), p.OS, p.Architecture, time.Since(start).Round(100*time.Millisecond))
		for _, im := range cfg.images {
			img, err := cfg.image(im, p, filepath.Join(dir, im.name))
			if err != nil {
				return fmt.Errorf("%s %s/%s: %w", im.name, p.OS, p.Architecture, err)
			}
			platform := p
			byName[im.name] = append(byName[im.name], mutate.IndexAddendum{Add: plainImage{img}, Descriptor: v1.Descriptor{Platform: &platform}})
		}
	}

	var top v1.ImageIndex = empty.Index
	for _, im := range cfg.images {
		idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, byName[im.name]...), types.OCIImageIndex)
		idx = mutate.Annotations(idx, cfg.annotations(im)).(v1.ImageIndex)
		top = mutate.AppendManifests(top, mutate.IndexAddendum{Add: idx, Descriptor: v1.Descriptor{
			Annotations: map[string]string{"org.opencontainers.image.ref.name": cfg.ref(im)},
		}})
	}
	if err := writeLayout(cfg.out, top); err != nil {
		return err
	}
	return report(stdout, cfg, top)
}

func parseFlags(args []string, sourceDateEpoch string) (config, error) {
	cfg := config{goBin: "go"}
	var names, platforms string
	epoch := int64(0)
	if sourceDateEpoch != "" {
		var err error
		if epoch, err = strconv.ParseInt(sourceDateEpoch, 10, 64); err != nil {
			return cfg, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", sourceDateEpoch, err)
		}
	}
	flags := flag.NewFlagSet("image", flag.ContinueOnError)
	flags.StringVar(&cfg.root, "root", "../..", "the main module's directory")
	flags.StringVar(&cfg.out, "out", "../../bin/images/oci", "the OCI image layout to write (replaced)")
	flags.StringVar(&cfg.goBin, "go", cfg.goBin, "the go command")
	flags.StringVar(&cfg.ldflags, "ldflags", "", "go build -ldflags (the Makefile's LDFLAGS, which stamp the version)")
	flags.StringVar(&cfg.tags, "tags", "grpcnotrace", "go build -tags (the Makefile's BUILDTAGS: gRPC without golang.org/x/net/trace, for smaller binaries)")
	flags.StringVar(&cfg.version, "version", "dev", "the images' tag and version label; the same as the version -ldflags stamps")
	flags.StringVar(&cfg.revision, "revision", "", "the revision label (the commit)")
	flags.StringVar(&names, "images", "meshfed-hub,meshfed-spoke", "comma-separated images to build, each into its own index")
	flags.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch pairs, one image per pair in each index")
	flags.Int64Var(&epoch, "source-date-epoch", epoch, "Unix time of every timestamp in the images (default: $SOURCE_DATE_EPOCH, else 0)")
	if err := flags.Parse(args); err != nil {
		return cfg, err
	}
	if flags.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", flags.Args())
	}
	if !tagRE.MatchString(cfg.version) {
		return cfg, fmt.Errorf("--version %q is not a valid image tag", cfg.version)
	}
	for name := range strings.SplitSeq(names, ",") {
		i := slices.IndexFunc(allImages, func(im image) bool { return im.name == strings.TrimSpace(name) })
		switch {
		case i < 0:
			return cfg, fmt.Errorf("--images: no image %q (meshfed-hub, meshfed-spoke)", name)
		case slices.Contains(cfg.images, allImages[i]):
			return cfg, fmt.Errorf("--images: %q twice", name)
		}
		cfg.images = append(cfg.images, allImages[i])
	}
	for p := range strings.SplitSeq(platforms, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName != "linux" || arch == "" || strings.Contains(arch, "/") {
			return cfg, fmt.Errorf("--platforms: %q is not linux/<arch>", p)
		}
		cfg.platforms = append(cfg.platforms, v1.Platform{OS: osName, Architecture: arch})
	}
	cfg.created = time.Unix(epoch, 0).UTC()
	var err error
	if cfg.root, err = filepath.Abs(cfg.root); err != nil {
		return cfg, err
	}
	cfg.out, err = filepath.Abs(cfg.out)
	return cfg, err
}

// build compiles every image's binary for p into dir, in one go build so
// that the packages the binaries share are scheduled once.
func (c config) build(ctx context.Context, p v1.Platform, dir string) error {
	args := []string{"build", "-trimpath", "-tags", c.tags, "-ldflags", c.ldflags, "-o", dir + string(filepath.Separator)}
	for _, im := range c.images {
		args = append(args, im.pkg)
	}
	cmd := exec.CommandContext(ctx, c.goBin, args...)
	cmd.Dir = c.root
	// Static: the base is empty, there is no libc to link against.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w", p.OS, p.Architecture, err)
	}
	return nil
}

// image is im for p: the empty base, the layer with binary, and the
// config the charts rely on (entrypoint, non-root user).
func (c config) image(im image, p v1.Platform, binary string) (v1.Image, error) {
	layerFile := binary + ".tar.gz"
	if err := writeLayer(layerFile, im.name, binary, c.created); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromFile(layerFile, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Created:      v1.Time{Time: c.created},
		Config: v1.Config{
			Entrypoint: []string{"/" + im.name},
			User:       nonroot + ":" + nonroot,
			WorkingDir: "/",
			Labels:     c.annotations(im),
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: c.created},
			CreatedBy: "hack/image: /" + im.name + ", /etc/passwd, /etc/group, /tmp",
		},
	})
}

// plainImage is an image whose descriptor in an index has no artifactType:
// go-containerregistry would set it to the config's media type, which
// marks an artifact rather than a runnable image to some registries.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

// annotations are the image's labels, and the annotations of its index.
// No org.opencontainers.image.source: it would name a hosting service.
func (c config) annotations(im image) map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       im.name,
		"org.opencontainers.image.description": im.description,
		"org.opencontainers.image.version":     c.version,
		"org.opencontainers.image.licenses":    license,
	}
	if c.revision != "" {
		a["org.opencontainers.image.revision"] = c.revision
	}
	return a
}

func (c config) ref(im image) string { return repositoryPrefix + im.name + ":" + c.version }

// writeLayout writes the layout next to dir and then puts it in dir's
// place, so that blobs of earlier builds do not pile up and an interrupted
// build leaves the previous layout whole.
func writeLayout(dir string, idx v1.ImageIndex) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if _, err := layout.Write(tmp, idx); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	// Readable by all, as a directory that another user pushes from must
	// be: layout.Write creates blobs 0600 and index.json 0777 (umasked).
	err := filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chmod(path, 0o644)
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func report(w io.Writer, c config, top v1.ImageIndex) error {
	m, err := top.IndexManifest()
	if err != nil {
		return err
	}
	for i, d := range m.Manifests {
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return err
		}
		var sizes []string
		for _, md := range im.Manifests {
			img, err := idx.Image(md.Digest)
			if err != nil {
				return err
			}
			// The manifest records each layer's compressed size.
			man, err := img.Manifest()
			if err != nil {
				return err
			}
			var n int64
			for _, l := range man.Layers {
				n += l.Size
			}
			sizes = append(sizes, fmt.Sprintf("%s/%s %.1f MiB", md.Platform.OS, md.Platform.Architecture, float64(n)/(1<<20)))
		}
		fmt.Fprintf(w, "image: %s %s (compressed: %s)\n", c.ref(c.images[i]), d.Digest, strings.Join(sizes, ", "))
	}
	fmt.Fprintf(w, "image: wrote the OCI layout %s\n", c.out)
	return nil
}

func (c config) names() string {
	n := make([]string, len(c.images))
	for i, im := range c.images {
		n[i] = im.name
	}
	return strings.Join(n, " and ")
}
