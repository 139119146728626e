package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// What a static Go binary on an empty base needs besides itself: the
// passwd and group entries of the user it runs as (os/user, and whatever
// shows the process's user, resolve 65532 to a name through them), and a
// /tmp with the usual mode 1777 where os.TempDir points. Neither binary
// writes files; under the charts' readOnlyRootFilesystem, one that must
// would need an emptyDir mounted there.
var (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:" + nonroot + ":" + nonroot + ":nonroot:/nonexistent:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:" + nonroot + ":\n"
)

// entry is one file of the layer; body is nil for a directory, and
// from, when set, names the file whose content it is.
type entry struct {
	name string
	mode int64
	body []byte
	from string
}

// writeLayer writes the layer of image name, with the binary at /name, as
// a gzipped tar to path. The layer depends on nothing but its inputs:
// entries sorted, every timestamp created, owner root, no user or group
// names, so that the same binary always gives the same diff ID (and, with
// the same Go toolchain, the same digest).
func writeLayer(path, name, binary string, created time.Time) (err error) {
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "tmp/", mode: 0o1777},
		{name: name, mode: 0o755, from: binary},
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	// gzip's header holds no name and no time: the zero Header.
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := writeEntry(tw, e, created); err != nil {
			return fmt.Errorf("layer %s: %s: %w", path, e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func writeEntry(tw *tar.Writer, e entry, created time.Time) error {
	h := &tar.Header{
		Name:    e.name,
		Mode:    e.mode,
		ModTime: created,
		Format:  tar.FormatUSTAR,
	}
	if e.body == nil && e.from == "" {
		h.Typeflag = tar.TypeDir
		return tw.WriteHeader(h)
	}
	h.Typeflag = tar.TypeReg
	if e.from == "" {
		h.Size = int64(len(e.body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(e.body)
		return err
	}
	src, err := os.Open(e.from)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	h.Size = fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}
