package flannel_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/cidrshift/cidrshift/flannel"
)

// The fourth story: flannel with an etcd store, a host-gw network and stale
// leases left behind. Audit, delete the stale lease, move a lease that lies
// outside the network. A MemKV stands in for etcd; with a real cluster use
// flannel.DialEtcd with flanneld's --etcd-* inputs.
func Example() {
	ctx := context.Background()
	kv := flannel.NewMemKV(flannel.MemKVOptions{})
	// What flanneld and the operator wrote.
	_, _ = kv.Put("/coreos.com/network/config", []byte(`{"Network": "172.7.0.0/16", "Backend": {"Type": "host-gw"}}`), 0)
	for name, ip := range map[string]string{"172.7.1.0-24": "10.0.0.1", "172.7.2.0-24": "10.0.0.99", "10.1.7.0-24": "10.0.0.3"} {
		lease := kv.Grant(24 * time.Hour)
		_, _ = kv.Put("/coreos.com/network/subnets/"+name, []byte(`{"PublicIP":"`+ip+`","PublicIPv6":null,"BackendType":"host-gw"}`), lease)
	}

	reg, err := flannel.NewRegistry(kv, flannel.RegistryOptions{Prefix: flannel.DefaultPrefix})
	if err != nil {
		fmt.Println(err)
		return
	}
	snap, err := reg.Snapshot(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	nodes := []flannel.NodeAddresses{
		{Name: "node-a", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}},
		{Name: "node-c", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.3")}},
	}
	report := flannel.Audit(snap, flannel.AuditOptions{Nodes: nodes})
	for _, f := range report.Findings {
		fmt.Println(f.Severity, f.Kind, f.Keys)
	}

	// Delete the stale lease; the delete happens only if no flanneld renewed it since.
	del, _ := flannel.PlanDelete(snap, report.Keys(flannel.FindingUnknownNode), "node is gone")
	if _, err := reg.Apply(ctx, del, flannel.ApplyOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	// Move the lease outside the network to the lowest free subnet, in one transaction.
	mv, _ := flannel.PlanMove(snap, []flannel.MoveRequest{{Key: "10.1.7.0-24"}})
	res, err := reg.Apply(ctx, mv, flannel.ApplyOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Steps[0].Outcome, res.Steps[0].Step.From, "->", res.Steps[0].Step.To)
	// Output:
	// error lease-outside-network [/coreos.com/network/subnets/10.1.7.0-24]
	// warning lease-unknown-node [/coreos.com/network/subnets/172.7.2.0-24]
	// info capacity []
	// applied 10.1.7.0-24 -> 172.7.3.0-24
}

// The host clean-up a node needs after its subnet moved, as data.
func ExampleCleanupSteps() {
	steps := flannel.CleanupSteps(flannel.CleanupOptions{
		Node: "node-c", BackendType: "host-gw",
		From: flannel.SubnetKey{IPv4: netip.MustParsePrefix("10.1.7.0/24")},
		To:   flannel.SubnetKey{IPv4: netip.MustParsePrefix("172.7.3.0/24")},
	})
	for _, s := range steps {
		fmt.Printf("%-7s %s\n", s.Where, s.Command)
	}
	// Output:
	// cluster kubectl cordon node-c
	// node    ip link delete cni0
	// node    rm -rf /var/lib/cni/networks/cbr0
	// node    rm -f /run/flannel/subnet.env
	// node    systemctl restart flanneld
	// node    ip route flush exact 172.7.3.0/24 proto boot
	// cluster kubectl delete pods --all-namespaces --field-selector spec.nodeName=node-c,spec.hostNetwork=false
	// cluster kubectl uncordon node-c
}

// A node's subnet.env checked against its lease.
func ExampleCheckSubnetEnv() {
	env, err := flannel.ParseSubnetEnv([]byte("FLANNEL_NETWORK=172.7.0.0/16\nFLANNEL_SUBNET=10.1.7.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range flannel.CheckSubnetEnv(env, flannel.SubnetEnvExpectation{
		Node: "node-c", Network: netip.MustParsePrefix("172.7.0.0/16"),
		Subnet: flannel.SubnetKey{IPv4: netip.MustParsePrefix("172.7.3.0/24")}, Source: "its lease",
	}) {
		fmt.Println(f)
	}
	// Output:
	// error subnet-env-stale: subnet.env says FLANNEL_SUBNET=10.1.7.1/24 but its lease is 172.7.3.0/24: the cni0 bridge still carries 10.1.7.1/24, and new pods fail with `failed to set bridge addr: "cni0" already has an IP address different from 172.7.3.1/24`; run the host clean-up steps
}
