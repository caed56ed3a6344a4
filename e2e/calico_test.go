package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/calico/calicotest"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/internal/access"
)

// The layout of FACTS.md's first story: Services in 10.233.0.0/18, pods in
// the Calico pool 10.233.64.0/18, and a new pool inside the new cluster CIDR.
const (
	calicoOldPoolName = "default-ipv4-ippool"
	calicoNewPoolName = "new-ipv4-ippool"
	calicoOldCIDR     = "10.233.64.0/18"
	calicoNewCIDR     = "10.200.0.0/16"
	calicoClusterCIDR = "10.200.0.0/16"
	calicoServiceCIDR = "10.233.0.0/18"
	calicoNodeNetwork = "192.168.10.0/24"
	// calicoMetadata is what Calico keeps in the projectcalico.org/metadata
	// annotation of a crd.projectcalico.org/v1 object: its v3 metadata.
	calicoMetadata = `{"uid":"5e0f4c7a-1d2b-4c3d-8e9f-0a1b2c3d4e5f","creationTimestamp":"2023-04-01T10:00:00Z"}`
	// calicoGuardedReplicas is the size of the Deployment a PDB guards with
	// minAvailable equal to it.
	calicoGuardedReplicas = 2
)

// calicoNodes are the nodes of the test cluster and their InternalIPs. No
// kwok: kwok's pod stage would give pods addresses from the node's podCIDR
// and fight calicotest.IPAM, so calicoKubelet plays the kubelets.
var calicoNodes = map[string]string{
	"master1": "192.168.10.1",
	"worker1": "192.168.10.11",
	"worker2": "192.168.10.12",
	"worker3": "192.168.10.13",
}

// calicoNonHostPods is how many pods with a Calico address the scenario
// starts with: coredns 2, web 3, guarded 2, db 2, agent 2 (DaemonSet on
// worker1 and worker2), bare 1.
const calicoNonHostPods = 12

var calicoCRDGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// calicoEnv is a real control plane with the Calico CRDs, an old pool, a
// stand-in for the kubelets and Calico IPAM, and the story's workloads.
type calicoEnv struct {
	c       *harness.Cluster
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	cl      calico.Cluster
	obs     *calicoObserver
	oldCIDR netip.Prefix
	newCIDR netip.Prefix

	ipamMu   sync.Mutex
	ipam     *calicotest.IPAM
	ipamStop func()
}

// startCalicoBase starts the cluster with the Calico CRDs (no pool yet), the
// stand-ins for the kubelets and Calico IPAM, and the Ready nodes.
func startCalicoBase(t *testing.T) *calicoEnv {
	t.Helper()
	c := harness.Start(t, harness.Options{
		ClusterCIDR: calicoClusterCIDR,
		ServiceCIDR: calicoServiceCIDR,
		Disable:     []harness.Component{harness.Kwok},
	})
	ctx := t.Context()
	kube, err := c.Client()
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	require.NoError(t, err)
	env := &calicoEnv{c: c, kube: kube, dyn: dyn,
		oldCIDR: netip.MustParsePrefix(calicoOldCIDR), newCIDR: netip.MustParsePrefix(calicoNewCIDR)}

	installCalicoCRDs(t, dyn)
	// Only the crd.projectcalico.org/v1 path exists here: no Calico API
	// server serves projectcalico.org/v3.
	poll(t, 30*time.Second, "discovery serves crd.projectcalico.org/v1 ippools", func(ctx context.Context) error {
		api, err := calico.ServedAPI(ctx, kube.Discovery())
		if err != nil {
			return err
		}
		if api != calico.APICRDV1 {
			return fmt.Errorf("served API is %s", api)
		}
		return nil
	})
	pools, err := calico.NewPoolStore(ctx, calico.StoreClients{Discovery: kube.Discovery(), Dynamic: dyn})
	require.NoError(t, err)
	require.Equal(t, calico.APICRDV1, pools.API())
	env.cl = calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}

	// The kubelets: node heartbeats, hostNetwork pods, pod termination.
	kl := &calicoKubelet{kube: kube, beat: map[string]time.Time{}}
	stopKubelet := calicotest.Loop(ctx, 500*time.Millisecond, func(err error) { t.Logf("fake kubelet: %v", err) }, kl.sync)
	t.Cleanup(stopKubelet)
	// Calico IPAM: pods get addresses from enabled pools only.
	env.ipam = &calicotest.IPAM{Kube: kube, Pools: pools, Dynamic: dyn, MarkReady: true}
	env.startIPAM(t)
	t.Cleanup(env.stopIPAM)

	for name := range calicoNodes {
		labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		switch name {
		case "master1":
			labels["node-role.kubernetes.io/control-plane"] = ""
			n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		case "worker1", "worker2":
			labels["e2e.cidrshift.io/agent"] = "true"
		}
		_, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err, "create node %s", name)
	}
	poll(t, 60*time.Second, "nodes Ready and schedulable", func(ctx context.Context) error {
		for name := range calicoNodes {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !calicoNodeReady(n) {
				return fmt.Errorf("node %s not Ready", name)
			}
			for _, taint := range n.Spec.Taints {
				if strings.HasPrefix(taint.Key, "node.kubernetes.io/") {
					return fmt.Errorf("node %s still has taint %s", name, taint.Key)
				}
			}
		}
		return nil
	})
	poll(t, 30*time.Second, "ServiceAccount kube-system/default", func(ctx context.Context) error {
		_, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceSystem).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	return env
}

// startCalicoEnv starts the cluster and brings the workloads up on the old
// pool.
func startCalicoEnv(t *testing.T) *calicoEnv {
	t.Helper()
	env := startCalicoBase(t)
	ctx, kube, dyn := t.Context(), env.kube, env.dyn
	// The old pool as Calico's Kubernetes datastore holds it, with the v3
	// metadata annotation and a deprecated field this package does not model.
	_, err := dyn.Resource(calico.IPPoolsV1).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": calico.IPPoolsV1.GroupVersion().String(), "kind": "IPPool",
		"metadata": map[string]any{
			"name":        calicoOldPoolName,
			"annotations": map[string]any{calico.MetadataAnnotation: calicoMetadata},
		},
		"spec": map[string]any{
			"cidr": calicoOldCIDR, "blockSize": int64(26), "ipipMode": "Never", "vxlanMode": "Always",
			"natOutgoing": true, "nodeSelector": "all()", "nat-outgoing": true,
		},
	}}, metav1.CreateOptions{})
	require.NoError(t, err, "create the old IPPool")

	env.obs = newCalicoObserver(t, kube, env.oldCIDR)
	createCalicoWorkloads(t, kube)
	poll(t, 90*time.Second, "every workload running with an address in the old pool", func(ctx context.Context) error {
		return env.podsIn(ctx, env.oldCIDR, calicoNonHostPods)
	})
	poll(t, 30*time.Second, "PodDisruptionBudget default/guarded observed", func(ctx context.Context) error {
		b, err := kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if b.Status.ObservedGeneration != b.Generation || b.Status.CurrentHealthy != calicoGuardedReplicas || b.Status.DisruptionsAllowed != 0 {
			return fmt.Errorf("status %+v", b.Status)
		}
		return nil
	})
	env.obs.guardPDB(calicoGuardedReplicas)
	return env
}

// startIPAM runs calicotest.IPAM against the API server until stopIPAM.
func (e *calicoEnv) startIPAM(t *testing.T) {
	e.ipamMu.Lock()
	defer e.ipamMu.Unlock()
	if e.ipamStop != nil {
		return
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.ipam.Run(ctx, time.Second, func(err error) {
			if !apierrors.IsConflict(err) {
				t.Logf("calicotest.IPAM: %v", err)
			}
		})
	}()
	e.ipamStop = func() { cancel(); <-done }
}

// stopIPAM stops calicotest.IPAM and waits until its last pass ended: new
// pods get no address (as when calico-node is down) until startIPAM.
func (e *calicoEnv) stopIPAM() {
	e.ipamMu.Lock()
	defer e.ipamMu.Unlock()
	if e.ipamStop != nil {
		e.ipamStop()
		e.ipamStop = nil
	}
}

// installCalicoCRDs creates calico.CRDObjects in the API server and waits
// until every one is Established.
func installCalicoCRDs(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	objs, err := calico.CRDObjects()
	require.NoError(t, err)
	var names []string
	for _, o := range objs {
		_, err := dyn.Resource(calicoCRDGVR).Create(t.Context(), o, metav1.CreateOptions{})
		require.NoError(t, err, "create CRD %s", o.GetName())
		names = append(names, o.GetName())
	}
	for _, want := range []string{"ippools.crd.projectcalico.org", "ipamblocks.crd.projectcalico.org", "blockaffinities.crd.projectcalico.org", "installations.operator.tigera.io"} {
		assert.Contains(t, names, want, "calico.CRDObjects")
	}
	poll(t, 30*time.Second, "Calico CRDs Established", func(ctx context.Context) error {
		for _, name := range names {
			u, err := dyn.Resource(calicoCRDGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			established := false
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					established = true
				}
			}
			if !established {
				return fmt.Errorf("CRD %s not Established: %v", name, conds)
			}
		}
		return nil
	})
}

func calicoNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// calicoKubelet plays the kubelets of calicoNodes: it reports every node
// Ready (with capacity and addresses) and renews that heartbeat, so the
// node lifecycle controller neither taints nor evicts; it runs hostNetwork
// pods with the node's address; and it finishes the deletion of
// terminating pods. Pod addresses and readiness of the other pods are
// calicotest.IPAM's job.
type calicoKubelet struct {
	kube kubernetes.Interface
	beat map[string]time.Time
}

func (k *calicoKubelet) sync(ctx context.Context) error {
	var errs []error
	for name, ip := range calicoNodes {
		if time.Since(k.beat[name]) < 5*time.Second {
			continue
		}
		n, err := k.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		now := metav1.Now()
		capacity := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}
		n.Status.Capacity, n.Status.Allocatable = capacity, capacity
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
		ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "e2e fake kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
		found := false
		for i, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					ready.LastTransitionTime = c.LastTransitionTime
				}
				n.Status.Conditions[i] = ready
				found = true
			}
		}
		if !found {
			n.Status.Conditions = append(n.Status.Conditions, ready)
		}
		if _, err := k.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, err)
			continue
		}
		k.beat[name] = time.Now()
	}
	pods, err := k.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		nodeIP, ok := calicoNodes[p.Spec.NodeName]
		if !ok {
			continue
		}
		switch {
		case p.DeletionTimestamp != nil:
			zero := int64(0)
			err := k.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, err)
			}
		case p.Spec.HostNetwork && p.Status.PodIP == "":
			now := metav1.Now()
			p.Status.Phase = corev1.PodRunning
			p.Status.HostIP = nodeIP
			p.Status.HostIPs = []corev1.HostIP{{IP: nodeIP}}
			p.Status.PodIP = nodeIP
			p.Status.PodIPs = []corev1.PodIP{{IP: nodeIP}}
			p.Status.StartTime = &now
			p.Status.Conditions = nil
			for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
			}
			if _, err := k.kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func calicoPodTemplate(app string, extra map[string]string) corev1.PodTemplateSpec {
	labels := map[string]string{"app": app}
	for k, v := range extra {
		labels[k] = v
	}
	zero := int64(0)
	no := false
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  &no,
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

func calicoDeployment(ns, name string, replicas int32, extraLabels map[string]string) *appsv1.Deployment {
	tpl := calicoPodTemplate(name, extraLabels)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: tpl,
		},
	}
}

