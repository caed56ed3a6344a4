package migrate

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cidrshift/cidrshift/nodecidr"
)

// flSuggest proposes a Network four times as large as the current one, down
// to the whole address space, and words for a /1 or /0.
func TestFlSuggest(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.0.0/16":    "10.244.0.0/14",
		"10.245.0.0/16":    "10.244.0.0/14",
		"64.0.0.0/2":       "0.0.0.0/0",
		"128.0.0.0/1":      "a shorter prefix",
		"0.0.0.0/0":        "a shorter prefix",
		"fd00:10:244::/48": "fd00:10:244::/46",
	} {
		assert.Equal(t, want, flSuggest(netip.MustParsePrefix(in)), in)
	}
}

// sharedTogether puts the control-plane steps last, in their order, even
// when the plan it is given lists one among the workers, and moves a
// subnet's duplicates next to its first holder.
func TestSharedTogetherPutsControlPlaneStepsLast(t *testing.T) {
	step := func(name, old string, cp bool) nodecidr.Step {
		return nodecidr.Step{Node: name, ControlPlane: cp, OldPodCIDRs: []string{old}}
	}
	p := nodecidr.Plan{Steps: []nodecidr.Step{
		step("cp-0", "10.244.100.0/24", true),
		step("worker-0", "10.244.0.0/24", false),
		step("worker-1", "10.244.1.0/24", false),
		step("worker-2", "10.244.2.0/24", false),
		step("worker-3", "10.244.1.0/24", false), // shares worker-1's subnet
		step("cp-1", "10.244.1.0/24", true),      // a control-plane node is not in a group
	}}

	sharedTogether(&p)

	var got []string
	for _, st := range p.Steps {
		got = append(got, st.Node)
	}
	assert.Equal(t, []string{"worker-0", "worker-1", "worker-3", "worker-2", "cp-0", "cp-1"}, got)
}
