// Package cli holds what meshfed's commands share on the command line: the
// flag set they parse and the logging flags of the long-running ones.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshfed/meshfed/internal/version"
)

// Main runs a command's run with the process's arguments and a context
// that ends on SIGINT or SIGTERM, and exits 1 with the error (prefixed by
// name) unless it is nil or asked for help.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Command runs one of meshfed's long-running commands until ctx ends; name
// is the command as typed ("meshfed hub", "meshfed-hub").
type Command func(ctx context.Context, name string, args []string, stderr io.Writer) error

// Single is the run function of a binary that is one command of meshfed
// alone (meshfed-hub is `meshfed hub`). It takes the command's name as an
// optional first argument, so that an image may have either binary as its
// entrypoint under the same chart, and answers version and --version.
func Single(binary, command string, cmd Command) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if len(args) > 0 && args[0] == command {
			args = args[1:]
		}
		if len(args) == 1 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
			fmt.Fprintln(stdout, binary, version.String())
			return nil
		}
		return cmd(ctx, binary, args, stderr)
	}
}

// LogFlags declares the logging flags shared by the long-running commands.
type LogFlags struct {
	Level  string
	Format string
}

// Add declares the flags on fs, with the defaults "info" and "text" unless
// l already holds others.
func (l *LogFlags) Add(fs *flag.FlagSet) {
	if l.Level == "" {
		l.Level = "info"
	}
	if l.Format == "" {
		l.Format = "text"
	}
	fs.StringVar(&l.Level, "log-level", l.Level, "debug, info, warn or error")
	fs.StringVar(&l.Format, "log-format", l.Format, "text or json")
}

// Logger returns the logger the flags configure, writing to w.
func (l *LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		opts.ReplaceAttr = durationsAsText
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", l.Format)
	}
}

// durationsAsText writes durations as Go writes them ("1.5s"), as the
// text handler does: slog's JSON handler writes nanoseconds, which no
// reader of a log expects.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// ParseCommand parses the flags a long-running command's config adds, and
// the logging flags, and returns the logger they configure. name is the
// command as typed ("meshfed hub"); help is what -h prints.
func ParseCommand(name string, args []string, stderr io.Writer, addFlags func(*flag.FlagSet), help Help) (*slog.Logger, error) {
	var lf LogFlags
	fs := NewFlagSet(name, stderr)
	addFlags(fs)
	lf.Add(fs)
	help.Install(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return lf.Logger(stderr)
}

// NewFlagSet returns a flag set named name that reports errors instead of
// exiting, and writes usage to stderr.
func NewFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// LogStopping logs that a long-running command stops, and why, once ctx
// ends. parent is the context the command was run with and ctx the one
// its components share (an errgroup's): when parent ended, the reason is
// its cause (for [Main]'s context, the signal received); otherwise a
// component failed, and its error is logged as one.
func LogStopping(parent, ctx context.Context, log *slog.Logger) {
	<-ctx.Done()
	if parent.Err() != nil {
		log.Info("stopping", "reason", context.Cause(parent).Error())
		return
	}
	log.Error("stopping", "err", context.Cause(ctx))
}
