package normalize

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Meta is the metadata normalization reads of a [Pod] or [EndpointSlice]:
// 64 bytes where a metav1.ObjectMeta is 232, for every pod of a cluster.
//
// It implements metav1.Object so that client-go's caches can key and index
// the objects holding it. The fields it does not keep read as empty, and
// their setters do nothing.
type Meta struct {
	Name, Namespace     string
	UID                 types.UID
	Labels, Annotations map[string]string
}

var _ metav1.Object = (*Meta)(nil)

// MetaOf returns the identity of m, with only the labels and annotations
// under the given keys (shared strings, new maps).
func MetaOf(m *metav1.ObjectMeta, labels, annotations []string) Meta {
	return Meta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID,
		Labels: Only(m.Labels, labels), Annotations: Only(m.Annotations, annotations),
	}
}

// GetNamespace implements metav1.Object.
func (m *Meta) GetNamespace() string { return m.Namespace }

// SetNamespace implements metav1.Object.
func (m *Meta) SetNamespace(namespace string) { m.Namespace = namespace }

// GetName implements metav1.Object.
func (m *Meta) GetName() string { return m.Name }

// SetName implements metav1.Object.
func (m *Meta) SetName(name string) { m.Name = name }

// GetUID implements metav1.Object.
func (m *Meta) GetUID() types.UID { return m.UID }

// SetUID implements metav1.Object.
func (m *Meta) SetUID(uid types.UID) { m.UID = uid }

// GetLabels implements metav1.Object.
func (m *Meta) GetLabels() map[string]string { return m.Labels }

// SetLabels implements metav1.Object.
func (m *Meta) SetLabels(labels map[string]string) { m.Labels = labels }

// GetAnnotations implements metav1.Object.
func (m *Meta) GetAnnotations() map[string]string { return m.Annotations }

// SetAnnotations implements metav1.Object.
func (m *Meta) SetAnnotations(annotations map[string]string) { m.Annotations = annotations }

// The fields not kept.

// GetGenerateName implements metav1.Object.
func (*Meta) GetGenerateName() string { return "" }

// SetGenerateName implements metav1.Object.
func (*Meta) SetGenerateName(string) {}

// GetResourceVersion implements metav1.Object.
func (*Meta) GetResourceVersion() string { return "" }

// SetResourceVersion implements metav1.Object.
func (*Meta) SetResourceVersion(string) {}

// GetGeneration implements metav1.Object.
func (*Meta) GetGeneration() int64 { return 0 }

// SetGeneration implements metav1.Object.
func (*Meta) SetGeneration(int64) {}

// GetSelfLink implements metav1.Object.
func (*Meta) GetSelfLink() string { return "" }

// SetSelfLink implements metav1.Object.
func (*Meta) SetSelfLink(string) {}

// GetCreationTimestamp implements metav1.Object.
func (*Meta) GetCreationTimestamp() metav1.Time { return metav1.Time{} }

// SetCreationTimestamp implements metav1.Object.
func (*Meta) SetCreationTimestamp(metav1.Time) {}

// GetDeletionTimestamp implements metav1.Object.
func (*Meta) GetDeletionTimestamp() *metav1.Time { return nil }

// SetDeletionTimestamp implements metav1.Object.
func (*Meta) SetDeletionTimestamp(*metav1.Time) {}

// GetDeletionGracePeriodSeconds implements metav1.Object.
func (*Meta) GetDeletionGracePeriodSeconds() *int64 { return nil }

// SetDeletionGracePeriodSeconds implements metav1.Object.
func (*Meta) SetDeletionGracePeriodSeconds(*int64) {}

// GetFinalizers implements metav1.Object.
func (*Meta) GetFinalizers() []string { return nil }

// SetFinalizers implements metav1.Object.
func (*Meta) SetFinalizers([]string) {}

// GetOwnerReferences implements metav1.Object.
func (*Meta) GetOwnerReferences() []metav1.OwnerReference { return nil }

// SetOwnerReferences implements metav1.Object.
func (*Meta) SetOwnerReferences([]metav1.OwnerReference) {}

// GetManagedFields implements metav1.Object.
func (*Meta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }

// SetManagedFields implements metav1.Object.
func (*Meta) SetManagedFields([]metav1.ManagedFieldsEntry) {}
