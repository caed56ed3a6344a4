package migrate

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
	"github.com/cidrshift/cidrshift/nodenet"
)

func publishedRequest(t *testing.T, srv *nodecidrtest.Server, node string) HostRequest {
	t.Helper()
	n, ok := srv.Node(node)
	require.True(t, ok)
	var req HostRequest
	require.NoError(t, json.Unmarshal([]byte(n.Annotations[HostWantAnnotation]), &req))
	return req
}

// Requests published at once for one node (the wants of nodes moving
// together) each get a generation of their own, and the last write holds
// the last generation: the write is conditional on the Node's
// resourceVersion (nodecidrtest answers 409 like kube-apiserver).
func TestHostAgentsConcurrentPublishesGetAGenerationEach(t *testing.T) {
	cs, srv := nodecidrtest.New(agentNode("w1"))
	h := &HostAgents{Kube: cs}
	const n = 16
	gens := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w := agentWant("w1")
			w.PodCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
			gens[i], errs[i] = h.Publish(t.Context(), w)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	got := slices.Sorted(slices.Values(gens))
	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i + 1)
	}
	assert.Equal(t, want, got, "one generation per request, none lost or shared")
	last := publishedRequest(t, srv, "w1")
	assert.Equal(t, int64(n), last.Generation)
	i := slices.Index(gens, int64(n))
	assert.Equal(t, fmt.Sprintf("10.244.%d.0/24", i), last.Want.PodCIDR.String(), "the annotation holds the request that got the last generation")
}

// A request that loses the race to another writer is published again on
// top of it, as the next generation: the patch carries the resourceVersion
// Publish read, and a 409 makes it read again.
func TestHostAgentsPublishAgainAfterAConflict(t *testing.T) {
	cs, srv := nodecidrtest.New(agentNode("w1"))
	other := agentWant("w1")
	other.PodCIDR = netip.MustParsePrefix("10.244.99.0/24")
	var patches []string
	raced := false
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches = append(patches, string(a.(k8stesting.PatchAction).GetPatch()))
		if raced {
			return false, nil, nil
		}
		raced = true
		// Another writer publishes between Publish's read and its write.
		req, _ := json.Marshal(HostRequest{Generation: 1, Want: other})
		p, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{HostWantAnnotation: string(req)}}})
		_, _, err := srv.Handle(k8stesting.NewPatchAction(corev1.SchemeGroupVersion.WithResource("nodes"), "", "w1", types.MergePatchType, p))
		return false, nil, err
	})
	h := &HostAgents{Kube: cs}
	gen, err := h.Publish(t.Context(), agentWant("w1"))
	require.NoError(t, err)
	assert.Equal(t, int64(2), gen, "published on top of the other writer's generation 1")
	req := publishedRequest(t, srv, "w1")
	assert.Equal(t, HostRequest{Generation: 2, Want: agentWant("w1")}, req)
	require.Len(t, patches, 2, "ours refused, ours again (the other writer's goes around the reactors)")
	assert.Contains(t, patches[0], `"resourceVersion":"1"`, "the write is conditional on what Publish read")
	assert.Contains(t, patches[1], `"resourceVersion":"2"`, "read again after the 409")
}

// Wait ends at a report on its generation or a later one (a later request
// supersedes it: the agent carries out the last it reads), never at an
// earlier one.
func TestHostAgentsWaitTakesALaterGenerationNotAnEarlierOne(t *testing.T) {
	cs, _ := nodecidrtest.New(agentNode("w1"))
	st, _ := json.Marshal(HostStatus{Generation: 3, Phase: HostConverged})
	now := metav1.NewMicroTime(time.Now())
	_, err := cs.CoordinationV1().Leases(DefaultAgentNamespace).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: AgentLeasePrefix + "w1", Namespace: DefaultAgentNamespace, Annotations: map[string]string{HostStatusAnnotation: string(st)}},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &now}}, metav1.CreateOptions{})
	require.NoError(t, err)
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: 100 * time.Millisecond}
	got, err := h.Wait(t.Context(), "w1", 2)
	require.NoError(t, err)
	assert.Equal(t, int64(3), got.Generation)
	got, err = h.Wait(t.Context(), "w1", 3)
	require.NoError(t, err)
	assert.Equal(t, int64(3), got.Generation)
	_, err = h.Wait(t.Context(), "w1", 4)
	require.ErrorIs(t, err, ErrHostAgent)
	assert.Contains(t, err.Error(), "node w1: no report on generation 4 within 100ms (report for generation 3)")
}

