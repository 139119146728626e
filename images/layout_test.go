package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The parts of the OCI image spec the test reads: the layout's index.json,
// image indexes, image manifests and image configs.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	annotationRefName = "org.opencontainers.image.ref.name"
)

type descriptor struct {
	MediaType    string            `json:"mediaType"`
	Digest       string            `json:"digest"`
	Size         int64             `json:"size"`
	Platform     *platform         `json:"platform,omitempty"`
	ArtifactType string            `json:"artifactType,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

func (p platform) String() string { return p.OS + "/" + p.Architecture }

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Created      time.Time `json:"created"`
	OS           string    `json:"os"`
	Architecture string    `json:"architecture"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// layout is an OCI image layout directory.
type layout string

// blob reads the blob d points to and checks its size and digest.
func (l layout) blob(t *testing.T, d descriptor) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexDigest) != sha256.Size*2 {
		t.Fatalf("digest %q is not sha256", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(string(l), "blobs", "sha256", hexDigest))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("blob %s: %d bytes, the descriptor says %d", d.Digest, len(b), d.Size)
	}
	if got := digest(b); got != d.Digest {
		t.Fatalf("blob %s has digest %s", d.Digest, got)
	}
	return b
}

// json decodes the blob d points to into v, after checking its media type.
func (l layout) json(t *testing.T, d descriptor, mediaType string, v any) {
	t.Helper()
	if d.MediaType != mediaType {
		t.Fatalf("%s: media type %q, want %q", d.Digest, d.MediaType, mediaType)
	}
	if err := json.Unmarshal(l.blob(t, d), v); err != nil {
		t.Fatalf("%s: %v", d.Digest, err)
	}
}

func (l layout) index(t *testing.T) index {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(string(l), "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	return idx
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// file is an entry of a layer.
type file struct {
	header *tar.Header
	body   []byte
}

// readLayer returns the entries of a gzipped tar layer in their order, and
// the digest of the uncompressed tar (the layer's diff ID).
func readLayer(t *testing.T, gz []byte) (files []file, diffID string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	tr := tar.NewReader(io.TeeReader(zr, &raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{header: h, body: body})
	}
	// The tar's end-of-archive padding is part of the diff ID.
	if _, err := io.Copy(&raw, zr); err != nil {
		t.Fatal(err)
	}
	return files, digest(raw.Bytes())
}

// unpack writes the layer's directories and regular files under root, as
// a container runtime would lay out the image's root file system.
func unpack(t *testing.T, files []file, root string) {
	t.Helper()
	for _, f := range files {
		name := strings.TrimSuffix(f.header.Name, "/")
		if !filepath.IsLocal(name) {
			t.Fatalf("layer entry %q leaves the root", f.header.Name)
		}
		path := filepath.Join(root, name)
		mode := fs.FileMode(f.header.Mode).Perm()
		if f.header.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		var err error
		switch f.header.Typeflag {
		case tar.TypeDir:
			if err = os.MkdirAll(path, 0o755); err == nil {
				err = os.Chmod(path, mode)
			}
		case tar.TypeReg:
			err = os.WriteFile(path, f.body, mode)
		default:
			err = fmt.Errorf("type %q", f.header.Typeflag)
		}
		if err != nil {
			t.Fatalf("unpack %s: %v", f.header.Name, err)
		}
	}
}
