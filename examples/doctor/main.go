// Command doctor audits the podCIDRs of a cluster's Nodes: missing,
// duplicated, overlapping or out-of-range podCIDRs, pods whose IPs lie outside
// their node's podCIDR, how many node subnets are left, whether
// kube-controller-manager starts with its current flags (and with proposed
// ones), and the plan that fixes what is broken.
//
//	doctor                                   # audit the bundled sample cluster (the second field story)
//	doctor --kubeconfig ~/.kube/config       # audit a live cluster (flags read from kube-controller-manager)
//	doctor -f nodes.yaml --cluster-cidr 10.244.0.0/16   # audit `kubectl get nodes -o yaml`
//	kubectl get nodes,pods -A -o json | doctor -f -     # flags from the kube-controller-manager pod
//	doctor --context prod --new-cluster-cidr 10.20.0.0/16   # would this change crash kube-controller-manager?
//
// The layout's conflict rules are capacity's (cidr.CheckLayout). Exit status:
// 0 healthy, 1 problems found, 2 bad input (every flag is checked before
// anything is read), 4 cluster unreachable or access forbidden.
package main

//go:generate go run ./sample/gen.go -o sample/cluster.yaml

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// sampleCluster is the second field story as `kubectl get nodes -o yaml`
// shows it; sample/gen.go writes it.
//
//go:embed sample/cluster.yaml
var sampleCluster []byte

// sampleFlags are the kube-controller-manager flags the sample cluster runs with.
func sampleFlags() cidr.ControllerManagerFlags {
	return cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/12", NodeCIDRMaskSize: 24, ServiceClusterIPRange: "10.96.0.0/12"}
}

func main() {
	ctx, stop := cli.SignalContext()
	code := runCtx(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it parses args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return runCtx(context.Background(), args, stdout, stderr)
}

func runCtx(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdin: os.Stdin, connect: func(kubeconfig, kubecontext string) (kubernetes.Interface, error) {
		return connect(ctx, kubeconfig, kubecontext, stderr)
	}}
	return a.run(ctx, args, stdout, stderr)
}

// connect reads a kubeconfig the way kubectl does, with an optional context,
// and checks that the API server answers: a kubeconfig that cannot be loaded
// is bad input (exit 2), a server that does not answer within seconds exit 4.
func connect(ctx context.Context, kubeconfig, kubecontext string, progress io.Writer) (kubernetes.Interface, error) {
	cfg, err := cli.Connect(ctx, kubeconfig, kubecontext, progress)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "cidrshift-doctor"
	return kubernetes.NewForConfig(cfg)
}

type app struct {
	connect func(kubeconfig, kubecontext string) (kubernetes.Interface, error)
	stdin   io.Reader
}

func bad(format string, args ...any) error { return cli.Usagef(format, args...) }

// errProblems means the audit found problems (exit status 1, nothing more to say).
var errProblems = errors.New("problems found")

type options struct {
	file, kubeconfig, kubecontext string
	clusterCIDR, nodeMask         string
	serviceCIDR                   string
	newClusterCIDR, newNodeMask   string
	pods                          bool
	output                        string
	set                           map[string]bool
}

// proposal is the kube-controller-manager preflight of proposed flags.
type proposal struct {
	Flags  cidr.ControllerManagerFlags `json:"flags"`
	Result cidr.PreflightResult        `json:"result"`
	// Conflicts are the proposed layout's overlaps (cidr.CheckLayout).
	Conflicts []cidr.Overlap `json:"conflicts,omitempty"`
}

func hasError(overlaps []cidr.Overlap) bool {
	for _, o := range overlaps {
		if o.Severity == cidr.SeverityError {
			return true
		}
	}
	return false
}

