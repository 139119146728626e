// Package about reads a cluster's About API (KEP-2149): the
// ClusterProperty objects that name the cluster and its clusterset.
package about

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// The well-known properties.
const (
	// ClusterIDProperty's value is the cluster's ID: unique in its
	// clusterset, immutable while it is a member.
	ClusterIDProperty = "cluster.clusterset.k8s.io"
	// ClustersetProperty's value names the clusterset the cluster is a
	// member of.
	ClustersetProperty = "clusterset.k8s.io"
)

// Group is the About API's group.
const Group = "about.k8s.io"

// versions are those read, newest first: v1beta1 is the storage version;
// older installations serve only v1alpha1.
var versions = []string{"v1beta1", "v1alpha1"}

// Properties are what a cluster's About API says of it; "" where it says
// nothing.
type Properties struct {
	ClusterID  string
	Clusterset string
}

// Read reads the well-known properties through c (any REST client of the
// cluster: only its transport and base URL are used). A property that does
// not exist, or an About API that is not installed, reads as "".
func Read(ctx context.Context, c rest.Interface) (Properties, error) {
	var p Properties
	var err error
	if p.ClusterID, err = read(ctx, c, ClusterIDProperty); err != nil {
		return Properties{}, err
	}
	if p.Clusterset, err = read(ctx, c, ClustersetProperty); err != nil {
		return Properties{}, err
	}
	return p, nil
}

// clusterProperty is the part of a ClusterProperty read here.
type clusterProperty struct {
	Spec struct {
		Value string `json:"value"`
	} `json:"spec"`
}

func read(ctx context.Context, c rest.Interface, name string) (string, error) {
	for _, v := range versions {
		// JSON, the only form a CRD's objects take.
		body, err := c.Get().AbsPath("/apis", Group, v, "clusterproperties", name).SetHeader("Accept", "application/json").Do(ctx).Raw()
		if apierrors.IsNotFound(err) {
			continue // no such property, or the version is not served
		}
		if err != nil {
			// The client's codecs are for core kinds and protobuf: it
			// reads a JSON Status as "unknown". Its message says why.
			var st struct{ Message string }
			if json.Unmarshal(body, &st) == nil && st.Message != "" {
				err = fmt.Errorf("%w: %s", err, st.Message)
			}
			return "", fmt.Errorf("ClusterProperty %s (%s/%s): %w", name, Group, v, err)
		}
		var cp clusterProperty
		if err := json.Unmarshal(body, &cp); err != nil {
			return "", fmt.Errorf("ClusterProperty %s (%s/%s): %w", name, Group, v, err)
		}
		return cp.Spec.Value, nil
	}
	return "", nil
}

// ResolveClusterID returns the cluster's ID from the --cluster-id flag and
// the About API, which must agree when both are given.
func ResolveClusterID(flag string, p Properties) (string, error) {
	switch {
	case flag == "" && p.ClusterID == "":
		return "", fmt.Errorf("no cluster ID: give --cluster-id, or create ClusterProperty %s (%s) in the cluster", ClusterIDProperty, Group)
	case flag == "":
		return p.ClusterID, nil
	case p.ClusterID != "" && p.ClusterID != flag:
		return "", fmt.Errorf("the cluster's ClusterProperty %s says %q and --cluster-id says %q: they must agree (the ClusterProperty is the cluster's ID for every MCS tool; drop --cluster-id or correct it)",
			ClusterIDProperty, p.ClusterID, flag)
	}
	return flag, nil
}
