package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
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