// report is what the doctor prints with -o json|yaml.
type report struct {
	// Source is "sample", "file FILE" or "cluster CONTEXT".
	Source string `json:"source"`
	// Flags are kube-controller-manager's current node IPAM flags, and where they come from.
	Flags       cidr.ControllerManagerFlags `json:"flags"`
	FlagsSource string                      `json:"flagsSource"`
	// LayoutWarnings are values the component reads differently than written.
	LayoutWarnings []string         `json:"layoutWarnings,omitempty"`
	Audit          *nodecidr.Report `json:"audit"`
	// Conflicts are the current layout's overlaps: cluster CIDRs, Service
	// CIDRs and well-known ranges (cidr.CheckLayout, as capacity reports them).
	Conflicts []cidr.Overlap `json:"conflicts,omitempty"`
	// ControllerManager is the start-up preflight with the current flags.
	ControllerManager cidr.PreflightResult `json:"controllerManager"`
	// Proposed is the preflight with --new-cluster-cidr / --new-node-mask.
	Proposed *proposal `json:"proposed,omitempty"`
	// FixPlan moves every node with a missing, duplicated, overlapping or out-of-range podCIDR.
	FixPlan      *nodecidr.Plan `json:"fixPlan,omitempty"`
	FixPlanError string         `json:"fixPlanError,omitempty"`
	Healthy      bool           `json:"healthy"`
}

func (a *app) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = a.execute(ctx, o, stdout)
	}
	if errors.Is(err, errProblems) {
		return cli.ExitProblems // the report says what
	}
	return cli.Fail(stderr, "doctor", err)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{set: map[string]bool{}}
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is one line; -h prints the usage below
	fs.StringVar(&o.file, "f", "", "audit an offline dump: `kubectl get nodes[,pods] -A -o yaml` or -o json (a v1 List or documents; - for stdin); streamed, any size")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "audit the cluster of this kubeconfig")
	fs.StringVar(&o.kubecontext, "context", "", "audit the cluster of this kubeconfig context")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "kube-controller-manager's current --cluster-cidr (read from the cluster when omitted)")
	fs.StringVar(&o.nodeMask, "node-mask", "", "its current --node-cidr-mask-size (one value, or IPv4,IPv6 for dual stack; default 24 / 64)")
	fs.StringVar(&o.serviceCIDR, "service-cidr", "", "its current --service-cluster-ip-range")
	fs.StringVar(&o.newClusterCIDR, "new-cluster-cidr", "", "a proposed --cluster-cidr: would kube-controller-manager start with it?")
	fs.StringVar(&o.newNodeMask, "new-node-mask", "", "a proposed --node-cidr-mask-size (default: the current one)")
	fs.BoolVar(&o.pods, "pods", true, "also check that pod IPs lie in their node's podCIDR")
	fs.StringVar(&o.output, "o", "text", "output format: text, json or yaml")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
			return nil, err
		}
		return nil, bad("%v", err)
	}
	if err := cli.NoArgs(fs); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if err := cli.CheckFormat(o.output); err != nil {
		return nil, bad("%v", err)
	}
	for _, name := range []string{"f", "kubeconfig", "context", "cluster-cidr", "node-mask", "service-cidr", "new-cluster-cidr", "new-node-mask"} {
		if v := fs.Lookup(name).Value.String(); o.set[name] && strings.TrimSpace(v) == "" {
			return nil, bad("-%s%s %q: must not be empty", map[bool]string{true: "-"}[len(name) > 1], name, v)
		}
	}
	// Values a person types are parsed before anything is read: the current
	// flags leniently, as kube-controller-manager reads them; proposed ones
	// strictly.
	// (Pairs are checked by kube-controller-manager's rules, cidr.CheckLayout.)
	for name, v := range map[string]string{"--cluster-cidr": o.clusterCIDR, "--service-cidr": o.serviceCIDR} {
		for _, item := range strings.Split(v, ",") {
			if _, _, err := cidr.ParseLenient(strings.TrimSpace(item)); v != "" && err != nil {
				return nil, bad("%s %q: %v", name, v, err)
			}
		}
	}
	if o.newClusterCIDR != "" {
		if _, err := cidr.ParseList(o.newClusterCIDR); err != nil {
			return nil, bad("--new-cluster-cidr: %v", err)
		}
	}
	for name, v := range map[string]string{"--node-mask": o.nodeMask, "--new-node-mask": o.newNodeMask} {
		for _, m := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(m)); v != "" && (err != nil || n < 1 || n > 128) {
				return nil, bad("%s %q: %q is not a prefix length (1 to 32 for IPv4, to 128 for IPv6)", name, v, m)
			}
		}
	}
	if o.file != "" && (o.set["kubeconfig"] || o.set["context"]) {
		return nil, bad("-f and --kubeconfig/--context exclude each other: audit a dump or a cluster")
	}
	if o.newNodeMask != "" && o.newClusterCIDR == "" {
		return nil, bad("--new-node-mask needs --new-cluster-cidr")
	}
	return o, nil
}

