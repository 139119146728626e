package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// completionCases are lines typed, and the completions every shell must
// offer for the last word (bash and fish as words; zsh is only checked
// for syntax: completing needs an interactive zsh).
var completionCases = []struct {
	line string
	want []string
}{
	{"meshfed ", []string{"bench", "certs", "completion", "demo", "explain", "help", "hub", "proxies", "spoke", "status", "version"}},
	{"meshfed st", []string{"status"}},
	{"meshfed status --w", []string{"--wait"}},
	{"meshfed status -o ", []string{"json", "table", "yaml"}},
	{"meshfed status --clusters east --out", []string{"--output"}},
	{"meshfed demo ", []string{"client"}},
	{"meshfed demo client --co", []string{"--count"}},
	{"meshfed completion ", []string{"bash", "fish", "zsh"}},
	{"meshfed help sp", []string{"spoke"}},
	{"meshfed hub --log-level ", []string{"debug", "error", "info", "warn"}},
	{"meshfed spoke --export ", []string{"all", "exported"}},
	{"meshfed hub --xds-tls-c", []string{"--xds-tls-ca", "--xds-tls-cert"}},
	{"meshfed bench baseline-hub --stale", []string{"--stale-after"}},
}

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"completion", shell}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "meshfed."+shell)
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCompletionBash sources the bash script and calls its function as
// bash's completion would.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed to test the bash completion script")
	}
	script := completionScript(t, "bash")
	for _, tc := range completionCases {
		// COMP_WORDS as bash splits the line: by blanks, the last word
		// empty after a blank.
		words := strings.Fields(tc.line)
		if strings.HasSuffix(tc.line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := `source "$1"; COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _meshfed; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.CommandContext(t.Context(), bash, "-c", prog, "bash", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		if diff := cmp.Diff(tc.want, sortedLines(string(out))); diff != "" {
			t.Errorf("bash completes %q with (-want +got):\n%s", tc.line, diff)
		}
	}
}

// TestCompletionFish asks fish what it completes (complete -C), when
// fish is installed.
func TestCompletionFish(t *testing.T) {
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Skip("fish is not installed")
	}
	script := completionScript(t, "fish")
	for _, tc := range completionCases {
		out, err := exec.CommandContext(t.Context(), fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, tc.line).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		var got []string
		for _, line := range sortedLines(string(out)) {
			word, _, _ := strings.Cut(line, "\t") // the description follows a tab
			got = append(got, word)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("fish completes %q with (-want +got):\n%s", tc.line, diff)
		}
	}
}

// TestCompletionZsh checks the zsh script's syntax, when zsh is
// installed.
func TestCompletionZsh(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("zsh is not installed")
	}
	script := completionScript(t, "zsh")
	if out, err := exec.CommandContext(t.Context(), zsh, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#compdef meshfed\n", "'--wait[", "'-o=[short for --output]:o:(table json yaml)'", "'--kubeconfig=[", ":kubeconfig:_files'"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("the zsh script lacks %q", want)
		}
	}
}

// TestCompletionHasEveryFlag: each script names every flag of every
// command, so that a flag added to a command is completed.
func TestCompletionHasEveryFlag(t *testing.T) {
	scripts := map[string]string{}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		data, err := os.ReadFile(completionScript(t, shell))
		if err != nil {
			t.Fatal(err)
		}
		scripts[shell] = string(data)
	}
	for _, c := range commands() {
		if c.flags == nil {
			continue
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			dashed := "--" + f.Name
			if len(f.Name) == 1 {
				dashed = "-" + f.Name
			}
			for shell, script := range map[string]string{"bash": dashed, "zsh": "'" + dashed, "fish": " " + f.Name + " "} {
				if !strings.Contains(scripts[shell], script) {
					t.Errorf("the %s script lacks %s's flag %s", shell, c.name, dashed)
				}
			}
		})
	}
}

func TestCompletionRefusesOtherShells(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		if err := run(t.Context(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("meshfed %q: no error", args)
		}
	}
}

// TestEveryCommandHasHelp: every command and subcommand answers -h and
// --help with its usage, and `meshfed help CMD` prints the same on
// stdout.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		if c.name == "help" || c.name == "version" {
			continue
		}
		for _, h := range []string{"-h", "--help"} {
			args := append(strings.Fields(c.name), h)
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), args, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
				t.Errorf("meshfed %s = %v, want flag.ErrHelp", strings.Join(args, " "), err)
			}
			if want := "Usage:\n  meshfed " + c.name + " "; !strings.HasPrefix(stderr.String(), want) {
				t.Errorf("meshfed %s printed %q, want it to start with %q", strings.Join(args, " "), stderr.String(), want)
			}
		}
		var stdout bytes.Buffer
		if err := run(t.Context(), append([]string{"help"}, strings.Fields(c.name)...), &stdout, io.Discard); err != nil {
			t.Errorf("meshfed help %s: %v", c.name, err)
		}
		if want := "Usage:\n  meshfed " + c.name + " "; !strings.HasPrefix(stdout.String(), want) {
			t.Errorf("meshfed help %s printed %q", c.name, stdout.String())
		}
	}
	if err := run(t.Context(), []string{"help", "nope"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown command "nope"`) {
		t.Errorf("meshfed help nope = %v", err)
	}
}

func sortedLines(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	slices.Sort(out)
	return out
}
