package nodenet

import (
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
	anchor := []string{"-s", "10.244.0.0/16", "-d", "10.244.0.0/16", "-j", "RETURN"}
	rule := []string{"-s", "10.244.3.0/24", "-d", "10.244.0.0/16", "-j", "RETURN"}
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
			n := newTestNode(t)
			n.rules(
				"nat FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.1.0.0/16 -j RETURN",
				"nat FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.2.0.0/16 -j RETURN",
				"nat FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
			)
			h, err := openHost(n.want("n1", "10.244.3.0/24", ""))
			require.NoError(t, err)
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