// A node about to move (its standby set) is listed with its next podCIDR
// in every want computed until it holds it, so a want published for a
// node moving at the same time keeps the standby in place.
func TestFlannelStandbyStaysInTheWantsUntilTheNodeMoved(t *testing.T) {
	node := func(name, pc, mac string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
				"flannel.alpha.coreos.com/backend-data": `{"VNI":1,"VtepMAC":"` + mac + `"}`,
				"flannel.alpha.coreos.com/public-ip":    "192.0.2." + strings.TrimPrefix(name, "w"),
			}},
			Spec: corev1.NodeSpec{PodCIDR: pc, PodCIDRs: []string{pc}},
		}
	}
	cs, srv := nodecidrtest.New(node("w1", "10.244.1.0/24", "6e:00:00:00:00:01"), node("w2", "10.244.2.0/24", "6e:00:00:00:00:02"))
	net := netip.MustParsePrefix("10.244.0.0/16")
	m := &FlannelPodCIDRMigration{o: FlannelPodCIDROptions{Kube: cs}, from: net, to: net}
	next := netip.MustParsePrefix("10.244.7.0/24")
	m.standby = map[string]netip.Prefix{"w2": next}
	peerOf := func(ws []nodenet.Want, in, name string) nodenet.Peer {
		for _, w := range ws {
			for _, p := range w.Peers {
				if w.Node == in && p.Name == name {
					return p
				}
			}
		}
		return nodenet.Peer{}
	}
	wants, err := m.HostWants(t.Context())
	require.NoError(t, err)
	assert.Equal(t, next, peerOf(wants, "w1", "w2").NextPodCIDR, "w2 is about to move: w1 keeps its standby")
	assert.False(t, peerOf(wants, "w2", "w1").NextPodCIDR.IsValid(), "w1 is not moving")

	n, _ := srv.Node("w2")
	n.Spec.PodCIDR, n.Spec.PodCIDRs = next.String(), []string{next.String()}
	n.ResourceVersion = ""
	require.NoError(t, cs.CoreV1().Nodes().Delete(t.Context(), "w2", metav1.DeleteOptions{}))
	_, err = cs.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
	require.NoError(t, err)
	wants, err = m.HostWants(t.Context())
	require.NoError(t, err)
	p := peerOf(wants, "w1", "w2")
	assert.Equal(t, next, p.PodCIDR)
	assert.False(t, p.NextPodCIDR.IsValid(), "w2 holds its next podCIDR: no standby any more")
}

// WaitAll waits for many agents with one watch on their Leases, not a
// poll per node (300 nodes polled every second would exceed the runbook's
// client rate limit), and names every node that failed or did not report.
func TestHostAgentsWaitAllWatchesOnceAndNamesEachNodeLeft(t *testing.T) {
	cs, _ := nodecidrtest.New(agentNode("w1"), agentNode("w2"), agentNode("w3"), agentNode("w4"))
	stop1 := fakeAgent(cs, "w1", HostConverged)
	defer stop1()
	stop2 := fakeAgent(cs, "w2", HostConverged)
	defer stop2()
	stop3 := fakeAgent(cs, "w3", HostFailed)
	defer stop3()
	h := &HostAgents{Kube: cs, PollInterval: time.Millisecond, Timeout: time.Second}
	gens := map[string]int64{}
	for _, n := range []string{"w1", "w2", "w3", "w4"} {
		gen, err := h.Publish(t.Context(), agentWant(n))
		require.NoError(t, err)
		gens[n] = gen
	}
	cs.ClearActions()
	got, err := h.WaitAll(t.Context(), gens)
	require.ErrorIs(t, err, ErrHostAgent)
	assert.Contains(t, err.Error(), "node w3 failed: bridge cni0: permission denied")
	assert.Contains(t, err.Error(), "node w4: no report on generation 1 within 1s (no report)")
	assert.NotContains(t, err.Error(), "node w1")
	assert.NotContains(t, err.Error(), "node w2")
	require.Contains(t, got, "w1")
	require.Contains(t, got, "w2")
	assert.Equal(t, HostConverged, got["w1"].Phase)
	assert.Equal(t, int64(1), got["w2"].Generation)
	verbs := map[string]int{}
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "leases" && a.GetNamespace() == DefaultAgentNamespace {
			verbs[a.GetVerb()]++
		}
	}
	// The fake agents only update and create their Leases: every get,
	// list and watch is WaitAll's.
	assert.Zero(t, verbs["get"], "no poll of a Lease: %v", verbs)
	assert.Positive(t, verbs["watch"], "one watch (again after a close)")
	assert.Positive(t, verbs["list"])
	assert.LessOrEqual(t, verbs["watch"], 3, "not a watch per node and poll: %v", verbs)
}
