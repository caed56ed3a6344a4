package migrate

import (
	"net/netip"

	"github.com/cidrshift/cidrshift/cidr"
)

// keptFamily is, in a dual-stack cluster, the family a one-family move
// keeps, as kube-controller-manager's flags give it: its cluster CIDR
// (zero in a single-stack cluster), whether --cluster-cidr lists it first,
// and its node mask.
type keptFamily struct {
	cidr  netip.Prefix
	first bool
	mask  int
}

// keptFamilyOf reads, from kube-controller-manager's flags, the family
// other than moved's.
func keptFamilyOf(f cidr.ControllerManagerFlags, moved netip.Prefix) keptFamily {
	ps, _, err := cidr.ParseListLenient(f.ClusterCIDR)
	if err != nil {
		return keptFamily{}
	}
	for i, p := range ps {
		if p.Addr().Is4() == moved.Addr().Is4() {
			continue
		}
		k := keptFamily{cidr: p, first: i == 0, mask: f.NodeCIDRMaskSizeIPv6}
		if p.Addr().Is4() {
			k.mask = max(f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSize)
		}
		if k.mask == 0 {
			k.mask = cidr.DefaultNodeMaskIPv4
			if p.Addr().Is6() {
				k.mask = cidr.DefaultNodeMaskIPv6
			}
		}
		return k
	}
	return keptFamily{}
}

// clusterCIDR is --cluster-cidr (and kubeadm's podSubnet) once the moved
// family's range is to: to alone in a single-stack cluster, else both in
// the cluster's order.
func (k keptFamily) clusterCIDR(to netip.Prefix) string {
	switch {
	case !k.cidr.IsValid():
		return to.String()
	case k.first:
		return k.cidr.String() + "," + to.String()
	}
	return to.String() + "," + k.cidr.String()
}
