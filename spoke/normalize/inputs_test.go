package normalize_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
)

type fakeInputs = normalizetest.Inputs

func inputs(objs ...metav1.Object) *fakeInputs { return normalizetest.NewInputs(objs...) }
