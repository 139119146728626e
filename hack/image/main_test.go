package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLayerIsReproducible: the same binary gives the same layer bytes,
// wherever it lies and whenever it was built, with fixed owners and times.
func TestLayerIsReproducible(t *testing.T) {
	dir := t.TempDir()
	created := time.Unix(1700000000, 0)
	var layers [2][]byte
	for i := range layers {
		bin := filepath.Join(dir, string(rune('a'+i)), "meshfed-hub")
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(bin, time.Now(), time.Now().Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
		out := bin + ".tar.gz"
		if err := writeLayer(out, "meshfed-hub", bin, created); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		layers[i] = b
	}
	if !bytes.Equal(layers[0], layers[1]) {
		t.Fatal("the same binary gave two different layers")
	}

	zr, err := gzip.NewReader(bytes.NewReader(layers[0]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	want := []struct {
		name string
		mode int64
	}{{"etc/", 0o755}, {"etc/group", 0o644}, {"etc/passwd", 0o644}, {"meshfed-hub", 0o755}, {"tmp/", 0o1777}}
	for i := 0; ; i++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if i != len(want) {
				t.Fatalf("%d entries, want %d", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(want) || h.Name != want[i].name || h.Mode != want[i].mode {
			t.Fatalf("entry %d: %s %o", i, h.Name, h.Mode)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(created) {
			t.Errorf("%s: owner %d:%d (%q:%q), mtime %s", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
	}
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-version", "v1.2.3-4-gabcdef-dirty", "-platforms", "linux/amd64, linux/arm64"}, "1700000000")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.platforms) != 2 || cfg.platforms[1].Architecture != "arm64" || cfg.created.Unix() != 1700000000 || len(cfg.images) != 2 {
		t.Errorf("platforms %v, created %s, images %v", cfg.platforms, cfg.created, cfg.images)
	}
	if cfg, err := parseFlags([]string{"-images", "meshfed-spoke"}, ""); err != nil || len(cfg.images) != 1 || cfg.images[0].name != "meshfed-spoke" {
		t.Errorf("-images meshfed-spoke: %v, %v", cfg.images, err)
	}
	for _, args := range [][]string{
		{"-version", "v1+meta"},
		{"-version", ""},
		{"-platforms", "darwin/arm64"},
		{"-platforms", "linux"},
		{"-images", "meshfed"},
		{"-images", "meshfed-hub,meshfed-hub"},
		{"extra"},
	} {
		if _, err := parseFlags(args, ""); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if _, err := parseFlags(nil, "yesterday"); err == nil {
		t.Error("SOURCE_DATE_EPOCH=yesterday: no error")
	}
}
