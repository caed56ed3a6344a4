// Command capacity prints what a pod and Service layout can hold, per IP
// family, and every conflict it has, the way kube-controller-manager and
// kube-apiserver would see it.
//
//	go run ./examples/capacity --cluster-cidr 10.233.64.0/18 --node-mask 24 \
//	    --service-cidr 10.233.0.0/18 --nodes 76
//
// Exit codes: 0 the layout holds, 1 problems found, 2 bad input.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net/netip"
	"os"
	"strings"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Report is the -o json|yaml output. Its schema is documented in README.md.
type Report struct {
	Pods     []cidr.PodCapacity     `json:"pods"`
	Services []cidr.ServiceCapacity `json:"services"`
	// Nodes is the planned node count (--nodes), 0 when not given.
	Nodes    int            `json:"nodes,omitempty"`
	Problems []Problem      `json:"problems"`
	Overlaps []cidr.Overlap `json:"overlaps"`
}

// Problem is one thing wrong with the layout.
type Problem struct {
	Severity cidr.Severity `json:"severity"`
	Message  string        `json:"message"`
}

type options struct {
	clusterCIDR, serviceCIDR, nodeNetwork, output string
	nodeMask, nodeMaskV6, maxPods, nodes, minor   int
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "pod CIDR(s): one, or an IPv4,IPv6 pair (required)")
	fs.IntVar(&o.nodeMask, "node-mask", 0, "per-node prefix length (IPv4 in dual-stack; default 24 IPv4, 64 IPv6)")
	fs.IntVar(&o.nodeMaskV6, "node-mask-ipv6", 0, "per-node prefix length for IPv6 (default 64)")
	fs.StringVar(&o.serviceCIDR, "service-cidr", "", "Service CIDR(s): one, or an IPv4,IPv6 pair")
	fs.StringVar(&o.nodeNetwork, "node-network", "", "network(s) the nodes live on, comma-separated, checked for overlaps")
	fs.IntVar(&o.maxPods, "max-pods", 0, "kubelet maxPods (default 110)")
	fs.IntVar(&o.nodes, "nodes", 0, "planned number of nodes, checked against the capacity")
	fs.IntVar(&o.minor, "kubernetes-minor", 0, "Kubernetes 1.x minor version; 1.34+ lifts kube-apiserver's 20-bit Service range limit (default: assume 1.33 or older)")
	fs.StringVar(&o.output, "o", "text", "output format: text, json or yaml")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: capacity --cluster-cidr CIDR[,CIDR] [flags]")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "capacity: %v\n", err)
		return 2
	}
	if err := cli.NoArgs(fs); err != nil {
		fmt.Fprintf(stderr, "capacity: %v\n", err)
		return 2
	}
	rep, err := build(o)
	if err != nil {
		fmt.Fprintf(stderr, "capacity: %v\n", err)
		return 2
	}
	if o.output == "text" {
		printText(stdout, rep)
	} else if err := cli.Write(stdout, o.output, rep); err != nil {
		fmt.Fprintf(stderr, "capacity: %v\n", err)
		return 1
	}
	if len(rep.Problems) > 0 {
		return 1
	}
	return 0
}

