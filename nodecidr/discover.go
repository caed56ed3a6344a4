package nodecidr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
)

// ErrNotDiscovered means the cluster shows neither a kube-controller-manager
// pod nor a kubeadm-config ConfigMap (managed control planes hide both); the
// flags must be given.
var ErrNotDiscovered = errors.New("kube-controller-manager flags not found in the cluster")

// Discovered is the node IPAM configuration found in a cluster.
type Discovered struct {
	Flags cidr.ControllerManagerFlags `json:"flags"`
	// Source names where the flags were read, e.g. "pod kube-system/kube-controller-manager-cp1".
	Source string `json:"source"`
	// Warnings note disagreements, e.g. kubeadm-config saying one thing and
	// the running kube-controller-manager another.
	Warnings []string `json:"warnings,omitempty"`
}

// DiscoverControllerManagerFlags reads the node IPAM flags of the cluster:
// from the kube-controller-manager static pod (kube-system, label
// component=kube-controller-manager), which is what actually runs, else from
// kubeadm's ClusterConfiguration in ConfigMap kube-system/kubeadm-config. It
// needs list on pods and get on configmaps in kube-system; a denied read
// counts as "not found".
func DiscoverControllerManagerFlags(ctx context.Context, client kubernetes.Interface) (*Discovered, error) {
	var notes []string
	var fromPod, fromCM *Discovered
	pods, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=" + cidr.KubeControllerManager})
	switch {
	case err == nil:
		items := pods.Items
		slices.SortFunc(items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		for _, p := range items {
			for _, c := range p.Spec.Containers {
				if f, found, err := ParseControllerManagerArgs(append(slices.Clone(c.Command), c.Args...)); found {
					if err != nil {
						notes = append(notes, fmt.Sprintf("pod %s/%s: %v", p.Namespace, p.Name, err))
						continue
					}
					fromPod = &Discovered{Flags: f, Source: "pod " + p.Namespace + "/" + p.Name}
					break
				}
			}
			if fromPod != nil {
				break
			}
		}
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
		notes = append(notes, "listing kube-controller-manager pods: "+err.Error())
	default:
		return nil, fmt.Errorf("discovering kube-controller-manager flags: %w", err)
	}
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	switch {
	case err == nil:
		if text := cm.Data["ClusterConfiguration"]; text != "" {
			f, err := ParseKubeadmClusterConfiguration([]byte(text))
			if err != nil {
				notes = append(notes, "ConfigMap kube-system/kubeadm-config: "+err.Error())
			} else if f.ClusterCIDR != "" {
				fromCM = &Discovered{Flags: f, Source: "ConfigMap kube-system/kubeadm-config"}
			}
		}
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
		if !apierrors.IsNotFound(err) {
			notes = append(notes, "reading ConfigMap kube-system/kubeadm-config: "+err.Error())
		}
	default:
		return nil, fmt.Errorf("discovering kube-controller-manager flags: %w", err)
	}
	switch {
	case fromPod != nil:
		if fromCM != nil && (fromCM.Flags.ClusterCIDR != fromPod.Flags.ClusterCIDR || fromCM.Flags.NodeCIDRMaskSize != fromPod.Flags.NodeCIDRMaskSize) {
			fromPod.Warnings = append(fromPod.Warnings, fmt.Sprintf("kubeadm-config says %s but the running kube-controller-manager uses %s; the next kubeadm upgrade rewrites the manifest from kubeadm-config",
				strings.Join(fromCM.Flags.Args(), " "), strings.Join(fromPod.Flags.Args(), " ")))
		}
		return fromPod, nil
	case fromCM != nil:
		fromCM.Warnings = append(fromCM.Warnings, notes...)
		return fromCM, nil
	}
	if len(notes) > 0 {
		return nil, fmt.Errorf("%w (%s)", ErrNotDiscovered, strings.Join(notes, "; "))
	}
	return nil, ErrNotDiscovered
}

// ParseControllerManagerArgs reads the node IPAM flags from a
// kube-controller-manager command line ("--flag=value" or "--flag value").
// found reports whether any of them was present.
func ParseControllerManagerArgs(args []string) (f cidr.ControllerManagerFlags, found bool, err error) {
	var errs []error
	for i := 0; i < len(args); i++ {
		a := strings.TrimSpace(args[i])
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		next := func() string {
			if hasValue {
				return value
			}
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
				return args[i]
			}
			return ""
		}
		switch name {
		case "allocate-node-cidrs":
			v := "true"
			if hasValue {
				v = value
			}
			b, perr := strconv.ParseBool(v)
			if perr != nil {
				errs = append(errs, fmt.Errorf("--allocate-node-cidrs=%s: want true or false", v))
			}
			f.AllocateNodeCIDRs, found = b, true
		case "cluster-cidr":
			f.ClusterCIDR, found = next(), true
		case "service-cluster-ip-range":
			f.ServiceClusterIPRange, found = next(), true
		case "node-cidr-mask-size", "node-cidr-mask-size-ipv4", "node-cidr-mask-size-ipv6":
			v := next()
			n, perr := strconv.Atoi(v)
			if perr != nil {
				errs = append(errs, fmt.Errorf("--%s=%s: want a number", name, v))
			}
			found = true
			switch name {
			case "node-cidr-mask-size":
				f.NodeCIDRMaskSize = n
			case "node-cidr-mask-size-ipv4":
				f.NodeCIDRMaskSizeIPv4 = n
			default:
				f.NodeCIDRMaskSizeIPv6 = n
			}
		}
	}
	return f, found, errors.Join(errs...)
}

