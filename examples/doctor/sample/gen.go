//go:build ignore

// gen writes the sample cluster the doctor audits when run without
// arguments: the second field story with seed 001's cross-layer chain, as
// `kubectl get nodes,pods,services,configmaps -A -o yaml` would show it. Regenerate with `go generate ./examples/doctor` (the doctor's tests
// fail when cluster.yaml is out of date).
//
// A 300-node flannel cluster (vxlan, kube subnet manager) whose
// --cluster-cidr / --node-cidr-mask-size were changed twice: 10.244.0.0/16
// with /24, then 10.244.0.0/12 with /16, then 10.244.0.0/12 with /24. The
// last value has host bits set; kube-controller-manager reads it as
// 10.240.0.0/12. What the operators found afterwards:
//
//   - the three control-plane nodes and the first 180 workers hold
//     10.244.0.0/24 ... 10.244.182.0/24 from the first layout;
//   - four workers that joined while node IPAM was being reconfigured have no
//     podCIDR at all;
//   - later workers hold the lowest free /24s of 10.240.0.0/12, except twenty
//     that were re-registered from saved manifests still carrying older
//     workers' podCIDRs. kube-controller-manager only occupies the podCIDR a
//     node arrives with and never checks that another node holds it, so these
//     twenty duplicate an older node's subnet and their pods are unreachable.
//
// Seed 001's chain on top: worker 42's flanneld last ran with a host-gw
// config in this vxlan cluster (its backend-type annotation says host-gw),
// and kube-proxy's ConfigMap still names the first layout's 10.244.0.0/16.
// The dump also holds what the doctor reads those from: kube-flannel-cfg,
// the kube-proxy, kubelet-config and kubeadm-config ConfigMaps, the
// kube-controller-manager and kube-apiserver Pods, and the kubernetes and
// kube-dns Services.
//
// The audit must find exactly those 20 duplicates and 4 nodes without a
// podCIDR, the fix plan must move exactly those 24 nodes, and the report
// must name worker 42's backend and kube-proxy's clusterCIDR.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

const (
	controlPlanes = 3
	phase1Workers = 180
	phase2Workers = 4
	workers       = 297
	// hostGWWorker announces backend-type host-gw.
	hostGWWorker = 42
)

// The control plane's CIDR flags.
const (
	clusterCIDR = "10.244.0.0/12" // host bits set: kube-controller-manager reads 10.240.0.0/12
	serviceCIDR = "10.96.0.0/12"
)

// duplicated reports whether phase-3 worker w re-joined with an old podCIDR,
// and which phase-1 worker's subnet it carries.
func duplicated(w int) (int, bool) {
	first := phase1Workers + phase2Workers + 1 // 185
	if w < first+3 || (w-first-3)%5 != 0 {
		return 0, false
	}
	k := (w - first - 3) / 5 // 0..21
	if k >= 20 {
		return 0, false
	}
	return 7 + 9*k, true // workers 7, 16, ..., 178
}

