package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/internal/cli"
)

var completionHelp = cli.Help{
	Args: "bash|zsh|fish",
	Summary: "Print a completion script for the shell named: meshfed's commands, their flags, and the values\n" +
		"of flags that take one of a few (-o table|json|yaml, --log-format, ...).",
	Examples: []string{
		"# bash, for this shell; put it in ~/.bashrc to keep it\nsource <(meshfed completion bash)",
		"# zsh: a file named _meshfed in a directory of $fpath\nmeshfed completion zsh > \"${fpath[1]}/_meshfed\"",
		"# fish\nmeshfed completion fish > ~/.config/fish/completions/meshfed.fish",
	},
}

func runCompletion(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed completion", stderr)
	completionHelp.Install(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("name one shell: bash, zsh or fish")
	}
	cmds := completionCommands()
	switch fs.Arg(0) {
	case "bash":
		return writeBash(stdout, cmds)
	case "zsh":
		return writeZsh(stdout, cmds)
	case "fish":
		return writeFish(stdout, cmds)
	default:
		return fmt.Errorf("no completion for %q: bash, zsh or fish", fs.Arg(0))
	}
}

// compCommand is a command as the completion scripts see it.
type compCommand struct {
	path    []string // "demo", "client"
	summary string
	flags   []compFlag
	// words are the non-flag arguments it takes: its subcommands and the
	// words of command.words.
	words []string
}

// compFlag is a flag as the completion scripts see it.
type compFlag struct {
	name  string // without dashes; one letter for a short flag
	usage string // the first sentence of its usage
	value bool   // it takes a value
	// values are the only values it takes, when they are few; files, that
	// its value is a path.
	values []string
	files  bool
}

// flagValues are the values of the flags that take one of a few.
var flagValues = map[string][]string{
	"output":     {"table", "json", "yaml"},
	"o":          {"table", "json", "yaml"},
	"log-format": {"text", "json"},
	"log-level":  {"debug", "info", "warn", "error"},
	"export":     {"exported", "all"},
	"servers":    {"meshfed", "baseline", "meshfed,baseline"},
}

// fileFlags take a path.
var fileFlags = []string{
	"kubeconfig", "manifests", "dir", "tls-cert", "tls-key", "tls-ca", "xds-tls-cert", "xds-tls-key", "xds-tls-ca",
	"clusters-config", "json", "profile-dir", "log-dir",
}

// completionCommands reads every command's flag set.
func completionCommands() []compCommand {
	var out []compCommand
	all := commands()
	for _, c := range all {
		cc := compCommand{path: strings.Fields(c.name), summary: c.summary, words: slices.Clone(c.words)}
		for _, sub := range all {
			if p, ok := strings.CutPrefix(sub.name, c.name+" "); ok && !strings.Contains(p, " ") {
				cc.words = append(cc.words, p)
			}
		}
		if c.name == "help" {
			for _, sub := range all {
				if !strings.Contains(sub.name, " ") && sub.name != "help" {
					cc.words = append(cc.words, sub.name)
				}
			}
		}
		if c.flags != nil {
			fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
			c.flags(fs)
			fs.VisitAll(func(f *flag.Flag) {
				usage, _, _ := strings.Cut(f.Usage, "; ")
				usage, _, _ = strings.Cut(usage, " (")
				cc.flags = append(cc.flags, compFlag{
					name: f.Name, usage: usage, value: !cli.IsBool(f),
					values: flagValues[f.Name], files: slices.Contains(fileFlags, f.Name),
				})
			})
		}
		cc.flags = append(cc.flags, compFlag{name: "help", usage: "print the command's help"})
		out = append(out, cc)
	}
	return out
}

// dashed is how a flag is typed: -o, --output.
func (f compFlag) dashed() string {
	if len(f.name) == 1 {
		return "-" + f.name
	}
	return "--" + f.name
}

