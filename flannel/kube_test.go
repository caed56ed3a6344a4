package flannel

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/kubetest"
)

// netConfYAMLText is net-conf.json as kube-flannel.yml ships it.
const netConfText = "{\n  \"Network\": \"10.244.0.0/16\",\n  \"EnableNFTables\": false,\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n"

const cniConfText = "{\n  \"name\": \"cbr0\",\n  \"cniVersion\": \"0.3.1\"\n}\n"

// newKubeFake returns a fake clientset whose reactors enforce what the API
// server enforces for this package: ConfigMap updates need the current
// resourceVersion (and bump it), server dry runs persist nothing, and
// SelfSubjectAccessReviews answer from the allowed set.
func newKubeFake(t *testing.T, allowed map[string]bool, objs ...runtime.Object) (*fake.Clientset, *int) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	updates := 0
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ua := a.(k8stesting.UpdateAction)
		cm := ua.GetObject().(*corev1.ConfigMap).DeepCopy()
		curObj, err := cs.Tracker().Get(gvr, cm.Namespace, cm.Name)
		if err != nil {
			return true, nil, err
		}
		cur := curObj.(*corev1.ConfigMap)
		if cm.ResourceVersion != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, cm.Name,
				assert.AnError)
		}
		if cm.UID != cur.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, cm.Name, assert.AnError)
		}
		rv, _ := strconv.Atoi(cur.ResourceVersion)
		cm.ResourceVersion = strconv.Itoa(rv + 1)
		if opts := ua.(k8stesting.UpdateActionImpl).GetUpdateOptions(); len(opts.DryRun) > 0 {
			return true, cm, nil
		}
		updates++
		return true, cm, cs.Tracker().Update(gvr, cm, cm.Namespace)
	})
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = allowed[ra.Verb+" "+ra.Resource+" "+ra.Namespace+"/"+ra.Name]
		return true, r, nil
	})
	return cs, &updates
}

func flannelConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultNetConfName, Namespace: DefaultNetConfNamespace, UID: "cm-uid-1", ResourceVersion: "41"},
		Data:       map[string]string{NetConfKey: netConfText, "cni-conf.json": cniConfText},
	}
}

func kubeNode(name, podCIDR string, annotations map[string]string, ip string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	}
	return n
}

func flannelAnnotations(backend, ip string) map[string]string {
	return map[string]string{
		"flannel.alpha.coreos.com/backend-type":        backend,
		"flannel.alpha.coreos.com/backend-data":        `{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}`,
		"flannel.alpha.coreos.com/public-ip":           ip,
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		"other.io/x": "y",
	}
}

var allowAll = map[string]bool{
	"get configmaps kube-flannel/kube-flannel-cfg":    true,
	"update configmaps kube-flannel/kube-flannel-cfg": true,
}

