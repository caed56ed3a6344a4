package nodecidr

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/journal"
)

// TestApplyVerifiesTheNodeTheServerCreated: the Node the create returns is
// verified against the backup before the node counts as moved. An
// admission plugin that drops a taint or a label, changes the providerID
// or sets other podCIDRs stops the run at that node: no hook runs on it,
// it is not uncordoned, its record is not marked done and no other node
// is touched. Taints the node lifecycle controller and the kubelet manage
// are not compared: one dropped is no loss.
func TestApplyVerifiesTheNodeTheServerCreated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		admit  func(n *corev1.Node)
		before func(n *corev1.Node) // the node as it is before the run
		want   string               // "" for no error
	}{
		{"taint dropped", func(n *corev1.Node) { n.Spec.Taints = nil }, nil,
			"taint dedicated=infra:PreferNoSchedule was lost"},
		{"label dropped", func(n *corev1.Node) { delete(n.Labels, "team") }, nil,
			`label team="net" was lost`},
		{"annotation dropped", func(n *corev1.Node) { delete(n.Annotations, "note") }, nil,
			`annotation note="w1" was lost`},
		{"providerID changed", func(n *corev1.Node) { n.Spec.ProviderID = "other://w1" }, nil,
			`providerID changed from "test://w1" to "other://w1"`},
		{"other podCIDRs", func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.30.1.0/24", []string{"10.30.1.0/24"} }, nil,
			"node w1 has podCIDRs 10.30.1.0/24, want 10.20.1.0/24"},
		{"managed taint dropped", func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "node.kubernetes.io/not-ready" })
		}, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule})
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := storyOne()
			for _, n := range orig {
				if n.Name == "w1" && tc.before != nil {
					tc.before(n)
				}
			}
			c, s := newCluster(orig...)
			p := rebasePlan(t, c)
			c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if n := a.(k8stesting.CreateAction).GetObject().(*corev1.Node); n.Name == "w1" {
					tc.admit(n)
				}
				return false, nil, nil
			})
			var ev events
			var hooked []string
			hook := Hook{Name: "record", Run: func(_ context.Context, n *corev1.Node) error {
				hooked = append(hooked, n.Name)
				return nil
			}}
			dir := t.TempDir()
			_, err := Apply(ctxT(t), c, p, ApplyOptions{Concurrency: 1, JournalDir: dir, OnEvent: ev.add, Retry: fastRetry(), Hooks: []Hook{hook}})
			if tc.want == "" {
				require.NoError(t, err)
				assert.Contains(t, ev.phases("w1"), PhaseDone)
				assert.Contains(t, hooked, "w1")
				return
			}
			require.ErrorIs(t, err, ErrVerify)
			assert.ErrorContains(t, err, tc.want)
			assert.NotContains(t, hooked, "w1", "no hook runs on a node that failed verification")
			phases := ev.phases("w1")
			assert.Contains(t, phases, PhaseCreated)
			assert.NotContains(t, phases, PhaseVerified)
			assert.NotContains(t, phases, PhaseDone)
			j, err := journal.Open(dir)
			require.NoError(t, err)
			var rec nodeRecord
			found, err := j.Get(nodeKey("w1"), &rec)
			require.NoError(t, err)
			require.NoError(t, j.Close())
			assert.True(t, found, "w1's record stays for a resumed run")
			assert.NotEqual(t, PhaseDone, rec.Phase, "w1's record is not marked done")
			for _, o := range orig {
				if o.Name == "w1" || slices.Contains(hooked, o.Name) {
					continue
				}
				n, ok := s.Node(o.Name)
				require.True(t, ok)
				assert.Equal(t, o.UID, n.UID, "node %s is untouched", o.Name)
			}
		})
	}
}
