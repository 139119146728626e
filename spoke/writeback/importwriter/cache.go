package importwriter

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// The informers' transforms keep what the writer compares (with the
// generation its conditions observe) and what a PUT must carry back
// (labels, annotations, finalizers and owners others set, other
// controllers' status conditions); managedFields and the rest go.

func transformImport(obj any) (any, error) {
	in, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return obj, nil // a tombstone
	}
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: in.Namespace, Name: in.Name, UID: in.UID, ResourceVersion: in.ResourceVersion, Generation: in.Generation,
			DeletionTimestamp: in.DeletionTimestamp, Labels: in.Labels, Annotations: in.Annotations,
			Finalizers: in.Finalizers, OwnerReferences: in.OwnerReferences,
		},
		Spec:   in.Spec,
		Status: in.Status,
	}, nil
}

func transformSlice(obj any) (any, error) {
	in, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: in.Namespace, Name: in.Name, UID: in.UID, ResourceVersion: in.ResourceVersion,
			DeletionTimestamp: in.DeletionTimestamp, Labels: in.Labels, OwnerReferences: in.OwnerReferences,
			Annotations: in.Annotations, Finalizers: in.Finalizers,
		},
		AddressType: in.AddressType,
		Ports:       in.Ports,
		Endpoints:   make([]discoveryv1.Endpoint, len(in.Endpoints)),
	}
	for i, e := range in.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions, Hostname: e.Hostname, Zone: e.Zone}
	}
	return out, nil
}

// indexImport indexes meshfed's slices by the key ("namespace/name") of
// their ServiceImport, from the MCS service-name label.
const indexImport = "import"

func sliceImportKey(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	svc := s.Labels[mcsv1beta1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + svc}, nil
}

// keyHandler enqueues the import key of each object an informer reports.
type keyHandler struct {
	key     func(obj any) (string, bool)
	enqueue func(key string)
}

var _ cache.ResourceEventHandler = keyHandler{}

func (h keyHandler) OnAdd(obj any, _ bool) { h.add(obj) }

func (h keyHandler) OnUpdate(old, cur any) {
	h.add(old)
	h.add(cur)
}

func (h keyHandler) OnDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	h.add(obj)
}

func (h keyHandler) add(obj any) {
	if k, ok := h.key(obj); ok {
		h.enqueue(k)
	}
}

func importKeyOf(obj any) (string, bool) {
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return "", false
	}
	return si.Namespace + "/" + si.Name, true
}

func sliceKeyOf(obj any) (string, bool) {
	keys, _ := sliceImportKey(obj)
	if len(keys) == 0 {
		return "", false
	}
	return keys[0], true
}
