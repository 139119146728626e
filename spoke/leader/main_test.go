package leader

import (
	"testing"

	"github.com/meshfed/meshfed/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }
