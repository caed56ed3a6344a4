package nodenet_test

import (
	"fmt"
	"net/netip"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodenet"
)

// A node moved from 10.244.3.0/24 to 10.244.9.0/24 while pod web-0 still runs
// at 10.244.3.2. The plan releases the leaked reservation now and defers
// moving cni0's gateway until web-0 has moved.
func ExampleNewPlan() {
	report := &nodenet.Report{
		Node: "node-17", PodCIDR: netip.MustParsePrefix("10.244.9.0/24"), Network: netip.MustParsePrefix("10.244.0.0/16"),
		Bridge: "cni0", ReservationDir: "/var/lib/cni/networks/cbr0", SubnetEnvFile: "/run/flannel/subnet.env",
		OldPodCIDRs:      []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")},
		LivePods:         []nodenet.Pod{{Name: "default/web-0", IP: netip.MustParseAddr("10.244.3.2")}},
		LivePodsComplete: true,
		Findings: []nodenet.Finding{
			{Code: nodenet.CodeBridgeAddress, Severity: cidr.SeverityError, Object: "link cni0",
				Fix: []nodenet.Action{{Kind: nodenet.ActionSetAddress, Object: "link cni0", Link: "cni0",
					Add: netip.MustParsePrefix("10.244.9.1/24"), Remove: []netip.Prefix{netip.MustParsePrefix("10.244.3.1/24")},
					Retires: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}}}},
			{Code: nodenet.CodeReservationLeaked, Severity: cidr.SeverityError, Object: "file /var/lib/cni/networks/cbr0/10.244.3.3",
				Fix: []nodenet.Action{{Kind: nodenet.ActionReleaseReservation, Object: "file /var/lib/cni/networks/cbr0/10.244.3.3",
					Path: "/var/lib/cni/networks/cbr0/10.244.3.3", IP: netip.MustParseAddr("10.244.3.3"), ContainerID: "4f1c"}}},
		},
	}
	plan, err := nodenet.NewPlan(report)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range plan.Actions {
		fmt.Println(a.Kind, a.Object)
		if a.Deferred != "" {
			fmt.Println("  deferred:", a.Deferred)
		}
	}
	// Output:
	// release-reservation file /var/lib/cni/networks/cbr0/10.244.3.3
	// set-address link cni0
	//   deferred: live pods still use 10.244.3.0/24: default/web-0; it runs once they have moved to 10.244.9.0/24
}
