package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/bench"
)

func TestParseMix(t *testing.T) {
	got, err := parseMix("grpc=60,envoy=38,ztunnel=2", 1000)
	if want := (bench.Mix{GRPC: 600, Envoy: 380, Ztunnel: 20}); err != nil || got != want {
		t.Errorf("parseMix = %+v, %v; want %+v", got, err, want)
	}
	got, err = parseMix("grpc=50,envoy=25,ztunnel=25", 3)
	if err != nil || got.Total() != 3 {
		t.Errorf("parseMix of 3 clients = %+v, %v; want 3 in all", got, err)
	}
	for _, bad := range []string{"grpc=60,envoy=30", "grpc=60,envoy=40,istiod=0", "grpc=x", "grpc=-10,envoy=110"} {
		if _, err := parseMix(bad, 10); err == nil {
			t.Errorf("parseMix(%q): no error", bad)
		}
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--endpoints", "1001"},
		{"bench", "--servers", "istiod"},
		{"bench", "--mix", "grpc=1"},
		{"bench", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, &stdout, &stderr)
		if err == nil || stdout.Len() > 0 {
			t.Errorf("meshfed %s: err %v, stdout %q; want an error before anything runs", strings.Join(args, " "), err, stdout.String())
		}
	}
}