// createCalicoWorkloads creates the story's workloads: cluster DNS, two
// Deployments (one guarded by a PDB that allows no disruption), a
// StatefulSet, a DaemonSet on two workers, a bare pod and a hostNetwork pod.
func createCalicoWorkloads(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	apps := kube.AppsV1()

	dns := calicoDeployment(metav1.NamespaceSystem, "coredns", 2, map[string]string{calico.DNSLabel: "kube-dns"})
	dns.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	for _, d := range []*appsv1.Deployment{
		dns,
		calicoDeployment("default", "web", 3, nil),
		calicoDeployment("default", "guarded", calicoGuardedReplicas, nil),
	} {
		_, err := apps.Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{})
		require.NoError(t, err, "create Deployment %s/%s", d.Namespace, d.Name)
	}
	minAvailable := intstr.FromInt32(calicoGuardedReplicas)
	_, err := kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "create PodDisruptionBudget default/guarded")

	two := int32(2)
	_, err = apps.StatefulSets("default").Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &two,
			ServiceName: "db",
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template:    calicoPodTemplate("db", nil),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "create StatefulSet default/db")

	agent := calicoPodTemplate("agent", nil)
	agent.Spec.NodeSelector = map[string]string{"e2e.cidrshift.io/agent": "true"}
	_, err = apps.DaemonSets("default").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: agent,
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "create DaemonSet default/agent")

	bare := calicoPodTemplate("bare", nil)
	_, err = kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default", Labels: bare.Labels}, Spec: bare.Spec,
	}, metav1.CreateOptions{})
	require.NoError(t, err, "create pod default/bare")

	host := calicoPodTemplate("hostnet", nil)
	host.Spec.HostNetwork = true
	host.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "worker3"}
	_, err = kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnet", Namespace: "default", Labels: host.Labels}, Spec: host.Spec,
	}, metav1.CreateOptions{})
	require.NoError(t, err, "create pod default/hostnet")
}

// podsIn checks that exactly want live non-hostNetwork pods exist, each
// Running and Ready with its addresses in prefix, and that the hostNetwork
// pod runs with its node's address.
func (e *calicoEnv) podsIn(ctx context.Context, prefix netip.Prefix, want int) error {
	list, err := e.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	n := 0
	var problems []string
	for _, p := range list.Items {
		if p.Spec.HostNetwork {
			if p.Status.PodIP != calicoNodes[p.Spec.NodeName] || p.Status.PodIP == "" {
				problems = append(problems, fmt.Sprintf("hostNetwork pod %s/%s has IP %q on node %q", p.Namespace, p.Name, p.Status.PodIP, p.Spec.NodeName))
			}
			continue
		}
		n++
		if p.DeletionTimestamp != nil {
			problems = append(problems, fmt.Sprintf("%s/%s terminating", p.Namespace, p.Name))
			continue
		}
		if !calicoPodReady(&p) {
			problems = append(problems, fmt.Sprintf("%s/%s not ready (%s, node %q)", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName))
			continue
		}
		in, bad := calico.PodIPsIn(p.Status.PodIP, calicoPodIPs(&p), prefix)
		if len(bad) > 0 || len(in) == 0 || len(in) != len(calicoPodIPs(&p)) {
			problems = append(problems, fmt.Sprintf("%s/%s has IPs %v, not in %s", p.Namespace, p.Name, calicoPodIPs(&p), prefix))
		}
	}
	if n != want {
		problems = append(problems, fmt.Sprintf("%d pods with a Calico address, want %d", n, want))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func calicoPodIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

func calicoPodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// calicoObserver watches the cluster while the swap runs and records what
// must never happen: the PDB-guarded Deployment below its budget, a pod
// given an address before it was scheduled, a pod created after the old
// pool was disabled getting an old address; and every restartedAt value
// each workload's template ever had.
type calicoObserver struct {
	oldCIDR netip.Prefix
	pods    cache.Store

	mu           sync.Mutex
	guardMin     int // 0: not armed yet
	guardedReady map[string]bool
	guardLowest  int
	problems     []string
	addressed    map[types.UID]bool
	beforeOff    map[types.UID]bool // pods that existed when the old pool was disabled
	restarts     map[string][]string
}

func newCalicoObserver(t *testing.T, kube kubernetes.Interface, oldCIDR netip.Prefix) *calicoObserver {
	t.Helper()
	o := &calicoObserver{oldCIDR: oldCIDR, guardedReady: map[string]bool{}, addressed: map[types.UID]bool{},
		restarts: map[string][]string{}, guardLowest: -1}
	ctx, cancel := context.WithCancel(t.Context())
	f := informers.NewSharedInformerFactory(kube, 0)
	podInf := f.Core().V1().Pods().Informer()
	o.pods = podInf.GetStore()
	_, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.pod(obj, false) },
		UpdateFunc: func(_, obj any) { o.pod(obj, false) },
		DeleteFunc: func(obj any) { o.pod(obj, true) },
	})
	require.NoError(t, err)
	for kind, inf := range map[string]cache.SharedIndexInformer{
		"Deployment":  f.Apps().V1().Deployments().Informer(),
		"StatefulSet": f.Apps().V1().StatefulSets().Informer(),
		"DaemonSet":   f.Apps().V1().DaemonSets().Informer(),
	} {
		h := func(obj any) { o.workload(kind, obj) }
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, obj any) { h(obj) }})
		require.NoError(t, err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "informer cache of %v synced", typ)
	}
	t.Cleanup(func() { cancel(); f.Shutdown() })
	return o
}

func (o *calicoObserver) pod(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	name := p.Namespace + "/" + p.Name
	if p.Namespace == "default" && p.Labels["app"] == "guarded" {
		if deleted {
			delete(o.guardedReady, p.Name)
		} else {
			o.guardedReady[p.Name] = p.DeletionTimestamp == nil && calicoPodReady(p)
		}
		if o.guardMin > 0 {
			n := 0
			for _, r := range o.guardedReady {
				if r {
					n++
				}
			}
			if o.guardLowest < 0 || n < o.guardLowest {
				o.guardLowest = n
			}
			if n < o.guardMin {
				o.problems = append(o.problems, fmt.Sprintf("Deployment default/guarded had %d ready pod(s) while its PDB required %d (at %s)", n, o.guardMin, name))
			}
		}
	}
	if deleted || p.Spec.HostNetwork || p.Status.PodIP == "" || o.addressed[p.UID] {
		return
	}
	o.addressed[p.UID] = true
	if p.Spec.NodeName == "" {
		o.problems = append(o.problems, fmt.Sprintf("pod %s got address %s before it was scheduled to a node (a CNI runs on the pod's node only)", name, p.Status.PodIP))
	}
	if o.beforeOff != nil && !o.beforeOff[p.UID] {
		if in, _ := calico.PodIPsIn(p.Status.PodIP, calicoPodIPs(p), o.oldCIDR); len(in) > 0 {
			o.problems = append(o.problems, fmt.Sprintf("pod %s, created after the old pool was disabled, got old address %v", name, in))
		}
	}
}

