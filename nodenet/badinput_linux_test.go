//go:build linux

package nodenet

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// iptablesV returns the backend `iptables -V` names.
func iptablesV(t *testing.T) string {
	out, err := exec.Command("iptables", "-V").Output()
	require.NoError(t, err)
	switch {
	case strings.Contains(string(out), "(nf_tables)"):
		return IPTablesNFT
	case strings.Contains(string(out), "(legacy)"):
		return IPTablesLegacy
	}
	t.Fatalf("iptables -V: %s", out)
	return ""
}

// TestDataplaneBadInput: each bad input is refused with an error naming the
// field and the value, and the node is left exactly as it was.
func TestDataplaneBadInput(t *testing.T) {
	n, w, plan := movedNodePlan(t)
	ctx := context.Background()
	before := n.state()

	// A PATH without iptables (an nftables-only host), and one whose iptables
	// is neither the nft nor the legacy multi-call binary.
	noIPT := t.TempDir()
	weird := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(weird, "iptables-mystery"), []byte("#!/bin/sh\necho 'iptables v1.8.9 (mystery)'\n"), 0o755))
	require.NoError(t, os.Symlink("iptables-mystery", filepath.Join(weird, "iptables")))

	for _, tc := range []struct {
		name    string
		edit    func(w *Want, p *Plan)
		path    string
		err     error
		mention []string
	}{
		{"no RunFlannelDir", func(w *Want, _ *Plan) { w.RunFlannelDir = filepath.Join(n.root, "nope") }, "",
			ErrHostPathMissing, []string{"Want.RunFlannelDir", filepath.Join(n.root, "nope")}},
		{"plan for another node", func(_ *Want, p *Plan) { p.Node = "node-2" }, "",
			ErrWrongNode, []string{"plan.node", `"node-2"`, `"node-1"`}},
		{"nftables-only host", nil, noIPT, ErrNoIPTables, []string{"nftables-only"}},
		{"unknown iptables backend", nil, weird, ErrUnknownBackend, []string{"iptables-mystery", "IPTablesBackend"}},
		{"unknown forced backend", func(w *Want, _ *Plan) { w.IPTablesBackend = "nftables" }, "",
			ErrUnknownBackend, []string{"Want.IPTablesBackend", `"nftables"`}},
		{"plan for another podCIDR", func(w *Want, _ *Plan) { w.PodCIDR = netip.MustParsePrefix("10.244.11.0/24") }, "",
			ErrStalePlan, []string{"10.244.11.0/24"}},
		{"plan for another host layout", func(w *Want, _ *Plan) { w.CNIDataDir = filepath.Join(n.root, "elsewhere") }, "",
			ErrStalePlan, []string{"plan.reservationDir"}},
		{"tampered plan: release inside the podCIDR", func(_ *Want, p *Plan) {
			for i := range p.Actions {
				if p.Actions[i].Kind == ActionReleaseReservation {
					p.Actions[i].IP = netip.MustParseAddr("10.244.9.2")
					p.Actions[i].Path = filepath.Join(p.ReservationDir, "10.244.9.2")
				}
			}
		}, "", ErrInvalidPlan, []string{"10.244.9.2", "outside the podCIDR"}},
		{"tampered plan: delete a rule naming no old range", func(_ *Want, p *Plan) {
			for i := range p.Actions {
				if p.Actions[i].Kind == ActionDeleteRule {
					p.Actions[i].Rule = &Rule{Table: "nat", Chain: "POSTROUTING", Spec: []string{"-s", "172.17.0.0/16", "!", "-o", "docker0", "-j", "MASQUERADE"}}
				}
			}
		}, "", ErrInvalidPlan, []string{"172.17.0.0/16", "names none of the retired ranges"}},
		{"not a network namespace", func(w *Want, _ *Plan) { w.NetNS = filepath.Join(n.root, "run/flannel/subnet.env") }, "",
			ErrInvalidInput, []string{"Want.NetNS"}},
		{"bad live pod", func(w *Want, _ *Plan) { w.LivePods = append(w.LivePods, Pod{Name: "x"}) }, "",
			ErrInvalidInput, []string{"Want.LivePods[2]", "IP or a ContainerID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w2 := w
			p2 := *plan
			p2.Actions = append([]Action(nil), plan.Actions...)
			if tc.edit != nil {
				tc.edit(&w2, &p2)
			}
			if tc.path != "" {
				t.Setenv("PATH", tc.path)
			}
			_, aerr := Apply(ctx, w2, &p2, ApplyOptions{})
			require.Error(t, aerr)
			assert.True(t, errors.Is(aerr, tc.err), "%v is not %v", aerr, tc.err)
			for _, m := range tc.mention {
				assert.Contains(t, aerr.Error(), m)
			}
			if tc.err != ErrWrongNode && tc.err != ErrStalePlan && tc.err != ErrInvalidPlan {
				_, err := Audit(ctx, w2)
				assert.ErrorIs(t, err, tc.err, "Audit refuses it too")
			}
			assert.Equal(t, before, n.state(), "nothing changed")
		})
	}
}
