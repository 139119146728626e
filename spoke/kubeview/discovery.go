package kubeview

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// discovery answers the API server's discovery documents (/api, /apis,
// and each group version's resources), so that kubectl can read a View
// too; it reports false for any other path.
func (v *View) discovery(w http.ResponseWriter, path string) bool {
	path = strings.TrimSuffix(path, "/")
	var doc any
	switch path {
	case "/api":
		doc = &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}}
	case "/apis":
		list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
		for _, r := range Resources {
			if r.GV.Group == "" || slices.ContainsFunc(list.Groups, func(g metav1.APIGroup) bool { return g.Name == r.GV.Group }) {
				continue
			}
			gv := metav1.GroupVersionForDiscovery{GroupVersion: r.GV.String(), Version: r.GV.Version}
			list.Groups = append(list.Groups, metav1.APIGroup{Name: r.GV.Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv})
		}
		doc = list
	default:
		list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}}
		for _, r := range Resources {
			if r.path() == path+"/"+r.Resource {
				list.GroupVersion = r.GV.String()
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: r.Resource, Kind: r.Kind, Namespaced: r.Namespaced, Verbs: metav1.Verbs{"get", "list", "watch"},
				})
			}
		}
		if list.GroupVersion == "" {
			return false
		}
		doc = list
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
	return true
}
