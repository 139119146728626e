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

func TestGCPercentFlag(t *testing.T) {
	tests := []struct {
		args    []string
		want    int
		wantErr string
	}{
		{want: DefaultGCPercent},
		{args: []string{"--gc-percent=50"}, want: 50},
		{args: []string{"--gc-percent=0"}, want: 0},
		{args: []string{"--gc-percent=-1"}, wantErr: "--gc-percent -1 is negative"},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		cfg.Insecure = true
		fs := flag.NewFlagSet("hub", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.AddFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("parsing %q: %v", tt.args, err)
		}
		err := cfg.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: Validate() = %v", tt.args, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: Validate() = %v, want an error saying %q", tt.args, err, tt.wantErr)
		case tt.wantErr == "" && cfg.GCPercent != tt.want:
			t.Errorf("%q: GCPercent = %d, want %d", tt.args, cfg.GCPercent, tt.want)
		}
	}
}

func TestXDSPlaintextNeedsSayingSo(t *testing.T) {
	tls := []string{"--tls-cert=c", "--tls-key=k", "--tls-ca=ca"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "default address, no xDS TLS", args: tls, wantErr: "--xds-addr :15010 would serve plaintext xDS beyond loopback"},
		{name: "said so", args: append([]string{"--xds-plaintext"}, tls...)},
		{name: "insecure", args: []string{"--insecure"}},
		{name: "loopback", args: append([]string{"--xds-addr=127.0.0.1:15010"}, tls...)},
		{name: "localhost", args: append([]string{"--xds-addr=localhost:15010"}, tls...)},
		{name: "IPv6 loopback", args: append([]string{"--xds-addr=[::1]:15010"}, tls...)},
		{name: "xDS TLS", args: append([]string{"--xds-tls-cert=x", "--xds-tls-key=y"}, tls...)},
		{name: "xDS off", args: append([]string{"--xds-addr="}, tls...)},
		{name: "negative burst", args: []string{"--insecure", "--xds-stream-burst=-1"}, wantErr: "--xds-stream-burst -1 is negative"},
		{name: "bad debug host", args: []string{"--insecure", "--debug-hosts=a:80"}, wantErr: "parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			fs := flag.NewFlagSet("hub", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				if tt.wantErr != "parse" {
					t.Fatalf("parsing %q: %v", tt.args, err)
				}
				return
			}
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
}
