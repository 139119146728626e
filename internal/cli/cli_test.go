package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/internal/version"
)

// TestJSONLogsDurationsAsText: a duration reads as "1.5s" in both formats,
// not as nanoseconds.
func TestJSONLogsDurationsAsText(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		lf := LogFlags{Level: "info", Format: format}
		log, err := lf.Logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("reconnecting", "retry_in", 1500*time.Millisecond)
		if format == "text" {
			if !bytes.Contains(buf.Bytes(), []byte("retry_in=1.5s")) {
				t.Errorf("text log %q has no retry_in=1.5s", buf.String())
			}
			continue
		}
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if line["retry_in"] != "1.5s" {
			t.Errorf("json log has retry_in %v, want \"1.5s\"", line["retry_in"])
		}
	}
}

func TestLoggerRefusesBadFlags(t *testing.T) {
	for _, lf := range []LogFlags{{Level: "verbose", Format: "text"}, {Level: "info", Format: "yaml"}} {
		if _, err := lf.Logger(&bytes.Buffer{}); err == nil {
			t.Errorf("%+v: no error", lf)
		}
	}
}

func TestSingle(t *testing.T) {
	var got []string
	run := Single("meshfed-hub", "hub", func(_ context.Context, name string, args []string, _ io.Writer) error {
		got = append([]string{name}, args...)
		return nil
	})
	for _, tt := range []struct {
		args, want []string
	}{
		{[]string{"--debug-addr", ":8080"}, []string{"meshfed-hub", "--debug-addr", ":8080"}},
		{[]string{"hub", "--debug-addr", ":8080"}, []string{"meshfed-hub", "--debug-addr", ":8080"}},
		{nil, []string{"meshfed-hub"}},
	} {
		got = nil
		if err := run(t.Context(), tt.args, io.Discard, io.Discard); err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("run(%q) ran %q (%v), want %q", tt.args, got, err, tt.want)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"hub", "version"}} {
		got = nil
		var stdout strings.Builder
		if err := run(t.Context(), args, &stdout, io.Discard); err != nil || got != nil || stdout.String() != "meshfed-hub "+version.String()+"\n" {
			t.Errorf("run(%q): printed %q, ran %q (%v); want the version only", args, stdout.String(), got, err)
		}
	}
}

// TestLogStopping: a stop asked for by the command's context logs its
// cause as the reason; a component's failure logs the error.
func TestLogStopping(t *testing.T) {
	for _, tt := range []struct {
		name string
		stop func(parentCancel, groupCancel context.CancelCauseFunc)
		want map[string]any
	}{
		{
			"signal", func(parent, _ context.CancelCauseFunc) { parent(errors.New("terminated signal received")) },
			map[string]any{"level": "INFO", "msg": "stopping", "reason": "terminated signal received"},
		},
		{
			"failure", func(_, group context.CancelCauseFunc) { group(errors.New("debug server: listener closed")) },
			map[string]any{"level": "ERROR", "msg": "stopping", "err": "debug server: listener closed"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			parent, parentCancel := context.WithCancelCause(t.Context())
			defer parentCancel(nil)
			group, groupCancel := context.WithCancelCause(parent)
			defer groupCancel(nil)
			tt.stop(parentCancel, groupCancel)
			LogStopping(parent, group, log)
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("%v: %q", err, buf.String())
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("logged %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:80": true, "localhost:80": true, "127.1.2.3:80": true,
		":80": false, "0.0.0.0:80": false, "10.0.0.1:80": false, "example.com:80": false, "127.0.0.1": false,
	} {
		if got := LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
