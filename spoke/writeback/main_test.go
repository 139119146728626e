package writeback

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// internal/kubetest runs envtest, which logs through controller-runtime's
	// logger: without one set it prints a notice with a stack trace.
	ctrllog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m,
		// klog starts its flush daemon when it is imported.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}