func TestReadNetConfAndNodes(t *testing.T) {
	ctx := context.Background()
	cs, _ := newKubeFake(t, allowAll, flannelConfigMap(),
		kubeNode("node-a", "10.244.1.0/24", flannelAnnotations("vxlan", "192.168.0.1"), "192.168.0.1"),
		kubeNode("node-b", "10.245.3.0/24", flannelAnnotations("host-gw", "192.168.0.2"), "192.168.0.2"),
		kubeNode("node-c", "", nil, "192.168.0.3"),
		kubeNode("node-d", "10.244.7.1/24", nil, ""),
	)
	nc, err := ReadNetConf(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	assert.Equal(t, netConfText, nc.Raw)
	assert.Equal(t, "41", nc.ResourceVersion)
	require.NotNil(t, nc.Config)
	assert.Equal(t, netip.MustParsePrefix("10.244.0.0/16"), nc.Config.Network)

	nodes, err := ReadNodes(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	require.Len(t, nodes, 4)
	assert.Equal(t, "node-a", nodes[0].Name)
	assert.True(t, nodes[0].KubeSubnetManager)
	assert.Equal(t, "vxlan", nodes[0].BackendType)
	assert.Equal(t, netip.MustParseAddr("192.168.0.1"), nodes[0].PublicIP)
	assert.Len(t, nodes[0].Annotations, 4, "only annotations under the flannel prefix")
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.244.7.0/24")}, nodes[3].PodCIDRs, "host bits dropped like net.ParseCIDR")

	rep := AuditKube(nc, nodes)
	var outside, mismatch, missing, unmanaged []string
	for _, f := range rep.Findings {
		switch f.Kind {
		case FindingPodCIDROutside:
			outside = append(outside, f.Nodes...)
			assert.Contains(t, f.Detail, `subnet "10.244.0.0/16" specified in the flannel net config doesn't contain "10.245.3.0/24" PodCIDR of the "node-b" node`)
			assert.Equal(t, cidr.SeverityError, f.Severity)
		case FindingBackendMismatch:
			mismatch = append(mismatch, f.Nodes...)
		case FindingPodCIDRMissing:
			missing = append(missing, f.Nodes...)
			assert.Contains(t, f.Detail, `node "node-c" pod cidr not assigned`)
		case FindingNotManaged:
			unmanaged = append(unmanaged, f.Nodes...)
		}
	}
	assert.Equal(t, []string{"node-b"}, outside)
	assert.Equal(t, []string{"node-b"}, mismatch)
	assert.Equal(t, []string{"node-c"}, missing)
	assert.Equal(t, []string{"node-d"}, unmanaged)

	na := NodeAddressList(nodes)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.168.0.1")}, na[0].Addrs)

	_, err = ReadNetConf(ctx, cs, KubeOptions{Namespace: "kube-system"})
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = ReadNetConf(ctx, cs, KubeOptions{Key: "net.json"})
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorContains(t, err, "cni-conf.json, net-conf.json")
}

func TestAuditKubeConfigProblems(t *testing.T) {
	nodes := []Node{{Name: "n1", PodCIDR: "10.244.1.0/24", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:99::/64")}, KubeSubnetManager: true},
		{Name: "n2", PodCIDR: "x", PodCIDRErrors: []string{"x"}, KubeSubnetManager: true}}
	rep := AuditKube(&NetConf{Namespace: "kube-flannel", Name: "kube-flannel-cfg", Key: NetConfKey, Error: "broken"}, nodes)
	require.Len(t, rep.Findings, 1)
	assert.Equal(t, FindingConfigInvalid, rep.Findings[0].Kind)

	c, err := ParseConfig([]byte(`{"Network": "10.244.0.0/16", "EnableIPv6": true, "IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "nope"}}`))
	require.NoError(t, err)
	rep = AuditKube(&NetConf{Config: c}, nodes)
	kinds := map[FindingKind]int{}
	for _, f := range rep.Findings {
		kinds[f.Kind]++
		if f.Kind == FindingPodCIDROutside {
			assert.Contains(t, f.Detail, `doesn't contain "fd00:99::/64" IPv6 PodCIDR of the "n1" node`)
		}
	}
	assert.Equal(t, map[FindingKind]int{FindingConfigInvalid: 1, FindingPodCIDROutside: 1, FindingPodCIDRInvalid: 1}, kinds)
	assert.Equal(t, `subnet "0.0.0.0/0" specified in the flannel net config doesn't contain "10.1.0.0/24" PodCIDR of the "x" node`,
		PodCIDRMessage(netip.Prefix{}, netip.MustParsePrefix("10.1.0.0/24"), "x"))
}

func TestNewAnnotationKeys(t *testing.T) {
	k, err := NewAnnotationKeys("flannel.alpha.coreos.com")
	require.NoError(t, err)
	assert.Equal(t, "flannel.alpha.coreos.com/backend-type", k.BackendType)
	k, err = NewAnnotationKeys("example.com/net")
	require.NoError(t, err)
	assert.Equal(t, "example.com/net-public-ip", k.PublicIP)
	for _, bad := range []string{"a/b/c", "NoDots", "x.y/a.b"} {
		_, err := NewAnnotationKeys(bad)
		assert.ErrorIs(t, err, ErrInvalidRequest, bad)
	}
}

func TestNetConfPlanApply(t *testing.T) {
	ctx := context.Background()
	cs, updates := newKubeFake(t, allowAll, flannelConfigMap(),
		kubeNode("node-a", "10.244.1.0/24", flannelAnnotations("vxlan", "192.168.0.1"), "192.168.0.1"),
		kubeNode("node-b", "10.20.3.0/24", flannelAnnotations("vxlan", "192.168.0.2"), "192.168.0.2"))
	nc, err := ReadNetConf(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	nodes, err := ReadNodes(ctx, cs, KubeOptions{})
	require.NoError(t, err)

	_, err = PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16"), MoveLeases: true}, nodes)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	p, err := PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16")}, nodes)
	require.NoError(t, err)
	assert.Equal(t, "{\n  \"Network\": \"10.20.0.0/16\",\n  \"EnableNFTables\": false,\n  \"Backend\": {\n    \"Type\": \"vxlan\"\n  }\n}\n", p.NewRaw,
		"only the Network value changes; formatting and other keys are kept")
	assert.Equal(t, []string{"node-a"}, p.NodesOutside)
	require.Len(t, p.Warnings, 2, "restart flanneld, and the node outside the new network")
	assert.Contains(t, p.Warnings[1], "1 node(s) have a podCIDR outside the new network")
	inside, err := PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.0.0.0/8")}, nodes)
	require.NoError(t, err)
	assert.Empty(t, inside.NodesOutside)
	assert.Len(t, inside.Warnings, 1, "every node inside the new network: only the restart")

	// Client dry run: checks, writes nothing. Server dry run: sent with dryRun=All.
	r, err := ApplyNetConf(ctx, cs, p, KubeApplyOptions{DryRun: DryRunClient})
	require.NoError(t, err)
	assert.Equal(t, OutcomeWouldApply, r.Outcome)
	r, err = ApplyNetConf(ctx, cs, p, KubeApplyOptions{DryRun: DryRunServer})
	require.NoError(t, err)
	assert.Equal(t, OutcomeWouldApply, r.Outcome)
	assert.Zero(t, *updates)

	r, err = ApplyNetConf(ctx, cs, p, KubeApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, OutcomeApplied, r.Outcome)
	assert.Equal(t, "42", r.ResourceVersion)
	cm, err := cs.CoreV1().ConfigMaps(DefaultNetConfNamespace).Get(ctx, DefaultNetConfName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, p.NewRaw, cm.Data[NetConfKey])
	assert.Equal(t, cniConfText, cm.Data["cni-conf.json"], "other keys kept")

	// Idempotent.
	r, err = ApplyNetConf(ctx, cs, p, KubeApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, OutcomeAlreadyDone, r.Outcome)
	assert.Equal(t, 1, *updates)

	// A concurrent edit between read and plan application conflicts.
	nc, err = ReadNetConf(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	p2, err := PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.30.0.0/16")}, nil)
	require.NoError(t, err)
	cm.Data["cni-conf.json"] = "{}"
	_, err = cs.CoreV1().ConfigMaps(DefaultNetConfNamespace).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = ApplyNetConf(ctx, cs, p2, KubeApplyOptions{})
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "configmap kube-flannel/kube-flannel-cfg", ce.Key)

	// The update itself is refused when another writer gets in between the
	// check and the write (the reactor enforces resourceVersion).
	nc, err = ReadNetConf(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	p3, err := PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.40.0.0/16")}, nil)
	require.NoError(t, err)
	// (No require inside the reactor: the error is kept and asserted after
	// ApplyNetConf returns, whichever goroutine the reactor ran on.)
	var otherWriter error
	cs.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, DefaultNetConfNamespace, DefaultNetConfName)
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*corev1.ConfigMap).DeepCopy()
		stale := cur.DeepCopy()
		cur.ResourceVersion = "999"
		if err := cs.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, cur, cur.Namespace); err != nil {
			otherWriter = err
			return true, nil, err
		}
		return true, stale, nil
	})
	_, err = ApplyNetConf(ctx, cs, p3, KubeApplyOptions{})
	require.NoError(t, otherWriter, "the other writer's update")
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "changed concurrently")

	// A recreated ConfigMap (new UID) makes the plan stale.
	p3.UID = "other"
	_, err = ApplyNetConf(ctx, cs, p3, KubeApplyOptions{})
	assert.ErrorIs(t, err, ErrStalePlan)
}