func (a *app) execute(ctx context.Context, o *options, stdout io.Writer) error {
	rep := &report{}
	var nodes []corev1.Node
	var pods []nodecidr.PodSummary
	var client kubernetes.Interface
	var discovered *cidr.ControllerManagerFlags
	switch {
	case o.file != "":
		rep.Source = "file " + o.file
		d, err := a.readDump(ctx, o.file)
		if err != nil {
			return err
		}
		if len(d.Nodes) == 0 {
			return bad("-f %s holds no Node; want the output of kubectl get nodes -o yaml", o.file)
		}
		nodes, pods = d.Nodes, d.Pods
		if f, src := flagsFromDump(d); src != "" {
			discovered, rep.FlagsSource = &f, src
		}
	case o.set["kubeconfig"] || o.set["context"]:
		rep.Source = "cluster"
		if o.kubecontext != "" {
			rep.Source += " " + o.kubecontext
		}
		c, err := a.connect(o.kubeconfig, o.kubecontext)
		if err != nil {
			return err
		}
		client = c
		if o.clusterCIDR == "" {
			d, err := nodecidr.DiscoverControllerManagerFlags(ctx, client)
			switch {
			case err == nil:
				discovered, rep.FlagsSource = &d.Flags, d.Source
				rep.LayoutWarnings = append(rep.LayoutWarnings, d.Warnings...)
			case errors.Is(err, nodecidr.ErrNotDiscovered):
				return bad("--cluster-cidr is required: %v", err)
			default:
				return err
			}
		}
	default:
		rep.Source = "sample"
		d, err := nodecidr.DecodeObjects(sampleCluster)
		if err != nil {
			return fmt.Errorf("the bundled sample is broken: %w", err)
		}
		nodes = d.Nodes
		f := sampleFlags()
		discovered, rep.FlagsSource = &f, "the sample cluster's kube-controller-manager"
	}

	flags, err := currentFlags(o, discovered)
	if err != nil {
		return err
	}
	if o.clusterCIDR != "" {
		rep.FlagsSource = "command line"
	}
	rep.Flags = flags
	// The layout's conflict rules are capacity's: cidr.CheckLayout.
	check := cidr.CheckLayout(flags)
	if check.Refused {
		msg := fmt.Sprintf("kube-controller-manager would refuse %s: %v", strings.Join(flags.Args(), " "), errors.Join(check.Errors...))
		if o.clusterCIDR != "" || o.nodeMask != "" || o.serviceCIDR != "" {
			return bad("--cluster-cidr %q --node-mask %q --service-cidr %q: %s", o.clusterCIDR, o.nodeMask, o.serviceCIDR, msg)
		}
		return fmt.Errorf("the flags read from %s: %s", rep.FlagsSource, msg)
	}
	layout := check.Layout
	for _, w := range check.Warnings {
		rep.LayoutWarnings = append(rep.LayoutWarnings, w.String())
	}
	rep.Conflicts = check.Overlaps

	var prop *proposal
	if o.newClusterCIDR != "" {
		p, err := proposedFlags(o, flags)
		if err != nil {
			return err
		}
		pc := cidr.CheckLayout(p)
		if pc.Refused {
			return bad("--new-cluster-cidr %q --new-node-mask %q: kube-controller-manager would refuse %s: %v", o.newClusterCIDR, o.newNodeMask,
				strings.Join(p.Args(), " "), errors.Join(pc.Errors...))
		}
		prop = &proposal{Flags: p, Conflicts: pc.Overlaps}
	}

	auditOpts := nodecidr.AuditOptions{Layout: layout, Pods: o.pods}
	if client != nil {
		// One listing of the Nodes serves the audit, the preflight and the plan.
		if nodes, err = nodecidr.ListNodes(ctx, client, nodecidr.ListOptions{}); err != nil {
			return err
		}
		if len(nodes) == 0 {
			// An audit that read nothing is no evidence of health.
			return fmt.Errorf("the cluster (%s) has no Node objects: nothing to audit", rep.Source)
		}
		if rep.Audit, err = nodecidr.AuditListed(ctx, client, nodes, auditOpts); err != nil {
			return err
		}
	} else {
		rep.Audit = nodecidr.AuditNodes(nodes, pods, auditOpts)
	}
	rep.ControllerManager = nodecidr.Preflight(flags, nodes)
	if prop != nil {
		prop.Result = nodecidr.Preflight(prop.Flags, nodes)
		rep.Proposed = prop
	}
	if rep.Audit.Count(cidr.SeverityError) > 0 {
		plan, err := nodecidr.PlanNodes(nodes, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: layout})
		if err != nil {
			rep.FixPlanError = err.Error()
		} else if len(plan.Steps) > 0 {
			rep.FixPlan = plan
		}
	}
	rep.Healthy = rep.Audit.Count(cidr.SeverityError) == 0 && rep.ControllerManager.WouldStart && (prop == nil || prop.Result.WouldStart) &&
		!hasError(rep.Conflicts) && (prop == nil || !hasError(prop.Conflicts))

	switch o.output {
	case "json", "yaml":
		if err := cli.Write(stdout, o.output, rep); err != nil {
			return err
		}
	default:
		printText(stdout, rep, o)
	}
	if !rep.Healthy {
		return errProblems
	}
	return nil
}

