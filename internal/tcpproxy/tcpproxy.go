// Package tcpproxy is a minimal L4 forwarder: the demo's stand-in for a
// cluster's east-west gateway, which forwards each connection to one of the
// cluster's endpoints, round robin.
package tcpproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Serve accepts connections on lis and forwards each to the next backend
// (host:port) until ctx ends. It closes lis.
func Serve(ctx context.Context, lis net.Listener, backends []string) error {
	if len(backends) == 0 {
		return errors.New("tcpproxy: no backends")
	}
	stop := context.AfterFunc(ctx, func() { _ = lis.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var next atomic.Uint64
	for {
		conn, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		backend := backends[next.Add(1)%uint64(len(backends))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			Forward(ctx, conn, backend)
		}()
	}
}

// Forward pipes client to the first of backends that accepts a
// connection, until either side closes or ctx ends; it closes client.
func Forward(ctx context.Context, client net.Conn, backends ...string) {
	defer func() { _ = client.Close() }()
	var server net.Conn
	for _, b := range backends {
		d := net.Dialer{Timeout: 5 * time.Second}
		var err error
		if server, err = d.DialContext(ctx, "tcp", b); err == nil {
			break
		}
	}
	if server == nil {
		return
	}
	defer func() { _ = server.Close() }()
	// Closing both ends on cancel unblocks the copies.
	stop := context.AfterFunc(ctx, func() {
		_ = client.Close()
		_ = server.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}