// writeBash writes a bash completion function: the command path is the
// first words that name commands; then flags, a flag's values, or the
// command's words.
func writeBash(w io.Writer, cmds []compCommand) error {
	var b strings.Builder
	b.WriteString(`# bash completion for meshfed (meshfed completion bash)

_meshfed() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    # The command: the words after meshfed that name one, before any flag.
    local cmd="" i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        case "$w" in -*) break ;; esac
        case " $(_meshfed_words "$cmd") " in
            *" $w "*) cmd="${cmd:+$cmd }$w" ;;
            *) break ;;
        esac
    done
    # --flag=value: bash splits it at the '='.
    if [[ "$cur" == "=" ]]; then
        prev="${COMP_WORDS[COMP_CWORD-1]}"
        cur=""
    elif [[ "$prev" == "=" && COMP_CWORD -ge 2 ]]; then
        prev="${COMP_WORDS[COMP_CWORD-2]}"
    fi
    local values
    values="$(_meshfed_values "$cmd" "$prev")"
    case "$values" in
        "<file>")
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        "<any>")
            COMPREPLY=()
            return ;;
        "") ;;
        *)
            COMPREPLY=($(compgen -W "$values" -- "$cur"))
            return ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_meshfed_flags "$cmd")" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$(_meshfed_words "$cmd")" -- "$cur"))
    fi
}

`)
	writeWordsFunc(&b, cmds)
	b.WriteString(`
# _meshfed_flags CMD: CMD's flags.
_meshfed_flags() {
    case "$1" in
        "") echo "--help --version" ;;
`)
	for _, c := range cmds {
		names := make([]string, 0, len(c.flags))
		for _, f := range c.flags {
			names = append(names, f.dashed())
		}
		fmt.Fprintf(&b, "        %q) echo %q ;;\n", strings.Join(c.path, " "), strings.Join(names, " "))
	}
	b.WriteString(`    esac
}

# _meshfed_values CMD FLAG: the values FLAG of CMD takes: a list, <file>,
# <any>, or nothing when FLAG takes none.
_meshfed_values() {
    case "$1 $2" in
`)
	for _, c := range cmds {
		for _, f := range c.flags {
			if !f.value {
				continue
			}
			v := "<any>"
			switch {
			case len(f.values) > 0:
				v = strings.Join(f.values, " ")
			case f.files:
				v = "<file>"
			}
			key := strings.Join(c.path, " ") + " "
			fmt.Fprintf(&b, "        %q|%q) echo %q ;;\n", key+"-"+f.name, key+"--"+f.name, v)
		}
	}
	b.WriteString(`    esac
}

complete -F _meshfed meshfed
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeWordsFunc writes _meshfed_words, a function of bash and zsh alike
// that prints the words that may follow a command (its subcommands and
// words; with no command, meshfed's commands).
func writeWordsFunc(b *strings.Builder, cmds []compCommand) {
	var top []string
	for _, c := range cmds {
		if len(c.path) == 1 {
			top = append(top, c.path[0])
		}
	}
	fmt.Fprintf(b, `# _meshfed_words CMD: the commands after meshfed, or the words after CMD.
_meshfed_words() {
    case "$1" in
        "") echo %q ;;
`, strings.Join(top, " "))
	for _, c := range cmds {
		if len(c.words) > 0 {
			fmt.Fprintf(b, "        %q) echo %q ;;\n", strings.Join(c.path, " "), strings.Join(c.words, " "))
		}
	}
	b.WriteString("    esac\n}\n")
}

// zshQuote quotes s for a single-quoted zsh word inside an _arguments
// spec's brackets.
func zshQuote(s string) string {
	r := strings.NewReplacer("'", `'\''`, "[", `\[`, "]", `\]`, ":", `\:`)
	return r.Replace(s)
}

// writeZsh writes a zsh completion function for compinit (#compdef).
func writeZsh(w io.Writer, cmds []compCommand) error {
	var b strings.Builder
	b.WriteString(`#compdef meshfed
# zsh completion for meshfed (meshfed completion zsh)

_meshfed() {
    local -a cmd
    # The command: the words after meshfed that name one, before any flag.
    local i=2
    while (( i < CURRENT )); do
        case "${words[i]}" in -*) break ;; esac
        if (( ${${(s: :)$(_meshfed_words "${(j: :)cmd}")}[(Ie)${words[i]}]} )); then
            cmd+=("${words[i]}")
            (( i++ ))
        else
            break
        fi
    done
    # _arguments sees the command as words[1], its flags and words after.
    (( CURRENT -= i - 2 ))
    shift $(( i - 2 )) words
    case "${(j: :)cmd}" in
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "        %q)\n            _arguments -s \\\n", strings.Join(c.path, " "))
		for _, f := range c.flags {
			spec := fmt.Sprintf("%s[%s]", f.dashed(), zshQuote(f.usage))
			if f.value {
				// The value may follow in the next word or after '='.
				spec = fmt.Sprintf("%s=[%s]", f.dashed(), zshQuote(f.usage))
				action := " "
				switch {
				case len(f.values) > 0:
					action = "(" + strings.Join(f.values, " ") + ")"
				case f.files:
					action = "_files"
				}
				spec += ":" + zshQuote(f.name) + ":" + action
			}
			fmt.Fprintf(&b, "                '%s' \\\n", spec)
		}
		if len(c.words) > 0 {
			fmt.Fprintf(&b, "                '1:word:(%s)' \\\n", strings.Join(c.words, " "))
		}
		b.WriteString("                && return 0\n            ;;\n")
	}
	b.WriteString(`        *)
            local -a commands
            commands=(
`)
	for _, c := range cmds {
		if len(c.path) == 1 {
			fmt.Fprintf(&b, "                '%s:%s'\n", c.path[0], zshQuote(c.summary))
		}
	}
	b.WriteString(`            )
            _describe -t commands 'meshfed command' commands
            ;;
    esac
}

`)
	writeWordsFunc(&b, cmds)
	b.WriteString(`
if [ "$funcstack[1]" = "_meshfed" ]; then
    _meshfed "$@"
else
    compdef _meshfed meshfed
fi
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for a single-quoted fish word.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

// writeFish writes fish completions: one complete line per command,
// subcommand, word and flag, each under a condition on the words typed.
func writeFish(w io.Writer, cmds []compCommand) error {
	var b strings.Builder
	b.WriteString(`# fish completion for meshfed (meshfed completion fish)

# __meshfed_is CMD...: the words after meshfed are CMD, then flags and
# words that name no further command.
function __meshfed_is
    set -l typed (commandline -opc)[2..-1]
    set -l i 1
    for want in $argv
        test "$typed[$i]" = "$want"; or return 1
        set i (math $i + 1)
    end
    # A command with subcommands is not one of them.
    switch "$argv"
`)
	for _, c := range cmds {
		var subs []string
		for _, o := range cmds {
			if len(o.path) == len(c.path)+1 && slices.Equal(o.path[:len(c.path)], c.path) {
				subs = append(subs, o.path[len(c.path)])
			}
		}
		if len(subs) > 0 {
			fmt.Fprintf(&b, "        case %s\n            contains -- \"$typed[$i]\" %s; and return 1\n", fishQuote(strings.Join(c.path, " ")), strings.Join(subs, " "))
		}
	}
	b.WriteString(`    end
    return 0
end

complete -c meshfed -f
complete -c meshfed -n 'test (count (commandline -opc)) -eq 1' -l help -d 'print the usage'
complete -c meshfed -n 'test (count (commandline -opc)) -eq 1' -l version -d 'print the version'
`)
	for _, c := range cmds {
		if len(c.path) == 1 {
			fmt.Fprintf(&b, "complete -c meshfed -n 'test (count (commandline -opc)) -eq 1' -a %s -d %s\n", c.path[0], fishQuote(c.summary))
		}
	}
	for _, c := range cmds {
		cond := fishQuote("__meshfed_is " + strings.Join(c.path, " "))
		for _, word := range c.words {
			fmt.Fprintf(&b, "complete -c meshfed -n %s -a %s\n", cond, word)
		}
		for _, f := range c.flags {
			line := fmt.Sprintf("complete -c meshfed -n %s", cond)
			if len(f.name) == 1 {
				line += " -s " + f.name
			} else {
				line += " -l " + f.name
			}
			if f.value {
				switch {
				case len(f.values) > 0:
					line += " -x -a " + fishQuote(strings.Join(f.values, " "))
				case f.files:
					line += " -r -F"
				default:
					line += " -x"
				}
			}
			line += " -d " + fishQuote(f.usage)
			b.WriteString(line + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
