package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

const (
	// DefaultK8sVersion is the Kubernetes release the harness builds when
	// K8S_VERSION is not set.
	DefaultK8sVersion = "1.36.3"

	// K8sVersionEnv names the environment variable that selects the
	// Kubernetes release to build and run, for example "1.32.13".
	K8sVersionEnv = "K8S_VERSION"

	// KwokVersion is the sigs.k8s.io/kwok release the harness builds.
	KwokVersion = "v0.8.0"
)

// K8sVersionFromEnv returns the Kubernetes version chosen by K8S_VERSION, or
// DefaultK8sVersion when the variable is empty. The value is not validated
// here; EnsureBinaries and Start reject malformed versions.
func K8sVersionFromEnv() string {
	if v := strings.TrimSpace(os.Getenv(K8sVersionEnv)); v != "" {
		return v
	}
	return DefaultK8sVersion
}

// k8sVersion is a parsed Kubernetes release number such as 1.36.3.
type k8sVersion struct {
	major, minor, patch int
}

// parseK8sVersion accepts "1.36.3" or "v1.36.3". Pre-releases are refused
// because their staging modules do not follow the v0.<minor>.<patch> rule.
func parseK8sVersion(s string) (k8sVersion, error) {
	trimmed := strings.TrimPrefix(strings.TrimSpace(s), "v")
	parts := strings.Split(trimmed, ".")
	if len(parts) != 3 {
		return k8sVersion{}, fmt.Errorf("kubernetes version %q: want MAJOR.MINOR.PATCH such as %q", s, DefaultK8sVersion)
	}
	var nums [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || (len(p) > 1 && p[0] == '0') {
			return k8sVersion{}, fmt.Errorf("kubernetes version %q: part %q is not a plain non-negative number", s, p)
		}
		nums[i] = n
	}
	v := k8sVersion{major: nums[0], minor: nums[1], patch: nums[2]}
	if v.major != 1 || v.minor < 27 {
		return k8sVersion{}, fmt.Errorf("kubernetes version %q: the harness supports 1.27 and later", s)
	}
	return v, nil
}

// String returns the version without a leading "v", e.g. "1.36.3"; it is
// also the name of the version's cache directory.
func (v k8sVersion) String() string {
	return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
}

// tag returns the k8s.io/kubernetes module version, e.g. "v1.36.3".
func (v k8sVersion) tag() string { return "v" + v.String() }

// staging returns the version of the k8s.io/<staging> modules published
// with this release, e.g. "v0.36.3".
func (v k8sVersion) staging() string {
	return fmt.Sprintf("v0.%d.%d", v.minor, v.patch)
}
