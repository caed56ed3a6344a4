package nodenet

import (
	"fmt"
	"testing"

	"github.com/coreos/go-iptables/iptables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDataplaneInsertRuleFollowsAChainRewrittenMeanwhile: flanneld rewrites
// its chain while a rule is being inserted just before an anchor (it does so
// when it starts, and when one of its rules is missing). The insert reads
// the chain again and lands just before the anchor: whether the stale
// position is past the chain's end (iptables refuses it), or valid but no
// longer the anchor's (the rule would land after it). An anchor the rewrite
// removed skips the insert.
func TestDataplaneInsertRuleFollowsAChainRewrittenMeanwhile(t *testing.T) {
	const table, chain = "nat", "FLANNEL-POSTRTG"
	anchor, rule := flannelReturn, oldSubnetReturn
	for _, tc := range []struct {
		name    string
		removed []string // the rules the rewrite drops (by their -d)
		want    Status
		chain   []string
	}{
		{"stale position past the end", []string{"10.1.0.0/16", "10.2.0.0/16"}, StatusDone, []string{
			"-A FLANNEL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -j RETURN",
			"-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
		}},
		{"stale position after the anchor", []string{"10.1.0.0/16"}, StatusDone, []string{
			"-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.2.0.0/16 -j RETURN",
			"-A FLANNEL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -j RETURN",
			"-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
		}},
		{"anchor gone", []string{"10.244.0.0/16"}, StatusSkipped, []string{
			"-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.1.0.0/16 -j RETURN",
			"-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.2.0.0/16 -j RETURN",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, h := threeRuleChain(t)
			defer h.close()
			rewrites := 0
			h.beforeRuleWrite = func() {
				if rewrites++; rewrites > 1 {
					return
				}
				for _, d := range tc.removed {
					n.ipt(func(ipt *iptables.IPTables) error {
						return ipt.Delete(table, chain, "-s", "10.244.0.0/16", "-d", d, "-j", "RETURN")
					})
				}
			}
			st, _, err := h.insertRule(&Action{Kind: ActionInsertRule, Rule: &Rule{Table: table, Chain: chain, Spec: rule}, Anchor: anchor})
			require.NoError(t, err)
			assert.Equal(t, tc.want, st)
			assert.Equal(t, tc.chain, n.chain(table, chain))
		})
	}
}

// TestDataplaneDeleteRuleGoneMeanwhile: a stale rule that another writer
// (flanneld rewriting its chains) removes between the check and the delete,
// alone or with its chain, is gone as wanted: the delete reports it
// unchanged, with no error. A rule still there after a failed delete keeps
// the error.
func TestDataplaneDeleteRuleGoneMeanwhile(t *testing.T) {
	const table, chain = "nat", "FLANNEL-POSTRTG"
	rule := []string{"-s", "10.244.3.0/24", "-d", "10.244.0.0/16", "-j", "RETURN"}
	other := "-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN"
	for _, tc := range []struct {
		name    string
		rewrite func(*iptables.IPTables) error
		want    Status
		chain   []string
	}{
		{"nobody else", func(*iptables.IPTables) error { return nil }, StatusDone, []string{other}},
		{"rule removed", func(ipt *iptables.IPTables) error { return ipt.Delete(table, chain, rule...) }, StatusUnchanged, []string{other}},
		{"chain removed", func(ipt *iptables.IPTables) error { return ipt.ClearAndDeleteChain(table, chain) }, StatusUnchanged, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			n.rules(
				"nat FLANNEL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -j RETURN",
				"nat FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
			)
			h, err := openHost(n.want("n1", "10.244.3.0/24", ""))
			require.NoError(t, err)
			defer h.close()
			h.beforeRuleWrite = func() { n.ipt(tc.rewrite) }
			st, _, err := h.deleteRule(&Action{Kind: ActionDeleteRule, Rule: &Rule{Table: table, Chain: chain, Spec: rule}})
			require.NoError(t, err)
			assert.Equal(t, tc.want, st)
			if tc.chain == nil {
				n.ipt(func(ipt *iptables.IPTables) error {
					ok, err := ipt.ChainExists(table, chain)
					assert.False(t, ok, "the chain stays removed")
					return err
				})
				return
			}
			assert.Equal(t, tc.chain, n.chain(table, chain))
		})
	}
}