// build validates the flags (bad input is an error) and computes the report
// (what the components would refuse is a problem, not an error).
func build(o options) (*Report, error) {
	if err := cli.CheckFormat(o.output); err != nil {
		return nil, err
	}
	if o.clusterCIDR == "" {
		return nil, errors.New("--cluster-cidr is required, e.g. --cluster-cidr 10.244.0.0/16")
	}
	clusters, err := cidr.ParseList(o.clusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("--cluster-cidr: %w", err)
	}
	for name, v := range map[string]int{"--node-mask": o.nodeMask, "--node-mask-ipv6": o.nodeMaskV6, "--max-pods": o.maxPods, "--nodes": o.nodes, "--kubernetes-minor": o.minor} {
		if v < 0 {
			return nil, fmt.Errorf("%s=%d: must not be negative", name, v)
		}
	}
	if o.nodeMaskV6 != 0 && !hasFamily(clusters, cidr.IPv6) {
		return nil, fmt.Errorf("--node-mask-ipv6=%d: --cluster-cidr %s has no IPv6 CIDR", o.nodeMaskV6, o.clusterCIDR)
	}
	var services []netip.Prefix
	if o.serviceCIDR != "" {
		if services, err = cidr.ParseList(o.serviceCIDR); err != nil {
			return nil, fmt.Errorf("--service-cidr: %w", err)
		}
	}
	var nodeNets []netip.Prefix
	if o.nodeNetwork != "" {
		for _, s := range strings.Split(o.nodeNetwork, ",") {
			p, err := cidr.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("--node-network: %w", err)
			}
			nodeNets = append(nodeNets, p)
		}
	}

	for _, c := range clusters {
		mask := o.nodeMask
		if cidr.FamilyOf(c) == cidr.IPv6 && (len(clusters) == 2 || o.nodeMaskV6 != 0) {
			mask = o.nodeMaskV6
		}
		if pc, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: c, NodeMask: mask, MaxPods: o.maxPods}); err != nil && pc.MaxNodes == nil {
			return nil, err // malformed: a mask out of range
		}
	}
	// The conflict rules are the doctor's: kube-controller-manager's flag
	// rules and the overlap rules of cidr.CheckLayout.
	flags := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: joinPrefixes(clusters), ServiceClusterIPRange: joinPrefixes(services)}
	dual := len(clusters) == 2
	switch {
	case dual:
		flags.NodeCIDRMaskSizeIPv4, flags.NodeCIDRMaskSizeIPv6 = o.nodeMask, o.nodeMaskV6
	case cidr.FamilyOf(clusters[0]) == cidr.IPv6 && o.nodeMaskV6 != 0:
		if o.nodeMask != 0 {
			return nil, fmt.Errorf("--node-mask=%d and --node-mask-ipv6=%d: a single-stack IPv6 --cluster-cidr %s takes one of them", o.nodeMask, o.nodeMaskV6, o.clusterCIDR)
		}
		flags.NodeCIDRMaskSizeIPv6 = o.nodeMaskV6
	default:
		flags.NodeCIDRMaskSize = o.nodeMask
	}
	var others []cidr.Range
	for _, n := range nodeNets {
		others = append(others, cidr.Range{Name: "--node-network", Kind: cidr.KindNodeNetwork, Prefix: n})
	}
	check := cidr.CheckLayout(flags, others...)
	if check.Refused {
		return nil, fmt.Errorf("--cluster-cidr %s: %w", o.clusterCIDR, errors.Join(check.Errors...))
	}

	rep := &Report{Nodes: o.nodes, Problems: []Problem{}, Overlaps: []cidr.Overlap{}}
	problem := func(sev cidr.Severity, format string, a ...any) {
		rep.Problems = append(rep.Problems, Problem{Severity: sev, Message: fmt.Sprintf(format, a...)})
	}
	for _, e := range check.Errors {
		problem(cidr.SeverityError, "%v", e)
	}
	for i, c := range clusters {
		pc, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: c, NodeMask: check.Layout.NodeMasks[i], MaxPods: o.maxPods})
		if err != nil && pc.MaxNodes == nil {
			return nil, err // malformed: a mask out of range
		}
		// Its rule errors are check.Errors, reported once above.
		rep.Pods = append(rep.Pods, pc)
		if o.nodes > 0 && pc.MaxNodes.Cmp(big.NewInt(int64(o.nodes))) < 0 {
			problem(cidr.SeverityError, "%d nodes planned but %s with /%d node subnets holds only %s nodes", o.nodes, c, pc.NodeMask, pc.MaxNodes)
		}
		if pc.PodIPsPerNode.Cmp(big.NewInt(int64(pc.MaxPods))) < 0 {
			problem(cidr.SeverityWarning, "maxPods %d exceeds the %s pod IPs of a /%d node subnet: pods beyond that fail to get an IP", pc.MaxPods, pc.PodIPsPerNode, pc.NodeMask)
		}
	}
	for _, s := range services {
		sc, err := cidr.ComputeServiceCapacity(s, cidr.ServiceRangeOptions{KubernetesMinor: o.minor})
		for _, e := range unjoin(err) {
			problem(cidr.SeverityError, "%v", e)
		}
		rep.Services = append(rep.Services, sc)
	}
	for _, ov := range check.Overlaps {
		rep.Overlaps = append(rep.Overlaps, ov)
		problem(ov.Severity, "%s", ov.Message())
	}
	return rep, nil
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func hasFamily(ps []netip.Prefix, f cidr.Family) bool {
	for _, p := range ps {
		if cidr.FamilyOf(p) == f {
			return true
		}
	}
	return false
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func printText(w io.Writer, r *Report) {
	for _, p := range r.Pods {
		fmt.Fprintf(w, "%s pods      %s, /%d per node\n", p.Family, p.ClusterCIDR, p.NodeMask)
		nodes := p.MaxNodes.String() + " max"
		if r.Nodes > 0 {
			nodes += fmt.Sprintf(" (%d planned)", r.Nodes)
		}
		fmt.Fprintf(w, "  nodes         %s\n", nodes)
		fmt.Fprintf(w, "  per node      %s addresses, %s pod IPs, %s pods (maxPods %d)\n", p.AddressesPerNode, p.PodIPsPerNode, p.PodsPerNode, p.MaxPods)
		fmt.Fprintf(w, "  pods total    %s\n", p.MaxPodsTotal)
		fmt.Fprintf(w, "  range usable  %s addresses\n", p.UsableAddresses)
	}
	for _, s := range r.Services {
		fmt.Fprintf(w, "%s services  %s\n", s.Family, s.CIDR)
		fmt.Fprintf(w, "  usable IPs    %s\n", s.UsableIPs)
		fmt.Fprintf(w, "  kubernetes    %s\n", orNone(s.KubernetesIP))
		fmt.Fprintf(w, "  cluster DNS   %s (the tenth address)\n", orNone(s.DNSIP))
	}
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "OK: no problems found")
		return
	}
	fmt.Fprintf(w, "%d problem(s):\n", len(r.Problems))
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  - %s: %s\n", p.Severity, p.Message)
	}
}

func orNone(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}