// readDump streams the dump in file (- for stdin) through nodecidr.ReadDump.
func (a *app) readDump(ctx context.Context, file string) (*nodecidr.Dump, error) {
	var r io.Reader = a.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, bad("-f: %v", err)
		}
		defer f.Close()
		r = f
	}
	d, err := nodecidr.ReadDump(ctx, r)
	if err != nil {
		return nil, bad("-f %s: %v", file, err)
	}
	return d, nil
}

// flagsFromDump finds a kube-controller-manager pod in a dump (kubectl get
// nodes,pods -A -o yaml) and reads its flags.
func flagsFromDump(d *nodecidr.Dump) (cidr.ControllerManagerFlags, string) {
	for _, p := range d.ControlPlanePods {
		if p.Namespace != "kube-system" || p.Labels["component"] != cidr.KubeControllerManager {
			continue
		}
		for _, c := range p.Spec.Containers {
			if f, found, err := nodecidr.ParseControllerManagerArgs(append(append([]string(nil), c.Command...), c.Args...)); found && err == nil && f.ClusterCIDR != "" {
				return f, "pod " + p.Namespace + "/" + p.Name + " in the dump"
			}
		}
	}
	return cidr.ControllerManagerFlags{}, ""
}

// currentFlags combines the command line with what was discovered; the
// command line wins, and --cluster-cidr is required when nothing was found.
func currentFlags(o *options, discovered *cidr.ControllerManagerFlags) (cidr.ControllerManagerFlags, error) {
	var f cidr.ControllerManagerFlags
	switch {
	case o.clusterCIDR != "":
		f = cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: o.clusterCIDR}
	case discovered != nil:
		f = *discovered
		f.AllocateNodeCIDRs = true
	default:
		return f, bad("--cluster-cidr is required: the dump has no kube-controller-manager pod to read it from")
	}
	if o.nodeMask != "" {
		f.NodeCIDRMaskSize, f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6 = 0, 0, 0
		if err := setMasks(&f, f.ClusterCIDR, o.nodeMask, "--node-mask", cidr.ParseLenient); err != nil {
			return f, err
		}
	}
	if o.serviceCIDR != "" {
		f.ServiceClusterIPRange = o.serviceCIDR
	}
	return f, nil
}

// proposedFlags are the current flags with the proposed cluster CIDR and
// masks; values a person types for a new layout are parsed strictly.
func proposedFlags(o *options, cur cidr.ControllerManagerFlags) (cidr.ControllerManagerFlags, error) {
	if _, err := cidr.ParseList(o.newClusterCIDR); err != nil {
		return cur, bad("--new-cluster-cidr: %v", err)
	}
	p := cur
	p.ClusterCIDR = o.newClusterCIDR
	mask := o.newNodeMask
	if mask == "" {
		mask = maskOf(cur)
	}
	p.NodeCIDRMaskSize, p.NodeCIDRMaskSizeIPv4, p.NodeCIDRMaskSizeIPv6 = 0, 0, 0
	if mask != "" {
		name := "--new-node-mask"
		if o.newNodeMask == "" {
			name = "--node-mask"
		}
		strict := func(s string) (netip.Prefix, *cidr.Warning, error) { pr, err := cidr.Parse(s); return pr, nil, err }
		if err := setMasks(&p, p.ClusterCIDR, mask, name, strict); err != nil {
			return p, err
		}
	}
	return p, nil
}