func main() {
	out := flag.String("o", "", "output file (default stdout)")
	flag.Parse()
	start := time.Date(2023, 4, 3, 9, 0, 0, 0, time.UTC)
	list := struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Items      []any  `json:"items"`
		Metadata   struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}{APIVersion: "v1", Kind: "List"}

	podCIDR := map[string]string{}
	phase3 := 0
	add := func(name string, created time.Time, cidr string, controlPlane bool, seq int) {
		ip := fmt.Sprintf("192.168.%d.%d", 10+seq/250, 1+seq%250)
		n := corev1.Node{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{
				Name:              name,
				UID:               types.UID(fmt.Sprintf("6f1c2a7e-0000-4000-8000-%012d", seq)),
				ResourceVersion:   fmt.Sprint(1000000 + seq*17),
				CreationTimestamp: metav1.NewTime(created),
				Labels: map[string]string{
					"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
				},
				Annotations: map[string]string{
					"flannel.alpha.coreos.com/backend-type":        "vxlan",
					"flannel.alpha.coreos.com/backend-data":        fmt.Sprintf(`{"VNI":1,"VtepMAC":"ee:2f:%02x:%02x:0a:%02x"}`, seq/256, seq%256, seq%97),
					"flannel.alpha.coreos.com/kube-subnet-manager": "true",
					"flannel.alpha.coreos.com/public-ip":           ip,
				},
			},
			Spec: corev1.NodeSpec{ProviderID: "kind://docker/story2/" + name},
			Status: corev1.NodeStatus{
				Capacity:   corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: metav1.NewTime(start.AddDate(1, 0, 0)), LastTransitionTime: metav1.NewTime(created.Add(time.Minute))}},
			},
		}
		if controlPlane {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
			n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		}
		if cidr != "" {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
		}
		if name == fmt.Sprintf("k8s-worker-%03d", hostGWWorker) {
			n.Annotations["flannel.alpha.coreos.com/backend-type"] = "host-gw"
			n.Annotations["flannel.alpha.coreos.com/backend-data"] = "null"
		}
		podCIDR[name] = cidr
		list.Items = append(list.Items, n)
	}

	seq := 0
	for i := 1; i <= controlPlanes; i++ {
		seq++
		add(fmt.Sprintf("k8s-master-%d", i), start.Add(time.Duration(i)*time.Minute), fmt.Sprintf("10.244.%d.0/24", i-1), true, seq)
	}
	for w := 1; w <= workers; w++ {
		seq++
		name := fmt.Sprintf("k8s-worker-%03d", w)
		created := start.Add(time.Duration(w) * 6 * time.Hour)
		switch {
		case w <= phase1Workers:
			add(name, created, fmt.Sprintf("10.244.%d.0/24", w+controlPlanes-1), false, seq)
		case w <= phase1Workers+phase2Workers:
			add(name, created, "", false, seq)
		default:
			if old, ok := duplicated(w); ok {
				add(name, created, podCIDR[fmt.Sprintf("k8s-worker-%03d", old)], false, seq)
				continue
			}
			add(name, created, fmt.Sprintf("10.240.%d.0/24", phase3), false, seq)
			phase3++
		}
	}
	list.Items = append(list.Items, controlPlane(start)...)
	data, err := yaml.Marshal(list)
	if err != nil {
		log.Fatal(err)
	}
	header := []byte("# Generated by sample/gen.go; do not edit. The second field story with seed 001's chain: see gen.go.\n")
	data = append(header, data...)
	if *out == "" {
		os.Stdout.Write(data)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		log.Fatal(err)
	}
}

// controlPlane returns the Pods, ConfigMaps and Services the doctor reads
// the cluster's settings from.
func controlPlane(start time.Time) []any {
	meta := func(ns, name string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID("7a2d-" + ns + "-" + name), CreationTimestamp: metav1.NewTime(start)}
	}
	pod := func(component string, args ...string) corev1.Pod {
		return corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: meta("kube-system", component+"-k8s-master-1", map[string]string{"component": component, "tier": "control-plane"}),
			Spec: corev1.PodSpec{NodeName: "k8s-master-1", HostNetwork: true, Containers: []corev1.Container{{
				Name: component, Image: "registry.k8s.io/" + component + ":v1.30.4", Command: append([]string{component}, args...)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "192.168.10.2", PodIPs: []corev1.PodIP{{IP: "192.168.10.2"}}},
		}
	}
	cm := func(ns, name, key, value string) corev1.ConfigMap {
		return corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta(ns, name, nil), Data: map[string]string{key: value}}
	}
	svc := func(ns, name, ip string, labels map[string]string, port int32) corev1.Service {
		return corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta(ns, name, labels),
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip}, Ports: []corev1.ServicePort{{Name: "p", Port: port}}}}
	}
	return []any{
		pod("kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr="+clusterCIDR, "--node-cidr-mask-size=24", "--service-cluster-ip-range="+serviceCIDR),
		pod("kube-apiserver", "--advertise-address=192.168.10.2", "--service-cluster-ip-range="+serviceCIDR),
		cm("kube-flannel", "kube-flannel-cfg", "net-conf.json", `{"Network":"10.240.0.0/12","Backend":{"Type":"vxlan"}}`),
		cm("kube-system", "kube-proxy", "config.conf", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16\nmode: iptables\n"),
		cm("kube-system", "kubelet-config", "kubelet", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\n"),
		cm("kube-system", "kubeadm-config", "ClusterConfiguration", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.30.4\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: "+clusterCIDR+"\n  serviceSubnet: "+serviceCIDR+"\n"),
		svc("default", "kubernetes", "10.96.0.1", map[string]string{"component": "apiserver", "provider": "kubernetes"}, 443),
		svc("kube-system", "kube-dns", "10.96.0.10", map[string]string{"k8s-app": "kube-dns"}, 53),
	}
}
