package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/pki"
)

func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed certs", stderr)
	dir := fs.String("dir", "certs", "directory to keep the CA and certificates in")
	td := fs.String("trust-domain", "cluster.local", "trust domain of the identities")
	clusters := fs.String("clusters", "east,west", "comma-separated cluster IDs to issue spoke certificates for")
	force := fs.Bool("force", false, "start over with a new CA and issue every certificate again (the previous CA's certificates stop verifying)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ids := strings.Split(*clusters, ",")
	res, err := pki.UpdateLocal(pki.LocalConfig{Dir: *dir, TrustDomain: *td, Clusters: ids, Force: *force}, time.Now())
	if errors.Is(err, pki.ErrLocalFiles) {
		return fmt.Errorf("%w (--force starts over with a new CA)", err)
	}
	if err != nil {
		return err
	}
	for _, name := range append([]string{"ca", "hub"}, ids...) {
		files := filepath.Join(*dir, name+".crt") + ", " + filepath.Join(*dir, name+".key")
		switch {
		case slices.Contains(res.Kept, name):
			fmt.Fprintf(stdout, "kept  %s\n", files)
		case name == "ca" && *force:
			fmt.Fprintf(stdout, "wrote %s: a new throwaway CA (--force: certificates of any previous CA no longer verify)\n", files)
		case name == "ca":
			fmt.Fprintf(stdout, "wrote %s: a new throwaway CA\n", files)
		default:
			fmt.Fprintf(stdout, "wrote %s\n", files)
		}
	}
	return nil
}
