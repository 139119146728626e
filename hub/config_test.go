package hub

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestMemoryLimitRatioFlag(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     float64
		wantErr  string // from Validate
		parseErr bool
	}{
		{name: "default", want: 0.9},
		{name: "set", args: []string{"--memory-limit-ratio=0.75"}, want: 0.75},
		{name: "off", args: []string{"--memory-limit-ratio=0"}, want: 0},
		{name: "one", args: []string{"--memory-limit-ratio=1"}, wantErr: "--memory-limit-ratio 1 is outside [0, 1)"},
		{name: "negative", args: []string{"--memory-limit-ratio=-0.5"}, wantErr: "--memory-limit-ratio -0.5 is outside [0, 1)"},
		{name: "NaN", args: []string{"--memory-limit-ratio=NaN"}, wantErr: "--memory-limit-ratio NaN is outside [0, 1)"},
		{name: "not a number", args: []string{"--memory-limit-ratio=90%"}, parseErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Insecure = true
			fs := flag.NewFlagSet("hub", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg.AddFlags(fs)
			err := fs.Parse(tt.args)
			if tt.parseErr {
				if err == nil {
					t.Errorf("parsing %q succeeded, want an error", tt.args)
				}
				return
			}
			if err != nil {
				t.Fatalf("parsing %q: %v", tt.args, err)
			}
			err = cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error saying %q", err, tt.wantErr)
			case tt.wantErr == "" && cfg.MemoryLimitRatio != tt.want:
				t.Errorf("MemoryLimitRatio = %v, want %v", cfg.MemoryLimitRatio, tt.want)
			}
		})
	}
}
