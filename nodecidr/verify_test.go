package nodecidr

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/cidr"
)

func TestVerifyFindsProblems(t *testing.T) {
	ctx := ctxT(t)
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	dir := t.TempDir()
	_, err := Apply(ctx, c, p, ApplyOptions{JournalDir: dir, Cordon: true, Retry: fastRetry()})
	require.NoError(t, err)

	// Someone strips a label from w1, changes an annotation on w3, deletes
	// master1, and a new node takes w2's subnet.
	_, err = c.CoreV1().Nodes().Patch(ctx, "w1", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":null}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = c.CoreV1().Nodes().Patch(ctx, "w3", types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":"edited"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, c.CoreV1().Nodes().Delete(ctx, "master1", metav1.DeleteOptions{}))
	s.AddNode(node("intruder", cidrs("10.20.2.0/24")))

	v, err := Verify(ctx, c, p, VerifyOptions{JournalDir: dir})
	require.NoError(t, err)
	assert.False(t, v.OK)
	got := map[FindingKind][]string{}
	sev := map[string]cidr.Severity{}
	for _, f := range v.Findings {
		got[f.Kind] = append(got[f.Kind], f.Nodes...)
		sev[f.Nodes[0]+"/"+string(f.Kind)] = f.Severity
	}
	assert.ElementsMatch(t, []string{"w1", "w3"}, got[FindingMetadataChanged])
	assert.Equal(t, []string{"master1"}, got[FindingNodeMissing])
	assert.ElementsMatch(t, []string{"w2", "intruder"}, got[FindingDuplicate])
	assert.Equal(t, cidr.SeverityError, sev["w1/"+string(FindingMetadataChanged)])
	assert.Equal(t, cidr.SeverityWarning, sev["w3/"+string(FindingMetadataChanged)])

	// Without a journal only podCIDRs and duplicates are checked.
	v, err = Verify(ctx, c, p, VerifyOptions{})
	require.NoError(t, err)
	var seen []FindingKind
	for _, f := range v.Findings {
		seen = append(seen, f.Kind)
	}
	assert.NotContains(t, seen, FindingMetadataChanged)
	assert.Contains(t, seen, FindingNodeMissing, "the podCIDR and existence checks still run")

	// Before the plan is applied everything is "not applied".
	c2, _ := newCluster(storyOne()...)
	v, err = Verify(ctx, c2, rebasePlan(t, c2), VerifyOptions{})
	require.NoError(t, err)
	assert.False(t, v.OK)
	assert.Len(t, v.Findings, 4)
	assert.Equal(t, FindingNotApplied, v.Findings[0].Kind)
}

// TestVerifyFailsForAPlannedNodeThatLostItsPodCIDRs: a planned node that
// exists but has no podCIDRs (its kubelet registered it again while it was
// absent) is not moved; Verify must say so instead of skipping it.
func TestVerifyFailsForAPlannedNodeThatLostItsPodCIDRs(t *testing.T) {
	ctx := ctxT(t)
	c, s := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	_, err := Apply(ctx, c, p, ApplyOptions{JournalDir: t.TempDir(), Retry: fastRetry()})
	require.NoError(t, err)
	v, err := Verify(ctx, c, p, VerifyOptions{})
	require.NoError(t, err)
	require.True(t, v.OK, "%v", v.Findings)

	require.NoError(t, c.CoreV1().Nodes().Delete(ctx, "w2", metav1.DeleteOptions{}))
	s.AddNode(node("w2", nil))
	v, err = Verify(ctx, c, p, VerifyOptions{})
	require.NoError(t, err)
	assert.False(t, v.OK)
	assert.Equal(t, 4, v.Checked)
	require.Len(t, v.Findings, 1, "%v", v.Findings)
	assert.Equal(t, FindingNotApplied, v.Findings[0].Kind)
	assert.Equal(t, []string{"w2"}, v.Findings[0].Nodes)
	assert.Equal(t, cidr.SeverityError, v.Findings[0].Severity)
}

// TestVerifyRefusesTheJournalOfAnotherPlan: Verify compares nodes with the
// backups of the plan it is given, never another plan's; a journal directory
// that holds no run adds no check.
func TestVerifyRefusesTheJournalOfAnotherPlan(t *testing.T) {
	ctx := ctxT(t)
	c, _ := newCluster(storyOne()...)
	p := rebasePlan(t, c)
	other, err := MakePlan(ctx, c, PlanOptions{Mode: ModeRebase, Names: []string{"w1"}, Rebase: []RebasePair{rebase("10.10.0.0/18", "10.30.0.0/16")}})
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = Apply(ctx, c, other, ApplyOptions{JournalDir: dir, Retry: fastRetry()})
	require.NoError(t, err)
	_, err = Verify(ctx, c, p, VerifyOptions{JournalDir: dir})
	require.ErrorIs(t, err, ErrJournalConflict)
	assert.ErrorContains(t, err, "holds plan "+other.ID()+", not "+p.ID())

	v, err := Verify(ctx, c, other, VerifyOptions{JournalDir: filepath.Join(t.TempDir(), "none")})
	require.NoError(t, err)
	assert.True(t, v.OK, "%v", v.Findings)
	assert.Equal(t, 1, v.Checked)
}
