package nodenet

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTransitionLinks: the pair's names fit IFNAMSIZ whatever the bridge.
func TestTransitionLinks(t *testing.T) {
	l, p := TransitionLinks("cni0")
	assert.Equal(t, []string{"cni0-old", "cni0-olp"}, []string{l, p})
	l, p = TransitionLinks("a-very-long-br0")
	assert.Equal(t, []string{"a-very-long-old", "a-very-long-olp"}, []string{l, p})
	assert.True(t, validIfName(l) && validIfName(p))
}

// TestTransitionBadInput: the transition's bad input is refused with a
// FieldError naming the field and the value.
func TestTransitionBadInput(t *testing.T) {
	base := Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), OldPodCIDR: pfx("10.244.3.0/24")}
	for _, c := range []struct {
		name, field, value string
		edit               func(w *Want)
	}{
		{"old too small", "Want.OldPodCIDR", "10.244.3.0/31", func(w *Want) { w.OldPodCIDR = pfx("10.244.3.0/31") }},
		{"pod at old gateway", "Want.LivePods[0].IP", "10.244.3.1", func(w *Want) { w.LivePods = []Pod{{IP: addr("10.244.3.1")}} }},
		{"vtep named like the veth", "Want.VTEP", "br0-old", func(w *Want) { w.Bridge, w.VTEP = "br0", "br0-old" }},
	} {
		w := base
		c.edit(&w)
		_, err := w.normalize()
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", c.name, err)
		assert.Equal(t, c.field, fe.Field, c.name)
		assert.Equal(t, c.value, fe.Value, c.name)
		assert.ErrorIs(t, err, ErrInvalidInput)
	}

	s := baseSnapshot()
	s.bridge = &linkState{name: "cni0", addrs: []netip.Prefix{pfx("10.244.3.1/24")}}
	w := mustWant(t, Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Backend: BackendHostGW, LivePodsComplete: true,
		LivePods: []Pod{{IP: addr("10.244.3.2")}}})
	plan, err := NewPlan(analyze(w, s))
	require.NoError(t, err)
	require.Equal(t, ActionSetTransition, plan.Actions[0].Kind)
	for _, c := range []struct {
		field string
		edit  func(a *Action)
	}{
		{"plan.actions[0].link", func(a *Action) { a.Link = "eth0" }},
		{"plan.actions[0].peer", func(a *Action) { a.Peer = "eth0" }},
		{"plan.actions[0].add", func(a *Action) { a.Add = pfx("192.0.2.1/24") }},
	} {
		p := *plan
		p.Actions = append([]Action(nil), plan.Actions...)
		c.edit(&p.Actions[0])
		var fe *FieldError
		require.ErrorAs(t, p.Validate(), &fe)
		assert.Equal(t, c.field, fe.Field)
		assert.ErrorIs(t, fe, ErrInvalidPlan)
	}
	// Without the set-transition the bridge's set-address retires nothing
	// it names: refused, so an edited plan cannot drop A.1 unprotected.
	p := *plan
	p.Actions = append([]Action(nil), plan.Actions[1:]...)
	var fe *FieldError
	require.ErrorAs(t, p.Validate(), &fe)
	assert.Equal(t, "plan.actions[0].remove[0]", fe.Field)
}