func (o *calicoObserver) workload(kind string, obj any) {
	var ns, name string
	var tpl corev1.PodTemplateSpec
	switch w := obj.(type) {
	case *appsv1.Deployment:
		ns, name, tpl = w.Namespace, w.Name, w.Spec.Template
	case *appsv1.StatefulSet:
		ns, name, tpl = w.Namespace, w.Name, w.Spec.Template
	case *appsv1.DaemonSet:
		ns, name, tpl = w.Namespace, w.Name, w.Spec.Template
	default:
		return
	}
	v := tpl.Annotations[calico.RestartedAtAnnotation]
	if v == "" {
		return
	}
	key := kind + "/" + ns + "/" + name
	o.mu.Lock()
	defer o.mu.Unlock()
	if !slices.Contains(o.restarts[key], v) {
		o.restarts[key] = append(o.restarts[key], v)
	}
}

// guardPDB arms (or changes) the check of the guarded Deployment's ready
// pods against the PDB's minAvailable.
func (o *calicoObserver) guardPDB(minAvailable int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.guardMin = minAvailable
}

// oldPoolDisabled records the pods that exist now: every pod created later
// must get an address from an enabled pool.
func (o *calicoObserver) oldPoolDisabled() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.beforeOff != nil {
		return
	}
	o.beforeOff = map[types.UID]bool{}
	for _, obj := range o.pods.List() {
		if p, ok := obj.(*corev1.Pod); ok {
			o.beforeOff[p.UID] = true
		}
	}
}

func (o *calicoObserver) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.problems {
		t.Error(p)
	}
	t.Logf("lowest number of ready pods of Deployment default/guarded during the swap: %d", o.guardLowest)
	assert.NotNil(t, o.beforeOff, "the old pool's disabling was never observed")
}

func (o *calicoObserver) restartValues() map[string][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][]string{}
	for k, v := range o.restarts {
		out[k] = slices.Clone(v)
	}
	return out
}

// calicoEvents collects Apply's progress events.
type calicoEvents struct {
	t   *testing.T
	obs *calicoObserver
	mu  sync.Mutex
	all []calico.Event
}

func (e *calicoEvents) add(ev calico.Event) {
	e.t.Logf("apply: [%s] %s: %s", ev.Phase, ev.Type, ev.Message)
	if ev.Type == calico.EventDisablePool {
		e.obs.oldPoolDisabled()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *calicoEvents) list() []calico.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.all)
}

func (e *calicoEvents) count(typ calico.EventType, object string) int {
	n := 0
	for _, ev := range e.list() {
		if ev.Type == typ && (object == "" || strings.HasPrefix(ev.Object, object)) {
			n++
		}
	}
	return n
}

type calicoApplyRun struct {
	done chan struct{}
	res  *calico.ApplyResult
	err  error
}

func startCalicoApply(t *testing.T, ctx context.Context, cl calico.Cluster, plan *calico.SwapPlan, opts calico.ApplyOptions) *calicoApplyRun {
	r := &calicoApplyRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.res, r.err = calico.Apply(ctx, cl, plan, opts)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("calico.Apply did not return 30s after the test ended")
		}
	})
	return r
}

func (r *calicoApplyRun) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *calicoApplyRun) wait(t *testing.T, timeout time.Duration) (*calico.ApplyResult, error) {
	t.Helper()
	select {
	case <-r.done:
		return r.res, r.err
	case <-time.After(timeout):
		t.Fatalf("calico.Apply did not return within %s", timeout)
		return nil, nil
	}
}

func (e *calicoEnv) swapRequest(move calico.MoveMethod, allowBare bool) calico.SwapRequest {
	return calico.SwapRequest{
		OldPool: calicoOldPoolName, NewName: calicoNewPoolName, NewCIDR: calicoNewCIDR,
		ClusterCIDR: calicoClusterCIDR, ServiceCIDR: calicoServiceCIDR, NodeNetwork: calicoNodeNetwork,
		Move: move, AllowDeleteBarePods: allowBare,
	}
}

func (e *calicoEnv) getPoolObject(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := e.dyn.Resource(calico.IPPoolsV1).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err, "get IPPool %s", name)
	return u
}

// checkEndState asserts the swap's end state: the old pool is gone, Verify
// finds nothing left, every pod with a Calico address is in the new pool,
// the IPAM blocks of the new pool hold them, the hostNetwork pod was left
// alone, and the new pool is a copy of the old one's settings without its
// Calico metadata.
func (e *calicoEnv) checkEndState(t *testing.T, wantPods int, hostnetUID types.UID) {
	t.Helper()
	ctx := t.Context()
	_, err := e.cl.Pools.Get(ctx, calicoOldPoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "old pool deleted")
	v, err := calico.Verify(ctx, e.cl, calico.VerifyTarget{OldPool: calicoOldPoolName, OldCIDR: e.oldCIDR, NewPool: calicoNewPoolName})
	require.NoError(t, err)
	assert.True(t, v.Clear(), "Verify: %s", v.Summary())
	assert.False(t, v.OldPoolExists)
	assert.True(t, v.NewPoolEnabled)
	poll(t, 60*time.Second, "every pod running with an address in the new pool", func(ctx context.Context) error {
		return e.podsIn(ctx, e.newCIDR, wantPods)
	})
	poll(t, 30*time.Second, "IPAM blocks of the new pool hold every pod", func(ctx context.Context) error {
		r, err := calico.ReportBlocks(ctx, e.cl.Blocks, e.newCIDR)
		if err != nil {
			return err
		}
		if !r.Available || r.PodAllocations != wantPods {
			return fmt.Errorf("%d pod allocations in %d block(s), want %d", r.PodAllocations, len(r.Blocks), wantPods)
		}
		return nil
	})
	host, err := e.kube.CoreV1().Pods("default").Get(ctx, "hostnet", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, hostnetUID, host.UID, "hostNetwork pod untouched")
	assert.Equal(t, calicoNodes["worker3"], host.Status.PodIP)

	np := e.getPoolObject(t, calicoNewPoolName)
	assert.NotContains(t, np.GetAnnotations(), calico.MetadataAnnotation, "new pool must not carry the old pool's Calico metadata")
	p, err := calico.PoolFromUnstructured(np.Object)
	require.NoError(t, err)
	assert.Equal(t, calico.PoolSpec{CIDR: calicoNewCIDR, BlockSize: 26, IPIPMode: calico.EncapNever, VXLANMode: calico.EncapAlways,
		NATOutgoing: true, NodeSelector: "all()"}, p.Spec, "new pool copies the old pool's settings")
	e.obs.check(t)
}

