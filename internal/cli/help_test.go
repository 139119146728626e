package cli

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestHelp: -h and --help print the groups in order, a short alias with
// its flag, defaults but zero ones, a flag no group names under "Other
// flags", and the examples.
func TestHelp(t *testing.T) {
	help := Help{
		Summary: "Do a thing.",
		Groups: []FlagGroup{
			{Title: "Where", Flags: []string{"addr", "kube-context"}},
			{Title: "Output", Flags: []string{"output"}},
			{Title: "Kubernetes", Prefixes: []string{"kube-"}},
		},
		Aliases:  map[string]string{"o": "output"},
		Examples: []string{"# One\nthing --addr x", "thing -o json"},
	}
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out strings.Builder
		fs := NewFlagSet("thing", &out)
		fs.String("addr", "127.0.0.1:8080", "the address")
		fs.String("kube-context", "", "the context")
		fs.Int("kube-burst", 100, "the burst")
		fs.Duration("kube-timeout", 0, "the timeout")
		var format string
		fs.StringVar(&format, "output", "table", "the format")
		fs.StringVar(&format, "o", "table", "short for --output")
		fs.Bool("new", false, "a flag added without a group")
		help.Install(fs)
		if err := fs.Parse([]string{arg}); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("Parse(%s) = %v, want flag.ErrHelp", arg, err)
		}
		want := `Usage:
  thing [flags]

Do a thing.

Where:
  --addr string
      the address (default "127.0.0.1:8080")
  --kube-context string
      the context

Output:
  -o, --output string
      the format (default "table")

Kubernetes:
  --kube-burst int
      the burst (default 100)
  --kube-timeout duration
      the timeout

Other flags:
  --new
      a flag added without a group

Examples:
  # One
  thing --addr x

  thing -o json

Flags take one dash or two: -flag value, --flag=value.
`
		if diff := cmp.Diff(want, out.String()); diff != "" {
			t.Errorf("%s printed (-want +got):\n%s", arg, diff)
		}
	}
}

func TestHelpWithoutGroups(t *testing.T) {
	var out strings.Builder
	fs := NewFlagSet("thing", &out)
	fs.Duration("every", time.Second, "how often")
	Help{Args: "FILE"}.Write(&out, fs)
	want := "Usage:\n  thing FILE\n\nFlags:\n  --every duration\n      how often (default 1s)\n\nFlags take one dash or two: -flag value, --flag=value.\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

func TestIsBool(t *testing.T) {
	fs := flag.NewFlagSet("thing", flag.ContinueOnError)
	fs.Bool("wait", false, "")
	fs.String("addr", "", "")
	if !IsBool(fs.Lookup("wait")) || IsBool(fs.Lookup("addr")) {
		t.Error("IsBool tells a bool flag from a string flag wrongly")
	}
}

// TestHelpAliasesInOrder: a flag's short names print in order of name,
// the same every time (the generated flag docs are checked in).
func TestHelpAliasesInOrder(t *testing.T) {
	help := Help{Aliases: map[string]string{"z": "output", "o": "output", "f": "output"}}
	for range 20 {
		var text, md strings.Builder
		fs := NewFlagSet("thing", &text)
		fs.String("output", "table", "the format")
		help.Write(&text, fs)
		help.WriteMarkdown(&md, fs, nil)
		if !strings.Contains(text.String(), "  -f, -o, -z, --output string\n") {
			t.Fatalf("printed %q", text.String())
		}
		if !strings.Contains(md.String(), "| `-f`, `-o`, `-z`, `--output string` |") {
			t.Fatalf("wrote %q", md.String())
		}
	}
}