func TestApplyNetConfForbidden(t *testing.T) {
	ctx := context.Background()
	cs, updates := newKubeFake(t, map[string]bool{"get configmaps kube-flannel/kube-flannel-cfg": true}, flannelConfigMap())
	nc, err := ReadNetConf(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	p, err := PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16")}, nil)
	require.NoError(t, err)
	_, err = ApplyNetConf(ctx, cs, p, KubeApplyOptions{})
	assert.ErrorIs(t, err, ErrForbidden)
	assert.ErrorContains(t, err, "cannot update configmaps in namespace kube-flannel")
	assert.Zero(t, *updates)
	_, err = ApplyNetConf(ctx, cs, nil, KubeApplyOptions{})
	assert.ErrorIs(t, err, ErrInvalidRequest)
}

// TestNodeFromObjectReadsWhatFlanneldReads: the podCIDRs (spec.podCIDR when
// spec.podCIDRs is empty, never in place of a non-empty spec.podCIDRs), the
// internal and external addresses that parse (not the hostname, not a value
// that does not parse), and the public-ip and public-ipv6 annotations.
func TestNodeFromObjectReadsWhatFlanneldReads(t *testing.T) {
	keys, err := NewAnnotationKeys(DefaultAnnotationPrefix)
	require.NoError(t, err)
	mk := func(podCIDR string, podCIDRs ...string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{
				keys.PublicIP:   "192.168.0.11",
				keys.PublicIPv6: "fd00::11",
				"other/x":       "y",
			}},
			Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: podCIDRs},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: "n1"},
				{Type: corev1.NodeInternalIP, Address: "192.168.0.11"},
				{Type: corev1.NodeExternalIP, Address: "203.0.113.11"},
				{Type: corev1.NodeInternalDNS, Address: "10.9.9.9"},
				{Type: corev1.NodeInternalIP, Address: "not-an-ip"},
			}},
		}
	}

	got := NodeFromObject(mk("10.244.1.0/24"), keys)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}, got.PodCIDRs, "spec.podCIDR when spec.podCIDRs is empty")
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.168.0.11"), netip.MustParseAddr("203.0.113.11")}, got.Addresses)
	assert.Equal(t, netip.MustParseAddr("192.168.0.11"), got.PublicIP)
	assert.Equal(t, netip.MustParseAddr("fd00::11"), got.PublicIPv6)
	assert.Equal(t, map[string]string{keys.PublicIP: "192.168.0.11", keys.PublicIPv6: "fd00::11"}, got.Annotations)

	got = NodeFromObject(mk("10.244.1.0/24", "10.244.1.0/24", "fd00:10:244:1::/64"), keys)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}, got.PodCIDRs, "spec.podCIDRs, both families")

	got = NodeFromObject(mk(""), keys)
	assert.Empty(t, got.PodCIDRs, "no podCIDR at all")
	assert.Empty(t, got.PodCIDRErrors)

	got = NodeFromObject(mk("10.244.1.0/33"), keys)
	assert.Empty(t, got.PodCIDRs)
	assert.Equal(t, []string{"10.244.1.0/33"}, got.PodCIDRErrors)
}

