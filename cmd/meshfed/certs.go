package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/pki"
)

type certsOptions struct {
	dir, trustDomain, clusters string
	force                      bool
}

func certsFlags(fs *flag.FlagSet) *certsOptions {
	o := &certsOptions{}
	fs.StringVar(&o.dir, "dir", "certs", "directory to keep the CA and certificates in")
	fs.StringVar(&o.trustDomain, "trust-domain", "cluster.local", "trust domain of the identities")
	fs.StringVar(&o.clusters, "clusters", "east,west", "comma-separated cluster IDs to issue spoke certificates for")
	fs.BoolVar(&o.force, "force", false, "start over with a new CA and issue every certificate again (the previous CA's certificates stop verifying)")
	return o
}

var certsHelp = cli.Help{
	Summary: "Mint a throwaway CA, the hub's certificate and one per cluster, for trying meshfed out.\n" +
		"It keeps what the directory already has and adds what is missing.",
	Examples: []string{
		"meshfed certs --dir certs --clusters east,west",
		"# Start over with a new CA\nmeshfed certs --dir certs --clusters east,west,north --force",
	},
}

func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed certs", stderr)
	o := certsFlags(fs)
	certsHelp.Install(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	ids := strings.Split(o.clusters, ",")
	res, err := pki.UpdateLocal(pki.LocalConfig{Dir: o.dir, TrustDomain: o.trustDomain, Clusters: ids, Force: o.force}, time.Now())
	if errors.Is(err, pki.ErrLocalFiles) {
		return fmt.Errorf("%w (--force starts over with a new CA)", err)
	}
	if err != nil {
		return err
	}
	for _, name := range append([]string{"ca", "hub"}, ids...) {
		files := filepath.Join(o.dir, name+".crt") + ", " + filepath.Join(o.dir, name+".key")
		switch {
		case slices.Contains(res.Kept, name):
			fmt.Fprintf(stdout, "kept  %s\n", files)
		case name == "ca" && o.force:
			fmt.Fprintf(stdout, "wrote %s: a new throwaway CA (--force: certificates of any previous CA no longer verify)\n", files)
		case name == "ca":
			fmt.Fprintf(stdout, "wrote %s: a new throwaway CA\n", files)
		default:
			fmt.Fprintf(stdout, "wrote %s\n", files)
		}
	}
	return nil
}