// TestDataplaneInsertRuleMisplacedCopyGoneMeanwhile: the insert landed after
// the anchor because the chain changed, and before its misplaced copy could
// be deleted, flanneld rewrote the chain again and took the copy with it.
// The failed delete is no error: the next attempt inserts the rule again,
// just before the anchor.
func TestDataplaneInsertRuleMisplacedCopyGoneMeanwhile(t *testing.T) {
	const table, chain = "nat", "FLANNEL-POSTRTG"
	anchor, rule := flannelReturn, oldSubnetReturn
	n, h := threeRuleChain(t)
	defer h.close()
	writes := 0
	h.beforeRuleWrite = func() {
		switch writes++; writes {
		case 1: // before the insert: the stale position now lands after the anchor
			n.ipt(func(ipt *iptables.IPTables) error {
				return ipt.Delete(table, chain, "-s", "10.244.0.0/16", "-d", "10.1.0.0/16", "-j", "RETURN")
			})
		case 2: // before the delete of the misplaced copy: the rewrite drops it
			n.ipt(func(ipt *iptables.IPTables) error { return ipt.Delete(table, chain, rule...) })
		}
	}
	st, _, err := h.insertRule(&Action{Kind: ActionInsertRule, Rule: &Rule{Table: table, Chain: chain, Spec: rule}, Anchor: anchor})
	require.NoError(t, err)
	assert.Equal(t, StatusDone, st)
	assert.Equal(t, 3, writes, "insert, the delete of the misplaced copy, insert again")
	assert.Equal(t, []string{
		"-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.2.0.0/16 -j RETURN",
		"-A FLANNEL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -j RETURN",
		"-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
	}, n.chain(table, chain))
}

// TestDataplaneInsertRuleGivesUpOnAChainThatKeepsChanging: a chain that
// another writer changes before every write (here a rule more at its top
// each time) is tried ruleWriteAttempts times; each misplaced copy is
// deleted, and the insert ends in an error that says why, with no copy of
// the rule left anywhere in the chain.
func TestDataplaneInsertRuleGivesUpOnAChainThatKeepsChanging(t *testing.T) {
	const table, chain = "nat", "FLANNEL-POSTRTG"
	anchor, rule := flannelReturn, oldSubnetReturn
	n, h := threeRuleChain(t)
	defer h.close()
	writes := 0
	h.beforeRuleWrite = func() {
		writes++
		n.ipt(func(ipt *iptables.IPTables) error {
			return ipt.Insert(table, chain, 1, "-s", "10.244.0.0/16", "-d", fmt.Sprintf("10.100.%d.0/24", writes), "-j", "RETURN")
		})
	}
	_, _, err := h.insertRule(&Action{Kind: ActionInsertRule, Rule: &Rule{Table: table, Chain: chain, Spec: rule}, Anchor: anchor})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the chain kept changing while a rule was inserted just before")
	assert.Equal(t, 2*ruleWriteAttempts, writes, "each attempt: the insert, then the delete of its misplaced copy")
	assert.NotContains(t, n.chain(table, chain), "-A FLANNEL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -j RETURN")
	assert.Len(t, n.chain(table, chain), 3+2*ruleWriteAttempts)
}

// flannelReturn is flanneld's RETURN rule for its network, the anchor the
// insert tests put oldSubnetReturn just before.
var (
	flannelReturn   = []string{"-s", "10.244.0.0/16", "-d", "10.244.0.0/16", "-j", "RETURN"}
	oldSubnetReturn = []string{"-s", "10.244.3.0/24", "-d", "10.244.0.0/16", "-j", "RETURN"}
)

// threeRuleChain is a node whose FLANNEL-POSTRTG holds flanneld's RETURN
// rules for 10.1.0.0/16, 10.2.0.0/16 and (the anchor) 10.244.0.0/16, and a
// host opened on it for podCIDR 10.244.3.0/24.
func threeRuleChain(t *testing.T) (*testNode, *host) {
	t.Helper()
	n := newTestNode(t)
	n.rules(
		"nat FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.1.0.0/16 -j RETURN",
		"nat FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.2.0.0/16 -j RETURN",
		"nat FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
	)
	h, err := openHost(n.want("n1", "10.244.3.0/24", ""))
	require.NoError(t, err)
	return n, h
}