// kubeadmClusterConfiguration holds the few fields of kubeadm's
// ClusterConfiguration (v1beta3 or v1beta4) that decide node IPAM.
type kubeadmClusterConfiguration struct {
	Networking struct {
		PodSubnet     string `json:"podSubnet"`
		ServiceSubnet string `json:"serviceSubnet"`
	} `json:"networking"`
	ControllerManager struct {
		ExtraArgs json.RawMessage `json:"extraArgs"`
	} `json:"controllerManager"`
}

// DefaultKubeadmServiceSubnet is kubeadm's default networking.serviceSubnet.
const DefaultKubeadmServiceSubnet = "10.96.0.0/12"

// ParseKubeadmClusterConfiguration derives kube-controller-manager's node
// IPAM flags from a kubeadm ClusterConfiguration (the ClusterConfiguration key
// of ConfigMap kube-system/kubeadm-config): --allocate-node-cidrs and
// --cluster-cidr from networking.podSubnet, --service-cluster-ip-range from
// networking.serviceSubnet, and controllerManager.extraArgs (a list of
// name/value in v1beta4, a map in v1beta3) on top.
func ParseKubeadmClusterConfiguration(data []byte) (cidr.ControllerManagerFlags, error) {
	var cc kubeadmClusterConfiguration
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return cidr.ControllerManagerFlags{}, fmt.Errorf("ClusterConfiguration: %w", err)
	}
	var args []string
	if pod := strings.TrimSpace(cc.Networking.PodSubnet); pod != "" {
		args = append(args, "--allocate-node-cidrs=true", "--cluster-cidr="+pod)
	}
	svc := strings.TrimSpace(cc.Networking.ServiceSubnet)
	if svc == "" {
		svc = DefaultKubeadmServiceSubnet
	}
	args = append(args, "--service-cluster-ip-range="+svc)
	if raw := cc.ControllerManager.ExtraArgs; len(raw) > 0 && string(raw) != "null" {
		var list []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		}
		var m map[string]string
		switch {
		case json.Unmarshal(raw, &list) == nil:
			for _, a := range list {
				args = append(args, "--"+a.Name+"="+a.Value)
			}
		case json.Unmarshal(raw, &m) == nil:
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				args = append(args, "--"+k+"="+m[k])
			}
		default:
			return cidr.ControllerManagerFlags{}, fmt.Errorf("ClusterConfiguration controllerManager.extraArgs: want a list of {name, value} (v1beta4) or a map (v1beta3)")
		}
	}
	f, _, err := ParseControllerManagerArgs(args)
	return f, err
}
