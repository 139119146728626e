package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Help is what a command's -h or --help prints: how to call it, what it
// does, its flags in groups, and examples.
type Help struct {
	// Args follows the command's name in the usage line ("[flags]").
	Args string
	// Summary says what the command does, in a sentence or two.
	Summary string
	// Groups list the flags by purpose. A flag no group names, which a
	// flag added without updating the help would be, is listed under
	// "Other flags": nothing is ever hidden.
	Groups []FlagGroup
	// Aliases maps a short flag to the long one it stands for ("o" →
	// "output"); the pair is listed once, as "-o, --output".
	Aliases map[string]string
	// Examples are command lines, each with a comment line above it if
	// it needs one.
	Examples []string
}

// FlagGroup is a titled group of flags: those Flags names, in that order,
// then those whose names start with one of Prefixes and no earlier group
// took, sorted.
type FlagGroup struct {
	Title    string
	Flags    []string
	Prefixes []string
}

// Install makes h fs's usage, printed to fs's output on -h, --help or a
// flag error.
func (h Help) Install(fs *flag.FlagSet) {
	fs.Usage = func() { h.Write(fs.Output(), fs) }
}

// Write prints h for fs, whose name is the command as typed.
func (h Help) Write(w io.Writer, fs *flag.FlagSet) {
	args := h.Args
	if args == "" {
		args = "[flags]"
	}
	fmt.Fprintf(w, "Usage:\n  %s %s\n", fs.Name(), args)
	if h.Summary != "" {
		fmt.Fprintf(w, "\n%s\n", h.Summary)
	}
	for _, g := range h.groups(fs) {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, f := range g.flags {
			h.writeFlag(w, f)
		}
	}
	if len(h.Examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for i, e := range h.Examples {
			if i > 0 {
				fmt.Fprintln(w)
			}
			for line := range strings.Lines(e) {
				fmt.Fprintf(w, "  %s", line)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "\nFlags take one dash or two: -flag value, --flag=value.\n")
}

type flagGroup struct {
	title string
	flags []*flag.Flag
}

// groups sorts fs's flags into h's groups, then "Other flags" (or
// "Flags", without groups). Aliases are left out: writeFlag prints each
// with the flag it stands for.
func (h Help) groups(fs *flag.FlagSet) []flagGroup {
	placed := map[string]bool{}
	for short := range h.Aliases {
		placed[short] = true
	}
	var out []flagGroup
	for _, g := range h.Groups {
		fg := flagGroup{title: g.Title}
		for _, name := range g.Flags {
			if f := fs.Lookup(name); f != nil && !placed[name] {
				placed[name] = true
				fg.flags = append(fg.flags, f)
			}
		}
		var byPrefix []*flag.Flag
		fs.VisitAll(func(f *flag.Flag) {
			if !placed[f.Name] && slices.ContainsFunc(g.Prefixes, func(p string) bool { return strings.HasPrefix(f.Name, p) }) {
				placed[f.Name] = true
				byPrefix = append(byPrefix, f)
			}
		})
		fg.flags = append(fg.flags, byPrefix...) // VisitAll visits in order of name
		if len(fg.flags) > 0 {
			out = append(out, fg)
		}
	}
	rest := flagGroup{title: "Other flags"}
	if len(out) == 0 {
		rest.title = "Flags"
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !placed[f.Name] {
			rest.flags = append(rest.flags, f)
		}
	})
	if len(rest.flags) > 0 {
		out = append(out, rest)
	}
	return out
}

// aliasesOf returns the short names of a flag, in reverse order of name
// so that prepending each lists them in order: the help and the generated
// docs do not change from run to run.
func (h Help) aliasesOf(name string) []string {
	var out []string
	for short, long := range h.Aliases {
		if long == name {
			out = append(out, short)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// writeFlag prints a flag as flag.PrintDefaults does, but with two dashes
// and with its short alias, if it has one.
func (h Help) writeFlag(w io.Writer, f *flag.Flag) {
	names := "--" + f.Name
	for _, short := range h.aliasesOf(f.Name) {
		names = "-" + short + ", " + names
	}
	typ, usage := flag.UnquoteUsage(f)
	line := "  " + names
	if typ != "" {
		line += " " + typ
	}
	fmt.Fprintln(w, line)
	if def := defaultText(f, typ); def != "" {
		usage += " (default " + def + ")"
	}
	fmt.Fprintf(w, "      %s\n", strings.ReplaceAll(usage, "\n", "\n      "))
}

// WriteMarkdown writes the flags of fs as Markdown, a table per group:
// the flag (with its alias), its default, and what it does. described
// gives, by flag name, the words for a default that depends on where the
// command runs (the host name), written in its place.
func (h Help) WriteMarkdown(w io.Writer, fs *flag.FlagSet, described map[string]string) {
	for _, g := range h.groups(fs) {
		fmt.Fprintf(w, "\n%s:\n\n| flag | default | meaning |\n|---|---|---|\n", g.title)
		for _, f := range g.flags {
			names := "`--" + f.Name + "`"
			for _, short := range h.aliasesOf(f.Name) {
				names = "`-" + short + "`, " + names
			}
			typ, usage := flag.UnquoteUsage(f)
			if typ != "" {
				names = strings.Replace(names, "`--"+f.Name+"`", "`--"+f.Name+" "+typ+"`", 1)
			}
			def := defaultText(f, typ)
			switch {
			case described[f.Name] != "":
				def = described[f.Name]
			case def != "":
				def = "`" + def + "`"
			}
			usage = strings.NewReplacer("|", `\|`, "\n", " ").Replace(usage)
			fmt.Fprintf(w, "| %s | %s | %s |\n", names, def, usage)
		}
	}
}

// defaultText is the default worth printing, quoted for a string, or ""
// for a zero value.
func defaultText(f *flag.Flag, typ string) string {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return ""
	}
	if typ == "string" {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

// IsBool reports whether f takes no value (--flag alone sets it), as
// the flag package decides.
func IsBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
