package migrate

import (
	"fmt"
	"math/big"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// TestWriteDoctorTextEverySection holds the person's report to every line
// it writes: a broken dual-stack cluster with every section filled, the
// groups cut at MaxPerGroup, and a healthy one whose fix plan could not be
// made. The doctor example prints this text; its tests run other
// packages' code, so the mutation run of migrate counts only this test.
func TestWriteDoctorTextEverySection(t *testing.T) {
	overlap := cidr.Overlap{
		Outer:    cidr.Range{Name: "--service-cluster-ip-range", Kind: cidr.KindServiceCIDR, Prefix: netip.MustParsePrefix("10.96.0.0/12")},
		Inner:    cidr.Range{Name: "--cluster-cidr", Kind: cidr.KindClusterCIDR, Prefix: netip.MustParsePrefix("10.100.0.0/16")},
		Relation: cidr.Contains, Severity: cidr.SeverityError, Reason: "pods and Services share addresses",
	}
	var crashes, manyErrors []string
	var nodeCrashes []cidr.NodeCrash
	var findings []DoctorFinding
	for i := range MaxPerGroup + 2 {
		msg := fmt.Sprintf("node n%02d holds 10.244.%d.0/24 twice", i, i)
		findings = append(findings, DoctorFinding{Code: "duplicate-podcidr", Severity: cidr.SeverityError, Message: msg,
			Fix: fmt.Sprintf("move n%02d", i)})
		nodeCrashes = append(nodeCrashes, cidr.NodeCrash{Node: fmt.Sprintf("n%02d", i), Message: fmt.Sprintf("crash %02d", i)})
		if i < MaxPerGroup {
			manyErrors = append(manyErrors, "    - "+msg)
			crashes = append(crashes, fmt.Sprintf("  - current flags: crash %02d", i))
		}
	}
	findings = append(findings,
		DoctorFinding{Code: CodeClusterDNSMismatch, Severity: cidr.SeverityError, Message: "kube-dns is 10.96.0.11"},
		DoctorFinding{Code: CodeRangeOverlapsCGNAT, Severity: cidr.SeverityWarning, Message: "the pod range overlaps CGNAT", Fix: "pick another range"},
		DoctorFinding{Code: "podcidr-inside-cluster-cidr", Severity: cidr.SeverityInfo, Message: "expected nesting"},
	)
	broken := &DoctorReport{
		Flags: cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.100.0.0/16,fd00::/48",
			NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 64},
		FlagsSource:        "Pod kube-system/kube-controller-manager-a",
		ServiceRange:       "10.96.0.0/12",
		ServiceRangeSource: "Pod kube-system/kube-apiserver-a",
		LayoutWarnings:     []string{"--cluster-cidr 10.100.0.1/16 has host bits set"},
		NotRead:            []string{"Calico IP pools: forbidden"},
		Audit: &nodecidr.Report{Nodes: 32, Pods: 7, Capacity: []nodecidr.Capacity{
			{Family: cidr.IPv4, ClusterCIDR: netip.MustParsePrefix("10.100.0.0/16"), NodeMask: 24,
				Subnets: big.NewInt(256), Used: big.NewInt(30), Reserved: big.NewInt(16), Free: big.NewInt(210), NodesWithout: 2},
			{Family: cidr.IPv6, ClusterCIDR: netip.MustParsePrefix("fd00::/48"), NodeMask: 64,
				Subnets: big.NewInt(65536), Used: big.NewInt(32), Reserved: big.NewInt(0), Free: big.NewInt(65504)},
		}},
		Findings:          findings,
		Conflicts:         []cidr.Overlap{overlap},
		ControllerManager: cidr.PreflightResult{Crashes: nodeCrashes},
		Proposed: &Proposal{
			Flags:     cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.200.0.0/16", NodeCIDRMaskSize: 33},
			Result:    cidr.PreflightResult{FlagErrors: []string{"mask too long", "second error"}, Crashes: []cidr.NodeCrash{{Node: "x", Message: "proposed crash"}}},
			Conflicts: []cidr.Overlap{overlap},
		},
		FixPlan: &nodecidr.Plan{Mode: nodecidr.ModeFix,
			// The plan's range: flannel's Network, narrower than the flag.
			Layout: &cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/17"), netip.MustParsePrefix("fd00::/48")}},
			Steps: []nodecidr.Step{
				{Node: "n01", Action: nodecidr.ActionRecreate, OldPodCIDRs: []string{"10.244.0.0/24", "fd00::/64"}, NewPodCIDRs: []string{"10.100.5.0/24", "fd00:0:0:5::/64"}, Reason: "duplicate"},
				{Node: "n31", Action: nodecidr.ActionPatch, NewPodCIDRs: []string{"10.100.6.0/24", "fd00:0:0:6::/64"}, Reason: "missing"},
			},
			Warnings: []string{"node n99 is NotReady"},
		},
		Repairs: []Repair{{Code: CodeFlannelBackendMismatch, Node: "n02", Annotation: "flannel.alpha.coreos.com/backend-type",
			From: "host-gw", To: "vxlan", Commands: []string{"kubectl annotate node n02 x=y", "kubectl delete pod flannel-n02"}}},
	}
	want := strings.Join([]string{
		"cidrshift doctor: test",
		"kube-controller-manager: --allocate-node-cidrs=true --cluster-cidr=10.100.0.0/16,fd00::/48 --node-cidr-mask-size-ipv4=24 --node-cidr-mask-size-ipv6=64  (from Pod kube-system/kube-controller-manager-a)",
		"Service range: 10.96.0.0/12  (from Pod kube-system/kube-apiserver-a)",
		"  note: --cluster-cidr 10.100.0.1/16 has host bits set",
		"  not read: Calico IP pools: forbidden",
		"",
		"SUMMARY: PROBLEMS FOUND. 32 nodes, 7 pods; 33 errors, 1 warnings; 2 nodes need a new podCIDR; 1 flannel repairs",
		"  IPv4 10.100.0.0/16 in /24 subnets: 256 total, 30 used, 16 reserved for Services, 210 free; 2 nodes without one",
		"  IPv6 fd00::/48 in /64 subnets: 65536 total, 32 used, 0 reserved for Services, 65504 free",
		"  kube-controller-manager with the current flags: CRASH-LOOPS on 32 node(s), listed below",
		"  kube-controller-manager with --cluster-cidr=10.200.0.0/16 --node-cidr-mask-size=33: REFUSES the flags: mask too long; second error",
		"",
		"ERRORS",
		"  duplicate-podcidr (32)",
		strings.Join(manyErrors, "\n"),
		"    ... and 2 more (-o yaml lists them all)",
		"    fix: move n00",
		"  cluster-dns-mismatch (1)",
		"    - kube-dns is 10.96.0.11",
		"",
		"WARNINGS",
		"  range-overlaps-cgnat (1)",
		"    - the pod range overlaps CGNAT",
		"    fix: pick another range",
		"",
		"INFOS",
		"  podcidr-inside-cluster-cidr (1)",
		"    - expected nesting",
		"",
		"LAYOUT CONFLICTS",
		"  - current flags: " + overlap.String(),
		"  - proposed flags: " + overlap.String(),
		"",
		"KUBE-CONTROLLER-MANAGER CRASHES",
		strings.Join(crashes, "\n"),
		"  ... and 3 more (-o yaml lists them all)",
		"",
		"FIX PLAN " + broken.FixPlan.ID() + ": 2 nodes (workers by name, control plane last)",
		"  NODE  ACTION    OLD                      NEW                            WHY",
		"  n01   recreate  10.244.0.0/24,fd00::/64  10.100.5.0/24,fd00:0:0:5::/64  duplicate",
		"  n31   patch     -                        10.100.6.0/24,fd00:0:0:6::/64  missing",
		"  warning: node n99 is NotReady",
		"  Carry it out with: noderecreate --fix --cluster-cidr 10.100.0.0/17,fd00::/48 --node-mask 24,64 --apply --cordon --delete-pods",
		"  (recreate = delete + create with the new podCIDR, journaled and resumable; patch = the allowed update of an empty podCIDR)",
		"",
		"REPAIRS: 1",
		"  flannel-backend-mismatch: node n02 flannel.alpha.coreos.com/backend-type host-gw -> vxlan",
		"    $ kubectl annotate node n02 x=y",
		"    $ kubectl delete pod flannel-n02",
		"",
	}, "\n")
	var b strings.Builder
	WriteDoctorText(&b, broken, "cidrshift doctor: test")
	assert.Equal(t, want, b.String())

	// A healthy report: no Service range, no pods counted, kube-controller-manager
	// starts, a proposal whose node IPAM is off, and a fix plan that could not be made.
	healthy := &DoctorReport{
		Flags:             cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", NodeCIDRMaskSize: 24},
		FlagsSource:       "flags given",
		Audit:             &nodecidr.Report{Nodes: 3},
		ControllerManager: cidr.PreflightResult{WouldStart: true},
		Proposed:          &Proposal{Flags: cidr.ControllerManagerFlags{ClusterCIDR: "10.0.0.0/16"}, Result: cidr.PreflightResult{IPAMDisabled: true}},
		FixPlanError:      "no free /24 left in 10.244.0.0/16",
		Healthy:           true,
	}
	want = strings.Join([]string{
		"cidrshift doctor",
		"kube-controller-manager: --allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16 --node-cidr-mask-size=24  (from flags given)",
		"",
		"SUMMARY: HEALTHY. 3 nodes; 0 errors, 0 warnings",
		"  kube-controller-manager with the current flags: starts",
		"  kube-controller-manager with --cluster-cidr=10.0.0.0/16: node IPAM disabled (--allocate-node-cidrs=false)",
		"",
		"NO FIX PLAN: no free /24 left in 10.244.0.0/16",
		"",
	}, "\n")
	b.Reset()
	WriteDoctorText(&b, healthy, "cidrshift doctor")
	assert.Equal(t, want, b.String())

	// A plan without a layout of its own is carried out in the flags' range.
	for _, layout := range []*cidr.NodeIPAMLayout{nil, {}} {
		healthy.FixPlan = &nodecidr.Plan{Mode: nodecidr.ModeFix, Layout: layout, Steps: broken.FixPlan.Steps}
		b.Reset()
		WriteDoctorText(&b, healthy, "cidrshift doctor")
		assert.Contains(t, b.String(), "  Carry it out with: noderecreate --fix --cluster-cidr 10.244.0.0/16 --node-mask 24 --apply", layout)
	}
}

// TestMaskArg holds the --node-mask argument of the fix plan's command to
// the masks kube-controller-manager was given: one mask, one per family,
// or none (noderecreate then takes the cluster's).
func TestMaskArg(t *testing.T) {
	for _, tc := range []struct {
		flags cidr.ControllerManagerFlags
		want  string
	}{
		{cidr.ControllerManagerFlags{NodeCIDRMaskSize: 24}, " --node-mask 24"},
		{cidr.ControllerManagerFlags{NodeCIDRMaskSize: 25, NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 64}, " --node-mask 25"},
		{cidr.ControllerManagerFlags{NodeCIDRMaskSizeIPv4: 24, NodeCIDRMaskSizeIPv6: 64}, " --node-mask 24,64"},
		{cidr.ControllerManagerFlags{NodeCIDRMaskSizeIPv4: 24}, ""},
		{cidr.ControllerManagerFlags{NodeCIDRMaskSizeIPv6: 64}, ""},
		{cidr.ControllerManagerFlags{}, ""},
	} {
		assert.Equal(t, tc.want, maskArg(tc.flags), "%+v", tc.flags)
	}
}
