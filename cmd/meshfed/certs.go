package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/pki"
)

func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed certs", stderr)
	dir := fs.String("dir", "certs", "directory to write the CA and certificates to")
	td := fs.String("trust-domain", "cluster.local", "trust domain of the identities")
	clusters := fs.String("clusters", "east,west", "comma-separated cluster IDs to issue spoke certificates for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ids := strings.Split(*clusters, ",")
	if err := pki.WriteLocal(*dir, *td, ids, time.Now()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote a throwaway CA, hub and cluster certificates (%s) to %s\n", strings.Join(ids, ", "), *dir)
	return nil
}
