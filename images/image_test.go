package images

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"maps"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The test's images are stamped with a version, revision and time of its
// own, so that it sees they reach the binaries, labels and layers.
const (
	testVersion  = "v0.0.0-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testEpoch    = 1700000000
)

// platforms are those of `make image`: each index must have both.
var platforms = []string{"linux/amd64", "linux/arm64"}

var hostPlatform = runtime.GOOS + "/" + runtime.GOARCH

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImages builds both images as `make image` does (hack/image, with the
// version stamped through -ldflags) into a temporary layout, checks what
// the charts rely on in each platform's image, and runs the binaries of
// this machine's platform unpacked from their layers: the hub serves
// /healthz and a spoke of cluster east joins it.
func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the hub and the spoke for two platforms")
	}
	oci := buildImages(t)

	top := oci.index(t)
	if top.SchemaVersion != 2 || top.MediaType != mediaTypeIndex || len(top.Manifests) != 2 {
		t.Fatalf("index.json: schema %d, media type %q, %d manifests; want 2, an OCI index, the hub and the spoke",
			top.SchemaVersion, top.MediaType, len(top.Manifests))
	}
	roots := map[string]string{}
	for _, name := range []string{"meshfed-hub", "meshfed-spoke"} {
		roots[name] = filepath.Join(t.TempDir(), name)
		t.Run(name, func(t *testing.T) {
			ref := "meshfed/" + name + ":" + testVersion
			i := slices.IndexFunc(top.Manifests, func(d descriptor) bool { return d.Annotations[annotationRefName] == ref })
			if i < 0 {
				t.Fatalf("index.json has no %s %q", annotationRefName, ref)
			}
			checkImage(t, oci, top.Manifests[i], name, roots[name])
		})
	}
	if t.Failed() {
		return
	}
	t.Run("run", func(t *testing.T) {
		if !slices.Contains(platforms, hostPlatform) {
			t.Skipf("the images cannot run on %s", hostPlatform)
		}
		runBinaries(t, roots["meshfed-hub"], roots["meshfed-spoke"])
	})
}

// buildImages runs hack/image into a temporary directory and returns the
// layout it wrote.
func buildImages(t *testing.T) layout {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "oci")
	// With a cold build cache, this compiles both binaries for both
	// platforms (about two minutes on two cores); with a warm one, it only
	// links them.
	timeout := 10 * time.Minute
	if d, ok := t.Deadline(); ok {
		timeout = min(timeout, time.Until(d)-30*time.Second)
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	const pkg = "github.com/meshfed/meshfed/internal/version"
	cmd := exec.CommandContext(ctx, "go", "run", ".",
		"-root", root, "-out", out,
		"-version", testVersion, "-revision", testRevision,
		"-ldflags", "-X "+pkg+".version="+testVersion+" -X "+pkg+".revision="+testRevision,
		"-platforms", strings.Join(platforms, ","),
		"-source-date-epoch", strconv.Itoa(testEpoch))
	cmd.Dir = filepath.Join(root, "hack", "image")
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	// On timeout, kill go run with the tool and the go builds it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/image: %v\n%s", err, output)
	}
	t.Logf("hack/image in %s:\n%s", time.Since(start).Round(time.Second), output)
	if !bytes.Contains(output, []byte("wrote the OCI layout "+out)) {
		t.Errorf("hack/image does not say where it wrote the layout:\n%s", output)
	}
	return layout(out)
}