// TestAuditKubeFindsTooManyPodCIDRsAndSharedPublicIPs: a node with three
// podCIDRs (one of them unparsable) is one flanneld refuses, and nodes that
// announce one public-ip are reported together, once, while a node with a
// public-ip of its own is not.
func TestAuditKubeFindsTooManyPodCIDRsAndSharedPublicIPs(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`))
	require.NoError(t, err)
	pfx := netip.MustParsePrefix
	ip := netip.MustParseAddr
	nodes := []Node{
		{Name: "n1", PodCIDR: "10.244.1.0/24", PodCIDRs: []netip.Prefix{pfx("10.244.1.0/24"), pfx("10.244.2.0/24")}, PodCIDRErrors: []string{"x"}, KubeSubnetManager: true, BackendType: "vxlan", PublicIP: ip("192.168.0.1")},
		{Name: "n2", PodCIDR: "10.244.3.0/24", PodCIDRs: []netip.Prefix{pfx("10.244.3.0/24")}, KubeSubnetManager: true, BackendType: "vxlan", PublicIP: ip("192.168.0.9")},
		{Name: "n3", PodCIDR: "10.244.4.0/24", PodCIDRs: []netip.Prefix{pfx("10.244.4.0/24")}, KubeSubnetManager: true, BackendType: "vxlan", PublicIP: ip("192.168.0.9")},
	}
	rep := AuditKube(&NetConf{Config: c}, nodes)
	var count, dup []Finding
	for _, f := range rep.Findings {
		switch {
		case f.Kind == FindingPodCIDRInvalid && strings.Contains(f.Detail, "podCIDRs;"):
			count = append(count, f)
		case f.Kind == FindingDuplicatePublicIP:
			dup = append(dup, f)
		}
	}
	require.Len(t, count, 1)
	assert.Equal(t, []string{"n1"}, count[0].Nodes)
	assert.Contains(t, count[0].Detail, "the node has 3 podCIDRs")
	require.Len(t, dup, 1)
	assert.Equal(t, []string{"n2", "n3"}, dup[0].Nodes)
	assert.Contains(t, dup[0].Detail, "public-ip 192.168.0.9")
}

// TestApplyNetConfTakesAndChecksTheLock: a real update takes the lock and
// checks it is still held; a lock its run lost is refused and nothing is
// written. Dry runs take no lock.
func TestApplyNetConfTakesAndChecksTheLock(t *testing.T) {
	ctx := context.Background()
	cs, updates := newKubeFake(t, allowAll, flannelConfigMap())
	nc, err := ReadNetConf(ctx, cs, KubeOptions{})
	require.NoError(t, err)
	p, err := PlanNetConf(nc, SetNetworkRequest{Network: netip.MustParsePrefix("10.20.0.0/16")}, nil)
	require.NoError(t, err)

	lost := &kubetest.Lock{ChecksLeft: 0}
	_, err = ApplyNetConf(ctx, cs, p, KubeApplyOptions{Lock: lost})
	require.ErrorIs(t, err, kubetest.ErrLockLost)
	assert.ErrorContains(t, err, "not updating ConfigMap kube-flannel/kube-flannel-cfg")
	assert.Zero(t, *updates)
	assert.False(t, lost.Held(), "released")

	r, err := ApplyNetConf(ctx, cs, p, KubeApplyOptions{Lock: &kubetest.Lock{ChecksLeft: 0}, DryRun: DryRunServer})
	require.NoError(t, err, "a dry run takes no lock")
	assert.Equal(t, OutcomeWouldApply, r.Outcome)

	held := &kubetest.Lock{ChecksLeft: 1}
	r, err = ApplyNetConf(ctx, cs, p, KubeApplyOptions{Lock: held})
	require.NoError(t, err)
	assert.Equal(t, OutcomeApplied, r.Outcome)
	assert.Equal(t, 1, *updates)
	assert.Zero(t, held.ChecksLeft, "checked once")
	assert.False(t, held.Held(), "released after the update")
}
