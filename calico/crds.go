package calico

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

//go:embed crds/*.yaml
var crdFS embed.FS

// Manifest is one embedded CustomResourceDefinition.
type Manifest struct {
	// File is the file name, e.g. "crd.projectcalico.org_ippools.yaml".
	File string
	// YAML is the apiextensions.k8s.io/v1 CustomResourceDefinition.
	YAML []byte
}

// CRDManifests returns cidrshift's structural apiextensions.k8s.io/v1 CRDs
// for the Calico resources this package uses: crd.projectcalico.org/v1
// IPPool, IPAMBlock and BlockAffinity, and (separately usable) a minimal
// operator.tigera.io/v1 Installation. Install them into a test API server
// to exercise the crd.projectcalico.org/v1 path; like Calico's own v1 CRDs
// they do not enforce Calico's validation.
func CRDManifests() []Manifest {
	entries, err := fs.ReadDir(crdFS, "crds")
	if err != nil {
		return nil
	}
	var out []Manifest
	for _, e := range entries {
		data, err := crdFS.ReadFile("crds/" + e.Name())
		if err != nil {
			continue
		}
		out = append(out, Manifest{File: e.Name(), YAML: data})
	}
	slices.SortFunc(out, func(a, b Manifest) int {
		switch {
		case a.File < b.File:
			return -1
		case a.File > b.File:
			return 1
		}
		return 0
	})
	return out
}

// CRDObjects returns CRDManifests decoded as unstructured objects, ready for
// a dynamic client's Create on
// apiextensions.k8s.io/v1 customresourcedefinitions.
func CRDObjects() ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, m := range CRDManifests() {
		var obj map[string]any
		if err := yaml.Unmarshal(m.YAML, &obj); err != nil {
			return nil, fmt.Errorf("decoding embedded CRD %s: %w", m.File, err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}