// checkOldPoolDisabledKeepingMetadata asserts the old pool's update by the
// swap on the crd.projectcalico.org/v1 path: disabled, Calico's v3 metadata
// annotation kept byte for byte, the field cidrshift does not model kept.
func (e *calicoEnv) checkOldPoolDisabledKeepingMetadata(t *testing.T) {
	t.Helper()
	old := e.getPoolObject(t, calicoOldPoolName)
	assert.Equal(t, calicoMetadata, old.GetAnnotations()[calico.MetadataAnnotation], "projectcalico.org/metadata kept on the old pool's update")
	disabled, _, _ := unstructured.NestedBool(old.Object, "spec", "disabled")
	assert.True(t, disabled, "old pool disabled")
	natOld, found, _ := unstructured.NestedBool(old.Object, "spec", "nat-outgoing")
	assert.True(t, found && natOld, "deprecated spec.nat-outgoing kept")
	vx, _, _ := unstructured.NestedString(old.Object, "spec", "vxlanMode")
	assert.Equal(t, "Always", vx)
}

func (e *calicoEnv) podUID(t *testing.T, ns, name string) types.UID {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p.UID
}

// TestCalicoPoolSwapEvictWithPDB runs FACTS.md's first story's pool swap on
// a real control plane through crd.projectcalico.org/v1, moving pods with
// the Eviction API: cluster DNS first, a PodDisruptionBudget that allows no
// disruption holds the swap (which says what it waits for) until it is
// relaxed, the bare pod stops the old pool's deletion until consent is
// given, and the old pool is deleted only when nothing is left on it.
func TestCalicoPoolSwapEvictWithPDB(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	env := startCalicoEnv(t)
	ctx := t.Context()
	hostnetUID := env.podUID(t, "default", "hostnet")
	guardedBefore := env.podNames(t, "default", "app=guarded")

	plan, err := calico.Plan(ctx, env.cl, env.swapRequest(calico.MoveEvict, false))
	require.NoError(t, err)
	assert.Equal(t, calico.APICRDV1, plan.API)
	assert.Equal(t, 1, plan.HostNetworkPods, "hostNetwork pod skipped")
	assert.False(t, plan.Operator.Installed, "no Installation: the operator does not manage the pool")
	require.NotEmpty(t, plan.Workloads)
	assert.True(t, plan.Workloads[0].DNS, "cluster DNS moves first")
	assert.Equal(t, calico.WorkloadRef{Kind: calico.KindDeployment, Namespace: metav1.NamespaceSystem, Name: "coredns"},
		calico.WorkloadRef{Kind: plan.Workloads[0].Workload.Kind, Namespace: plan.Workloads[0].Workload.Namespace, Name: plan.Workloads[0].Workload.Name})
	movedPods := 0
	for _, w := range plan.Workloads {
		assert.Equal(t, calico.MoveEvict, w.Method, "%s", w.Workload)
		assert.NotEqual(t, calico.KindBare, w.Workload.Kind, "no bare pod is moved without consent")
		movedPods += len(w.Pods)
	}
	assert.Equal(t, calicoNonHostPods-1, movedPods)
	require.Len(t, plan.Blocked, 1, "the bare pod is blocked without consent")
	assert.Equal(t, "default/bare", plan.Blocked[0].Pod.String())
	assert.Contains(t, plan.Blocked[0].Reason, "bare pod")
	assert.NotContains(t, plan.NewPool.Annotations, calico.MetadataAnnotation)

	env.checkPreflightRefusesReader(t, plan)

	events := &calicoEvents{t: t, obs: env.obs}
	journalDir := t.TempDir()
	opts := calico.ApplyOptions{
		JournalDir: journalDir, OnEvent: events.add, WritesPerSecond: 20,
		PollInterval: 200 * time.Millisecond, EvictionBackoff: 200 * time.Millisecond, MaxEvictionBackoff: time.Second,
		DrainTimeout: 30 * time.Second, PodGoneTimeout: time.Minute,
	}
	run := startCalicoApply(t, ctx, env.cl, plan, opts)

	// The PDB allows no disruption: the swap keeps asking and says which
	// budget it waits for.
	poll(t, 90*time.Second, "the swap reports the PDB it waits for", func(context.Context) error {
		if run.finished() {
			t.Fatalf("Apply returned while the PDB allows no disruption: %v", run.err)
		}
		if n := events.count(calico.EventEvictBlocked, "Pod default/guarded-"); n < 2 {
			return fmt.Errorf("%d blocked eviction events so far", n)
		}
		return nil
	})
	var blocked calico.Event
	for _, ev := range events.list() {
		if ev.Type == calico.EventEvictBlocked {
			blocked = ev
		}
	}
	require.NotNil(t, blocked.PDB, "blocked event names the budget: %+v", blocked)
	assert.Equal(t, calico.PDBStatus{Namespace: "default", Name: "guarded", DisruptionsAllowed: 0,
		CurrentHealthy: calicoGuardedReplicas, DesiredHealthy: calicoGuardedReplicas, ExpectedPods: calicoGuardedReplicas}, *blocked.PDB)
	assert.Contains(t, blocked.Message, "PodDisruptionBudget default/guarded allows 0 disruption(s)")
	assert.Equal(t, guardedBefore, env.podNames(t, "default", "app=guarded"), "no guarded pod was evicted while the PDB forbids it")
	env.checkOldPoolDisabledKeepingMetadata(t)
	// DNS moved first: both coredns pods were evicted before any other.
	var evicted []string
	for _, ev := range events.list() {
		if ev.Type == calico.EventEvict {
			evicted = append(evicted, ev.Object)
		}
	}
	require.GreaterOrEqual(t, len(evicted), 2, "evictions so far: %v", evicted)
	for i, obj := range evicted {
		assert.Equal(t, i < 2, strings.HasPrefix(obj, "Pod kube-system/coredns-"), "eviction #%d: %s (DNS first)", i+1, obj)
	}

	// Relax the budget: the swap goes on, one guarded pod at a time.
	env.obs.guardPDB(calicoGuardedReplicas - 1)
	_, err = env.kube.PolicyV1().PodDisruptionBudgets("default").Patch(ctx, "guarded", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"spec":{"minAvailable":%d}}`, calicoGuardedReplicas-1)), metav1.PatchOptions{})
	require.NoError(t, err)

	// Without consent the bare pod stays on the old pool, so the old pool
	// is not deleted.
	res, err := run.wait(t, 2*time.Minute)
	require.Error(t, err, "the bare pod is left on the old pool")
	assert.ErrorIs(t, err, calico.ErrLeftovers)
	require.NotNil(t, res)
	assert.False(t, res.Done)
	assert.False(t, res.OldPoolDeleted)
	assert.True(t, res.CreatedPool)
	assert.True(t, res.DisabledPool)
	require.Len(t, res.Blocked, 1)
	assert.Equal(t, "default/bare", res.Blocked[0].Pod.String())
	assert.Len(t, res.Evicted, calicoNonHostPods-1)
	require.NotNil(t, res.Verify)
	require.Len(t, res.Verify.PodsLeft, 1, "Verify: %s", res.Verify.Summary())
	assert.Equal(t, "default/bare", res.Verify.PodsLeft[0].String())
	env.checkOldPoolDisabledKeepingMetadata(t)
	bare, err := env.kube.CoreV1().Pods("default").Get(ctx, "bare", metav1.GetOptions{})
	require.NoError(t, err, "the bare pod still exists")
	assert.Nil(t, bare.DeletionTimestamp)

	// With consent, a reviewed plan (through YAML) resumes the same swap.
	plan2, err := calico.Plan(ctx, env.cl, env.swapRequest(calico.MoveEvict, true))
	require.NoError(t, err)
	assert.Equal(t, plan.ID, plan2.ID, "the same swap")
	assert.Empty(t, plan2.Blocked)
	require.Len(t, plan2.Workloads, 1)
	assert.Equal(t, calico.MoveDelete, plan2.Workloads[0].Method)
	data, err := yaml.Marshal(plan2)
	require.NoError(t, err)
	var reviewed calico.SwapPlan
	require.NoError(t, yaml.UnmarshalStrict(data, &reviewed))
	res, err = startCalicoApply(t, ctx, env.cl, &reviewed, opts).wait(t, 2*time.Minute)
	require.NoError(t, err)
	assert.True(t, res.Resumed)
	assert.True(t, res.Done)
	assert.True(t, res.OldPoolDeleted)
	require.Len(t, res.Evicted, 1)
	assert.Equal(t, "default/bare", res.Evicted[0].String())
	require.NotNil(t, res.Verify)
	assert.True(t, res.Verify.Clear(), "deleted only when clear: %s", res.Verify.Summary())
	_, err = env.kube.CoreV1().Pods("default").Get(ctx, "bare", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "bare pod deleted with consent, got %v", err)

	// Applying the finished swap again does nothing.
	res, err = startCalicoApply(t, ctx, env.cl, &reviewed, opts).wait(t, time.Minute)
	require.NoError(t, err)
	assert.True(t, res.Done)
	assert.Empty(t, res.Evicted)

	env.checkEndState(t, calicoNonHostPods-1, hostnetUID)
}

// checkPreflightRefusesReader applies the plan as a user who may read
// everything the swap reads but write nothing: the RBAC preflight (real
// SelfSubjectAccessReviews) names the missing permissions and nothing
// changes.
func (e *calicoEnv) checkPreflightRefusesReader(t *testing.T, plan *calico.SwapPlan) {
	t.Helper()
	ctx := t.Context()
	read := []string{"get", "list", "watch"}
	_, err := e.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-calico-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{calico.CRDGroup}, Resources: []string{"ippools", "ipamblocks", "blockaffinities"}, Verbs: read},
			{APIGroups: []string{"operator.tigera.io"}, Resources: []string{"installations"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: read},
			{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "deployments", "statefulsets", "daemonsets"}, Verbs: read},
			{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: read},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-calico-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-calico-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "calico-reader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg, err := e.c.UserConfig("calico-reader")
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	cl := calico.Cluster{Kube: kube, Pools: calico.NewCRDStore(dyn), Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}
	poll(t, 30*time.Second, "user calico-reader reads the old pool", func(ctx context.Context) error {
		_, err := cl.Pools.Get(ctx, calicoOldPoolName)
		return err
	})
	res, err := calico.Apply(ctx, cl, plan, calico.ApplyOptions{JournalDir: t.TempDir()})
	require.Error(t, err, "a read-only user cannot swap pools")
	assert.ErrorIs(t, err, access.ErrDenied)
	var denied *access.DeniedError
	require.ErrorAs(t, err, &denied)
	for _, want := range []access.Check{
		{Verb: "create", Group: calico.CRDGroup, Resource: "ippools"},
		{Verb: "update", Group: calico.CRDGroup, Resource: "ippools"},
		{Verb: "delete", Group: calico.CRDGroup, Resource: "ippools"},
		{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: metav1.NamespaceSystem},
		{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"},
	} {
		assert.Contains(t, denied.Denied, want, "denied permissions")
	}
	for _, c := range denied.Denied {
		assert.NotContains(t, read, c.Verb, "read permission %s reported missing", c)
	}
	require.NotNil(t, res)
	assert.False(t, res.CreatedPool)
	old, err := e.cl.Pools.Get(ctx, calicoOldPoolName)
	require.NoError(t, err)
	assert.Equal(t, plan.OldPool.ResourceVersion, old.ResourceVersion, "old pool untouched")
	_, err = e.cl.Pools.Get(ctx, calicoNewPoolName)
	assert.ErrorIs(t, err, calico.ErrPoolNotFound, "new pool not created")
}

func (e *calicoEnv) podNames(t *testing.T, ns, selector string) []string {
	t.Helper()
	list, err := e.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name+"/"+string(p.UID))
	}
	slices.Sort(out)
	return out
}

// TestCalicoPoolSwapKillAndResume runs the swap with rolling restarts
// through the examples/calicopoolswap binary, SIGKILLs it right after it
// restarted a Deployment, and runs it again with the same journal while
// that rollout is still under way: the second run finishes the interrupted
// rollout with the restartedAt value journaled by the first, does not touch
// the workloads the first one finished, and ends in the same state as an
// uninterrupted swap. No workload is restarted twice.
func TestCalicoPoolSwapKillAndResume(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "calicopoolswap")
	built := make(chan error, 1)
	go func() {
		cmd := exec.Command("go", "build", "-o", bin, "github.com/cidrshift/cidrshift/examples/calicopoolswap")
		cmd.Dir = ".." // the root module
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build examples/calicopoolswap: %w: %s", err, out)
		}
		built <- err
	}()
	env := startCalicoEnv(t)
	ctx := t.Context()
	require.NoError(t, <-built)
	hostnetUID := env.podUID(t, "default", "hostnet")

	journalDir := filepath.Join(t.TempDir(), "journal")
	args := []string{"apply", "--apply", "--kubeconfig", env.c.AdminKubeconfig(),
		"--old-pool", calicoOldPoolName, "--new-cidr", calicoNewCIDR, "--new-name", calicoNewPoolName,
		"--cluster-cidr", calicoClusterCIDR, "--service-cidr", calicoServiceCIDR, "--node-network", calicoNodeNetwork,
		"--allow-delete-bare-pods", "--journal", journalDir}
	const guardedRestart = "] rollout restart Deployment default/guarded"

	// First run: SIGKILL as soon as the guarded Deployment's restart is
	// written. IPAM stops at the same moment (calico-node down), so that
	// rollout cannot finish before the second run looks at it.
	out1, state := runCalicoSwapBinary(t, ctx, bin, args, env.obs, func(line string) bool {
		if strings.Contains(line, guardedRestart) {
			env.stopIPAM()
			return true
		}
		return false
	})
	require.Equal(t, "killed", state, "first run: want SIGKILL mid-move, output:\n%s", out1)
	var restartLines []string
	for _, l := range strings.Split(out1, "\n") {
		if strings.Contains(l, "] rollout restart ") {
			restartLines = append(restartLines, l)
		}
	}
	require.NotEmpty(t, restartLines)
	assert.Contains(t, restartLines[0], "] rollout restart Deployment kube-system/coredns", "cluster DNS restarted first")
	entries, err := os.ReadDir(journalDir)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "the journal holds the killed run's progress")
	env.checkOldPoolDisabledKeepingMetadata(t)
	var before map[string][]string
	poll(t, 10*time.Second, "guarded's restart seen", func(context.Context) error {
		before = env.obs.restartValues()
		if len(before["Deployment/default/guarded"]) == 0 {
			return fmt.Errorf("restartedAt values seen: %v", before)
		}
		return nil
	})
	require.Len(t, before["Deployment/default/guarded"], 1, "guarded restarted before the kill")
	assert.Empty(t, before["Deployment/default/web"], "web not restarted yet: the kill was mid-move")
	assert.Empty(t, before["StatefulSet/default/db"], "db not restarted yet: the kill was mid-move")
	scan, err := calico.ScanPods(ctx, env.kube, env.oldCIDR, calico.ScanOptions{Namespace: "default"})
	require.NoError(t, err)
	guardedLeft := 0
	for _, p := range scan.Pods {
		if p.Owner.Name == "guarded" {
			guardedLeft++
		}
	}
	require.NotZero(t, guardedLeft, "the guarded rollout was interrupted with pods left on the old pool")

	// Second run, same flags and journal: it resumes, rolls guarded again
	// with the journaled value (IPAM comes back once it did), and finishes.
	out2, state := runCalicoSwapBinary(t, ctx, bin, args, env.obs, func(line string) bool {
		if strings.Contains(line, guardedRestart) {
			env.startIPAM(t)
		}
		return false
	})
	env.startIPAM(t)
	require.Equal(t, "exit 0", state, "second run output:\n%s", out2)
	assert.Contains(t, out2, "resuming swap "+calicoOldPoolName+"-to-"+calicoNewPoolName)
	assert.Contains(t, out2, guardedRestart, "the interrupted rollout is resumed")
	assert.Contains(t, out2, "rollout of Deployment default/guarded complete")
	assert.Contains(t, out2, "Result: done")
	for _, done := range []string{"Deployment kube-system/coredns", "DaemonSet default/agent"} {
		assert.NotContains(t, out2, "] rollout restart "+done, "finished workloads are not restarted again")
	}

	// Exactly one restartedAt value per workload, ever: the interrupted
	// rollout was resumed with the value written before the kill.
	rolled := []string{"Deployment/kube-system/coredns", "DaemonSet/default/agent", "Deployment/default/guarded", "Deployment/default/web", "StatefulSet/default/db"}
	var after map[string][]string
	poll(t, 10*time.Second, "every restart seen", func(context.Context) error {
		after = env.obs.restartValues()
		for _, key := range rolled {
			if len(after[key]) == 0 {
				return fmt.Errorf("no restartedAt seen on %s yet", key)
			}
		}
		return nil
	})
	for _, key := range rolled {
		assert.Len(t, after[key], 1, "restartedAt values of %s: %v", key, after[key])
	}
	assert.Equal(t, before["Deployment/default/guarded"], after["Deployment/default/guarded"])
	assert.Len(t, after, 5, "restarted workloads: %v", after)
	for _, d := range []struct{ ns, name string }{{metav1.NamespaceSystem, "coredns"}, {"default", "web"}, {"default", "guarded"}} {
		dep, err := env.kube.AppsV1().Deployments(d.ns).Get(ctx, d.name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.EqualValues(t, 2, dep.Generation, "Deployment %s/%s changed once", d.ns, d.name)
	}

	// The binary's own verify agrees.
	verify := exec.CommandContext(ctx, bin, "verify", "--kubeconfig", env.c.AdminKubeconfig(),
		"--old-pool", calicoOldPoolName, "--old-cidr", calicoOldCIDR, "--new-name", calicoNewPoolName)
	vout, err := verify.CombinedOutput()
	assert.NoError(t, err, "calicopoolswap verify: %s", vout)

	// The bare pod was deleted with consent (--allow-delete-bare-pods).
	_, err = env.kube.CoreV1().Pods("default").Get(ctx, "bare", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "bare pod deleted with consent, got %v", err)
	env.checkEndState(t, calicoNonHostPods-1, hostnetUID)

	// Running the same command once more (a retried job, or a run killed
	// after the old pool's deletion but before the journal said done) must
	// find the swap complete, not fail.
	out3, state := runCalicoSwapBinary(t, ctx, bin, args, env.obs, func(string) bool { return false })
	assert.Equal(t, "exit 0", state, "re-running the finished swap with the same flags and journal; output:\n%s", out3)
}

// runCalicoSwapBinary runs the calicopoolswap binary, logging its output
// and passing each line to onLine; when onLine returns true the process is
// SIGKILLed. It returns the output and "killed" or "exit N".
func runCalicoSwapBinary(t *testing.T, ctx context.Context, bin string, args []string, obs *calicoObserver, onLine func(string) bool) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var out strings.Builder
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		t.Logf("calicopoolswap: %s", line)
		out.WriteString(line + "\n")
		if strings.Contains(line, "] disable IPPool ") {
			obs.oldPoolDisabled()
		}
		if !killed && onLine(line) {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
		}
	}
	err = cmd.Wait()
	if s := stderr.String(); s != "" {
		t.Logf("calicopoolswap stderr: %s", s)
		out.WriteString(s)
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return out.String(), "exit 0"
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && killed {
			return out.String(), "killed"
		}
		return out.String(), fmt.Sprintf("exit %d", exitErr.ExitCode())
	}
	t.Fatalf("running calicopoolswap: %v", err)
	return "", ""
}

// TestCalicoIPAMWaitsForScheduling checks calicotest.IPAM, the stand-in for
// Calico's CNI and IPAM the swap tests rely on, on a real API server: a CNI
// runs on the pod's node, so a pod gets an address only once it is bound to
// a node, and then from an enabled pool, in a block affine to that node.
func TestCalicoIPAMWaitsForScheduling(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	c := harness.Start(t, harness.Options{
		Disable: []harness.Component{harness.ControllerManager, harness.Scheduler, harness.Kwok},
	})
	ctx := t.Context()
	kube, err := c.Client()
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	require.NoError(t, err)
	installCalicoCRDs(t, dyn)
	pools := calico.NewCRDStore(dyn)
	for name, spec := range map[string]map[string]any{
		"a-disabled": {"cidr": "10.233.64.0/18", "blockSize": int64(26), "disabled": true},
		"b-enabled":  {"cidr": calicoNewCIDR, "blockSize": int64(26)},
	} {
		_, err := dyn.Resource(calico.IPPoolsV1).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": calico.IPPoolsV1.GroupVersion().String(), "kind": "IPPool",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}, metav1.CreateOptions{})
		require.NoError(t, err, "create IPPool %s", name)
	}
	_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// No kube-controller-manager: make the ServiceAccount pods need.
	_, err = kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	tpl := calicoPodTemplate("pending", nil)
	_, err = kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "default", Labels: tpl.Labels}, Spec: tpl.Spec}, metav1.CreateOptions{})
	require.NoError(t, err)

	ipam := &calicotest.IPAM{Kube: kube, Pools: pools, Dynamic: dyn, MarkReady: true}
	require.NoError(t, ipam.Sync(ctx))
	p, err := kube.CoreV1().Pods("default").Get(ctx, "pending", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, p.Status.PodIP, "calicotest.IPAM gave pod default/pending, not scheduled to any node, address %q (phase %s): "+
		"a CNI only runs once the pod is bound to a node, so the address must wait for spec.nodeName", p.Status.PodIP, p.Status.Phase)
	assert.NotEqual(t, corev1.PodRunning, p.Status.Phase, "an unscheduled pod cannot be Running")

	require.NoError(t, kube.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "default"},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "worker1"},
	}, metav1.CreateOptions{}))
	require.NoError(t, ipam.Sync(ctx))
	p, err = kube.CoreV1().Pods("default").Get(ctx, "pending", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "worker1", p.Spec.NodeName)
	ip, err := netip.ParseAddr(p.Status.PodIP)
	require.NoError(t, err, "address of the bound pod")
	assert.True(t, netip.MustParsePrefix(calicoNewCIDR).Contains(ip), "address %s from the enabled pool only", ip)
	assert.True(t, calicoPodReady(p), "MarkReady: Running and Ready")
	r, err := calico.ReportBlocks(ctx, calico.NewCRDBlockSource(dyn), netip.MustParsePrefix(calicoNewCIDR))
	require.NoError(t, err)
	require.Len(t, r.Blocks, 1)
	assert.Equal(t, "worker1", r.Blocks[0].Node, "block affine to the pod's node")
	assert.Equal(t, 1, r.PodAllocations)
}
