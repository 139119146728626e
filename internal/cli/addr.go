package cli

import (
	"net"
	"net/netip"
)

// LoopbackAddr reports whether a listen address (host:port) binds
// loopback only: what a flag that serves something sensitive in the clear
// may bind without being told otherwise.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
