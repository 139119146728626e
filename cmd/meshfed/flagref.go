package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// hostDefaults describe the defaults that differ from host to host.
var hostDefaults = map[string]string{"id": "the host name"}

// writeFlagReference writes docs/flags.md: every command's flags, grouped
// as its --help groups them, from the flags themselves.
func writeFlagReference(w io.Writer) {
	fmt.Fprint(w, `# Flags

Every flag of every meshfed command, generated from the flags themselves
(`+"`make gen`"+`; a test fails when this page and the flags disagree).
`+"`meshfed-hub`"+` takes the flags of `+"`meshfed hub`"+`, `+"`meshfed-spoke`"+`
those of `+"`meshfed spoke`"+`. Every command prints them, with examples, with
`+"`--help`"+`.
`)
	for _, c := range commands() {
		if c.flags == nil || c.help == nil {
			continue
		}
		fs := flag.NewFlagSet("meshfed "+c.name, flag.ContinueOnError)
		c.flags(fs)
		fmt.Fprintf(w, "\n## meshfed %s\n\n%s\n", c.name, strings.TrimSpace(c.help.Summary))
		c.help.WriteMarkdown(w, fs, hostDefaults)
	}
}