func maskOf(f cidr.ControllerManagerFlags) string {
	switch {
	case f.NodeCIDRMaskSize != 0:
		return strconv.Itoa(f.NodeCIDRMaskSize)
	case f.NodeCIDRMaskSizeIPv4 != 0 && f.NodeCIDRMaskSizeIPv6 != 0:
		return fmt.Sprintf("%d,%d", f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6)
	}
	return ""
}

// setMasks sets the mask flags from "24" or "24,64" (one per cluster CIDR).
func setMasks(f *cidr.ControllerManagerFlags, clusters, mask, flagName string, parse func(string) (netip.Prefix, *cidr.Warning, error)) error {
	cs := strings.Split(clusters, ",")
	ms := strings.Split(mask, ",")
	if len(ms) != len(cs) {
		if len(ms) == 1 && len(cs) == 2 {
			return bad("%s %q: a dual-stack cluster CIDR needs one mask per family, e.g. 24,64", flagName, mask)
		}
		return bad("%s %q: want %d value(s), one per cluster CIDR %s", flagName, mask, len(cs), clusters)
	}
	for i, m := range ms {
		n, err := strconv.Atoi(strings.TrimSpace(m))
		if err != nil || n < 1 || n > 128 {
			return bad("%s %q: %q is not a prefix length", flagName, mask, m)
		}
		if len(cs) == 1 {
			f.NodeCIDRMaskSize = n
			return nil
		}
		p, _, err := parse(strings.TrimSpace(cs[i]))
		if err != nil {
			return bad("cluster CIDR %q: %v", cs[i], err)
		}
		if cidr.FamilyOf(p) == cidr.IPv4 {
			f.NodeCIDRMaskSizeIPv4 = n
		} else {
			f.NodeCIDRMaskSizeIPv6 = n
		}
	}
	return nil
}

const maxPerGroup = 30

