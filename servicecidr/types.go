package servicecidr

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
)

// Group is the API group of ServiceCIDR and IPAddress.
const Group = "networking.k8s.io"

// DefaultServiceCIDRName is the ServiceCIDR kube-apiserver creates from
// --service-cluster-ip-range.
const DefaultServiceCIDRName = "kubernetes"

// Finalizer is the finalizer kube-controller-manager's service-cidr-controller
// removes once no IPAddress depends only on the ServiceCIDR.
const Finalizer = "networking.k8s.io/service-cidr-finalizer"

// Labels kube-apiserver's allocator puts on the IPAddress objects it creates.
const (
	LabelIPAddressFamily = "ipaddress.kubernetes.io/ip-family"
	LabelManagedBy       = "ipaddress.kubernetes.io/managed-by"
	// ManagedByAllocator is the LabelManagedBy value of ClusterIP IPAddresses.
	ManagedByAllocator = "ipallocator.k8s.io"
)

// APIVersion is a version of the networking.k8s.io ServiceCIDR API.
type APIVersion string

// The ServiceCIDR API versions, newest first in Versions.
const (
	V1       APIVersion = "v1"
	V1beta1  APIVersion = "v1beta1"
	V1alpha1 APIVersion = "v1alpha1"
)

// Versions lists the ServiceCIDR API versions from newest to oldest, the
// order discovery tries them in.
func Versions() []APIVersion { return []APIVersion{V1, V1beta1, V1alpha1} }

// GroupVersion returns "networking.k8s.io/<v>".
func (v APIVersion) GroupVersion() string { return Group + "/" + string(v) }

func (v APIVersion) valid() bool { return v == V1 || v == V1beta1 || v == V1alpha1 }

// Condition is the Ready condition of a ServiceCIDR.
type Condition struct {
	Status  metav1.ConditionStatus `json:"status"`
	Reason  string                 `json:"reason,omitempty"`
	Message string                 `json:"message,omitempty"`
}

// ServiceCIDR is a version-independent view of a networking.k8s.io
// ServiceCIDR (v1, v1beta1 or v1alpha1 share one schema).
type ServiceCIDR struct {
	Name string `json:"name"`
	// CIDRs is spec.cidrs: one prefix, or one per family.
	CIDRs []netip.Prefix `json:"cidrs"`
	// Ready is the Ready condition; nil when the controllers have not set it yet.
	Ready *Condition `json:"ready,omitempty"`
	// DeletionTimestamp is set once deletion was requested; the object then
	// stays (Terminating) until the finalizer is removed.
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
	Finalizers        []string          `json:"finalizers,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	UID               types.UID         `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
}

// IsReady reports whether the ServiceCIDR can hand out ClusterIPs: Ready=True
// and not being deleted.
func (s ServiceCIDR) IsReady() bool {
	return s.DeletionTimestamp == nil && s.Ready != nil && s.Ready.Status == metav1.ConditionTrue
}

// Terminating reports whether deletion was requested.
func (s ServiceCIDR) Terminating() bool { return s.DeletionTimestamp != nil }

