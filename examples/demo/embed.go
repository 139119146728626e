package demo

import "embed"

// Manifests holds the demo clusters' manifests: east/*.yaml and west/*.yaml.
//
//go:embed east west
var Manifests embed.FS

// EchoPort is the port the echo backends serve gRPC on.
const EchoPort = 8080

// EchoBackends returns, per cluster, the pod IPs on which the demo must run
// an echo server (each on [EchoPort]). The caller owns the returned map.
func EchoBackends() map[string][]string {
	return map[string][]string{
		"east": {"127.0.0.11", "127.0.0.12"},
		"west": {"127.0.0.21", "127.0.0.22"},
	}
}

// GatewayPort is the east-west gateways' mTLS port, where the demo runs a
// stand-in gateway that forwards to the cluster's echo backends.
const GatewayPort = 15443

// Gateways returns, per cluster, the load-balancer IP of its east-west
// gateway Service. The caller owns the returned map.
func Gateways() map[string]string {
	return map[string]string{"east": "127.0.0.100", "west": "127.0.0.200"}
}