func printText(w io.Writer, r *report, o *options) {
	a := r.Audit
	switch {
	case r.Source == "sample":
		fmt.Fprintln(w, "cidrshift doctor: the bundled sample cluster (the second field story: 300 flannel nodes after two --cluster-cidr changes)")
		fmt.Fprintln(w, "  audit yours with --kubeconfig FILE, --context NAME, or -f nodes.yaml")
	default:
		fmt.Fprintf(w, "cidrshift doctor: %s\n", r.Source)
	}
	fmt.Fprintf(w, "kube-controller-manager: %s  (from %s)\n", strings.Join(r.Flags.Args(), " "), r.FlagsSource)
	for _, lw := range r.LayoutWarnings {
		fmt.Fprintf(w, "  note: %s\n", lw)
	}

	errs, warns := a.Count(cidr.SeverityError), a.Count(cidr.SeverityWarning)
	verdict := "HEALTHY"
	if !r.Healthy {
		verdict = "PROBLEMS FOUND"
	}
	fmt.Fprintf(w, "\nSUMMARY: %s. %d nodes", verdict, a.Nodes)
	if a.Pods > 0 {
		fmt.Fprintf(w, ", %d pods", a.Pods)
	}
	fmt.Fprintf(w, "; %d errors, %d warnings", errs, warns)
	if r.FixPlan != nil {
		fmt.Fprintf(w, "; %d nodes need a new podCIDR", len(r.FixPlan.Steps))
	}
	fmt.Fprintln(w)
	for _, c := range a.Capacity {
		fmt.Fprintf(w, "  %s %s in /%d subnets: %s total, %s used, %s reserved for Services, %s free",
			c.Family, c.ClusterCIDR, c.NodeMask, c.Subnets, c.Used, c.Reserved, c.Free)
		if c.NodesWithout > 0 {
			fmt.Fprintf(w, "; %d nodes without one", c.NodesWithout)
		}
		fmt.Fprintln(w)
	}
	printPreflight(w, "  kube-controller-manager with the current flags", r.ControllerManager)
	if r.Proposed != nil {
		printPreflight(w, "  kube-controller-manager with "+strings.Join(r.Proposed.Flags.Args()[1:], " "), r.Proposed.Result)
	}

	for _, sev := range []cidr.Severity{cidr.SeverityError, cidr.SeverityWarning, cidr.SeverityInfo} {
		var kinds []nodecidr.FindingKind
		byKind := map[nodecidr.FindingKind][]nodecidr.Finding{}
		for _, f := range a.Findings {
			if f.Severity != sev {
				continue
			}
			if _, ok := byKind[f.Kind]; !ok {
				kinds = append(kinds, f.Kind)
			}
			byKind[f.Kind] = append(byKind[f.Kind], f)
		}
		if len(kinds) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%sS\n", strings.ToUpper(string(sev)))
		for _, k := range kinds {
			fs := byKind[k]
			fmt.Fprintf(w, "  %s (%d)\n", k, len(fs))
			for i, f := range fs {
				if i == maxPerGroup {
					fmt.Fprintf(w, "    ... and %d more (-o yaml lists them all)\n", len(fs)-maxPerGroup)
					break
				}
				fmt.Fprintf(w, "    - %s\n", f.Message)
			}
		}
	}

	var conflicts []string
	for _, c := range r.Conflicts {
		conflicts = append(conflicts, "current flags: "+c.String())
	}
	if r.Proposed != nil {
		for _, c := range r.Proposed.Conflicts {
			conflicts = append(conflicts, "proposed flags: "+c.String())
		}
	}
	if len(conflicts) > 0 {
		fmt.Fprintln(w, "\nLAYOUT CONFLICTS")
		for _, c := range conflicts {
			fmt.Fprintf(w, "  - %s\n", c)
		}
	}

	if crashes := allCrashes(r); len(crashes) > 0 {
		fmt.Fprintln(w, "\nKUBE-CONTROLLER-MANAGER CRASHES")
		for i, c := range crashes {
			if i == maxPerGroup {
				fmt.Fprintf(w, "  ... and %d more (-o yaml lists them all)\n", len(crashes)-maxPerGroup)
				break
			}
			fmt.Fprintf(w, "  - %s\n", c)
		}
	}

	switch {
	case r.FixPlan != nil:
		p := r.FixPlan
		fmt.Fprintf(w, "\nFIX PLAN %s: %d nodes (workers by name, control plane last)\n", p.ID(), len(p.Steps))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tACTION\tOLD\tNEW\tWHY")
		for _, s := range p.Steps {
			old := strings.Join(s.OldPodCIDRs, ",")
			if old == "" {
				old = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", s.Node, s.Action, old, strings.Join(s.NewPodCIDRs, ","), s.Reason)
		}
		tw.Flush()
		for _, warn := range p.Warnings {
			fmt.Fprintln(w, "  warning:", warn)
		}
		fmt.Fprintf(w, "  Carry it out with: noderecreate --fix --cluster-cidr %s%s --apply --cordon --delete-pods\n", r.Flags.ClusterCIDR, maskArg(r.Flags))
		fmt.Fprintln(w, "  (recreate = delete + create with the new podCIDR, journaled and resumable; patch = the allowed update of an empty podCIDR)")
	case r.FixPlanError != "":
		fmt.Fprintf(w, "\nNO FIX PLAN: %s\n", r.FixPlanError)
	}
}

func maskArg(f cidr.ControllerManagerFlags) string {
	if m := maskOf(f); m != "" {
		return " --node-mask " + m
	}
	return ""
}

func printPreflight(w io.Writer, what string, res cidr.PreflightResult) {
	switch {
	case res.IPAMDisabled:
		fmt.Fprintf(w, "%s: node IPAM disabled (--allocate-node-cidrs=false)\n", what)
	case res.WouldStart:
		fmt.Fprintf(w, "%s: starts\n", what)
	case len(res.FlagErrors) > 0:
		fmt.Fprintf(w, "%s: REFUSES the flags: %s\n", what, strings.Join(res.FlagErrors, "; "))
	default:
		fmt.Fprintf(w, "%s: CRASH-LOOPS on %d node(s), listed below\n", what, len(res.Crashes))
	}
}

func allCrashes(r *report) []string {
	var out []string
	for _, c := range r.ControllerManager.Crashes {
		out = append(out, "current flags: "+c.Message)
	}
	if r.Proposed != nil {
		for _, c := range r.Proposed.Result.Crashes {
			out = append(out, "proposed flags: "+c.Message)
		}
	}
	return out
}
