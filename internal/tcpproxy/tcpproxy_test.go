package tcpproxy

import (
	"bufio"
	"context"
	"net"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestForwardsRoundRobin(t *testing.T) {
	var backends []string
	for _, name := range []string{"a", "b"} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, lis.Addr().String())
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(name + "\n"))
				_ = c.Close()
			}
		}()
		t.Cleanup(func() { _ = lis.Close() })
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, lis, backends) }()

	got := map[string]int{}
	for range 4 {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[line]++
	}
	if got["a\n"] != 2 || got["b\n"] != 2 {
		t.Errorf("connections per backend %v, want 2 each", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