// Contains reports whether ip lies in one of the ServiceCIDR's prefixes.
func (s ServiceCIDR) Contains(ip netip.Addr) bool {
	for _, p := range s.CIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// State is a one-word summary: Ready, NotReady, Pending (no condition yet)
// or Terminating.
func (s ServiceCIDR) State() string {
	switch {
	case s.Terminating():
		return "Terminating"
	case s.Ready == nil:
		return "Pending"
	case s.Ready.Status == metav1.ConditionTrue:
		return "Ready"
	}
	return "NotReady"
}

// ParentRef is an IPAddress's spec.parentRef.
type ParentRef struct {
	Group     string `json:"group,omitempty"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String returns resource/namespace/name.
func (r ParentRef) String() string {
	res := r.Resource
	if r.Group != "" {
		res += "." + r.Group
	}
	if r.Namespace != "" {
		return res + "/" + r.Namespace + "/" + r.Name
	}
	return res + "/" + r.Name
}

// IsService reports whether the reference points at a core Service.
func (r ParentRef) IsService() bool { return r.Group == "" && r.Resource == "services" }

// IPAddress is a version-independent view of a networking.k8s.io IPAddress:
// the allocator's record that an address belongs to an object.
type IPAddress struct {
	IP        netip.Addr `json:"ip"`
	ParentRef ParentRef  `json:"parentRef"`
	// ManagedBy is the ipaddress.kubernetes.io/managed-by label.
	ManagedBy string `json:"managedBy,omitempty"`
}

// ServerInfo is what discovery says about the API server.
type ServerInfo struct {
	// GitVersion is e.g. "v1.33.4" or "v1.30.2-eks-1234".
	GitVersion string `json:"gitVersion,omitempty"`
	// Minor is the Kubernetes 1.x minor version, 0 when it cannot be read.
	Minor int `json:"minor,omitempty"`
}

var minorDigits = regexp.MustCompile(`^[0-9]+`)
var gitMinor = regexp.MustCompile(`^v?1\.([0-9]+)(\.|$|-|\+)`)

// ParseServerVersion extracts the Kubernetes 1.x minor version from a
// discovery answer. Providers write Minor as "33+" or leave it empty, so
// GitVersion is the fallback. It returns 0 when neither can be read.
func ParseServerVersion(info *version.Info) ServerInfo {
	if info == nil {
		return ServerInfo{}
	}
	out := ServerInfo{GitVersion: info.GitVersion}
	if strings.TrimSpace(info.Major) == "1" {
		if d := minorDigits.FindString(strings.TrimSpace(info.Minor)); d != "" && len(d) <= 4 {
			if n, err := strconv.Atoi(d); err == nil {
				out.Minor = n
				return out
			}
		}
	}
	if m := gitMinor.FindStringSubmatch(strings.TrimSpace(info.GitVersion)); m != nil && len(m[1]) <= 4 {
		if n, err := strconv.Atoi(m[1]); err == nil {
			out.Minor = n
		}
	}
	return out
}

// Advice says what a cluster of the given Kubernetes 1.x minor version needs
// so that a ServiceCIDR API is served (0 means unknown).
func Advice(minor int) string {
	switch {
	case minor == 0:
		return "the Kubernetes version is unknown; ServiceCIDR is v1 and on by default from 1.33; on 1.31-1.32 set kube-apiserver " +
			"--runtime-config=networking.k8s.io/v1beta1=true and --feature-gates=MultiCIDRServiceAllocator=true (also on kube-controller-manager); " +
			"on 1.29-1.30 use --runtime-config=networking.k8s.io/v1alpha1=true with the same feature gate"
	case minor < 29:
		return fmt.Sprintf("Kubernetes 1.%d has no ServiceCIDR API; it arrived as v1alpha1 in 1.29 (networking.k8s.io/v1alpha1 with the MultiCIDRServiceAllocator feature gate): upgrade the control plane first", minor)
	case minor <= 30:
		return fmt.Sprintf("on Kubernetes 1.%d ServiceCIDR is alpha: start kube-apiserver with --feature-gates=MultiCIDRServiceAllocator=true --runtime-config=networking.k8s.io/v1alpha1=true and kube-controller-manager with --feature-gates=MultiCIDRServiceAllocator=true", minor)
	case minor <= 32:
		return fmt.Sprintf("on Kubernetes 1.%d ServiceCIDR is beta and off by default: start kube-apiserver with --feature-gates=MultiCIDRServiceAllocator=true --runtime-config=networking.k8s.io/v1beta1=true and kube-controller-manager with --feature-gates=MultiCIDRServiceAllocator=true", minor)
	}
	return fmt.Sprintf("on Kubernetes 1.%d networking.k8s.io/v1 ServiceCIDR is on by default; it has been turned off: remove networking.k8s.io/v1=false (or .../servicecidrs=false) from kube-apiserver --runtime-config, and check that discovery is not blocked by a proxy", minor)
}