// checkImage checks the index d of image name, and its image for each
// platform, and unpacks the layer of this machine's platform into root.
func checkImage(t *testing.T, oci layout, d descriptor, name, root string) {
	t.Helper()
	var idx index
	oci.json(t, d, mediaTypeIndex, &idx)
	var got []string
	for _, m := range idx.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s has no platform", m.Digest)
		}
		got = append(got, m.Platform.String())
	}
	slices.Sort(got)
	if !slices.Equal(got, platforms) {
		t.Fatalf("platforms %q, want %q", got, platforms)
	}

	wantLabels := map[string]string{
		"org.opencontainers.image.title":    name,
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	checkLabels := func(what string, got map[string]string) {
		t.Helper()
		got = maps.Clone(got)
		// Free text; and no org.opencontainers.image.source, which would
		// name a hosting service.
		if got["org.opencontainers.image.description"] == "" {
			t.Errorf("%s: no org.opencontainers.image.description", what)
		}
		delete(got, "org.opencontainers.image.description")
		if diff := cmp.Diff(wantLabels, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}
	checkLabels("index annotations", idx.Annotations)

	for _, m := range idx.Manifests {
		p := *m.Platform
		if p.OS != "linux" || p.Variant != "" || m.ArtifactType != "" {
			t.Errorf("%s: platform %+v, artifact type %q", p, p, m.ArtifactType)
		}
		var man manifest
		oci.json(t, m, mediaTypeManifest, &man)
		var cfg imageConfig
		oci.json(t, man.Config, mediaTypeConfig, &cfg)
		if cfg.OS != p.OS || cfg.Architecture != p.Architecture {
			t.Errorf("%s: config for %s/%s", p, cfg.OS, cfg.Architecture)
		}
		if !cfg.Created.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("%s: created %s, want the source date epoch", p, cfg.Created)
		}
		c := cfg.Config
		if !slices.Equal(c.Entrypoint, []string{"/" + name}) || len(c.Cmd) != 0 || c.User != "65532:65532" || c.WorkingDir != "/" || len(c.Env) != 0 {
			t.Errorf("%s: entrypoint %q, cmd %q, user %q, working dir %q, env %q; want [/%s], none, 65532:65532, /, none",
				p, c.Entrypoint, c.Cmd, c.User, c.WorkingDir, c.Env, name)
		}
		checkLabels(p.String()+" labels", c.Labels)

		if len(man.Layers) != 1 || man.Layers[0].MediaType != mediaTypeLayer {
			t.Fatalf("%s: layers %+v, want one gzipped tar", p, man.Layers)
		}
		files, diffID := readLayer(t, oci.blob(t, man.Layers[0]))
		if cfg.RootFS.Type != "layers" || !slices.Equal(cfg.RootFS.DiffIDs, []string{diffID}) {
			t.Errorf("%s: rootfs %+v, want the layer's diff ID %s", p, cfg.RootFS, diffID)
		}
		checkLayer(t, p, files, name)
		if p.String() == hostPlatform {
			unpack(t, files, root)
		}
	}
}

// checkLayer checks the layer's entries: sorted, owned by root, dated the
// source date epoch; the nonroot user; a static binary of the platform,
// built as the Makefile builds it.
func checkLayer(t *testing.T, p platform, files []file, name string) {
	t.Helper()
	type entry struct {
		Name string
		Mode int64
	}
	var got []entry
	bodies := map[string][]byte{}
	for _, f := range files {
		h := f.header
		got = append(got, entry{h.Name, h.Mode})
		bodies[h.Name] = f.body
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("%s: %s: owner %d:%d (%q:%q), mtime %s", p, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
	}
	want := []entry{{"etc/", 0o755}, {"etc/group", 0o644}, {"etc/passwd", 0o644}, {name, 0o755}, {"tmp/", 0o1777}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: layer entries (-want +got):\n%s", p, diff)
	}
	if !bytes.Contains(bodies["etc/passwd"], []byte("\nnonroot:x:65532:65532:")) || !bytes.Contains(bodies["etc/group"], []byte("\nnonroot:x:65532:")) {
		t.Errorf("%s: no nonroot 65532 in /etc/passwd and /etc/group:\n%s%s", p, bodies["etc/passwd"], bodies["etc/group"])
	}

	bin := bodies[name]
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: /%s: %v", p, name, err)
	}
	if f.Machine != elfMachine[p.Architecture] {
		t.Errorf("%s: /%s is for %s", p, name, f.Machine)
	}
	if slices.ContainsFunc(f.Progs, func(prog *elf.Prog) bool { return prog.Type == elf.PT_INTERP }) {
		t.Errorf("%s: /%s is dynamically linked", p, name)
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: /%s: %v", p, name, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" || settings["-tags"] != "grpcnotrace" || settings["GOARCH"] != p.Architecture {
		t.Errorf("%s: /%s built with %v", p, name, bi.Settings)
	}
	// -trimpath keeps -ldflags out of the build info, but the strings -X
	// stamped are in the binary (and the run subtest has this machine's
	// binaries print them).
	if !bytes.Contains(bin, []byte(testVersion)) || !bytes.Contains(bin, []byte(testRevision)) {
		t.Errorf("%s: /%s has no stamped version %s and revision %s", p, name, testVersion, testRevision)
	}
}
