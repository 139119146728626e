package promql

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go's xDS client does not stop the certificate file watcher of
		// its "tls" channel credentials when the client closes (v1.85.0).
		goleak.IgnoreTopFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"))
}
