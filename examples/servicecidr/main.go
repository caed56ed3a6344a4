// Command servicecidr shows a cluster's ServiceCIDRs, adds one, and moves
// Services to a new range without breaking cluster DNS: plan, apply (with a
// crash-safe journal), verify.
//
//	servicecidr show
//	servicecidr add    --to 172.24.0.0/15 [--apply]
//	servicecidr plan   --to 172.24.0.0/15 [--from 100.64.0.0/13] [-o yaml > plan.yaml]
//	servicecidr apply  --to 172.24.0.0/15 | --plan plan.yaml  --journal DIR --apply [--delete-old]
//	servicecidr verify --to 172.24.0.0/15 [--from 100.64.0.0/13]
//
// It reads the kubeconfig the way kubectl does (--kubeconfig, --context,
// KUBECONFIG), prints text by default and JSON or YAML with -o, never changes
// the cluster without --apply, and exits 2 with one line on bad input.
//
// add --apply and apply --apply hold the Lease cidrshift-servicecidr in
// --lock-namespace (default kube-system) while they write, so a second run
// is refused naming the holder; --steal-lock takes over a Lease that
// expired, --no-lock takes none (RBAC: get, create, update on leases there).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/internal/lease"
	"github.com/cidrshift/cidrshift/servicecidr"
)

func main() {
	ctx, stop := cli.SignalContext()
	code := runWith(ctx, os.Args[1:], os.Stdout, os.Stderr, kubeconfigConnector)
	stop()
	os.Exit(code)
}

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return runWith(context.Background(), args, stdout, stderr, kubeconfigConnector)
}

// connector builds a servicecidr.Client for a kubeconfig and context.
type connector func(ctx context.Context, kubeconfig, kubeContext string) (*servicecidr.Client, error)

func kubeconfigConnector(ctx context.Context, kubeconfig, kubeContext string) (*servicecidr.Client, error) {
	cfg, err := cli.Connect(ctx, kubeconfig, kubeContext, os.Stderr)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return servicecidr.New(ctx, servicecidr.Options{Kube: kube, Dynamic: dyn})
}

const usage = `usage: servicecidr <command> [flags]

commands:
  show     list ServiceCIDRs, which one holds each ClusterIP, and what blocks a deletion
  add      validate a new range and (with --apply) create a ServiceCIDR for it
  plan     compute the move of every Service in --from to --to (-o yaml saves it)
  apply    carry out a plan (client dry run unless --apply; --journal makes it crash-safe)
  verify   prove that every ClusterIP lies in --to

run "servicecidr <command> -h" for its flags`

// badf is bad input: exit code 2.
func badf(format string, args ...any) error { return cli.Usagef(format, args...) }

// errHelp ends a run that printed help.
var errHelp = errors.New("help")

// errFailed ends a run whose outcome was printed and is a failure (exit 1).
var errFailed = errors.New("failed")

type app struct {
	ctx     context.Context
	stdout  io.Writer
	stderr  io.Writer
	connect connector

	kubeconfig, kubeContext, output string
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	a := &app{ctx: ctx, stdout: stdout, stderr: stderr, connect: connect}
	err := a.dispatch(args)
	switch {
	case err == nil, errors.Is(err, errHelp):
		return cli.ExitOK
	case errors.Is(err, errFailed):
		return cli.ExitProblems
	}
	return cli.Fail(stderr, "servicecidr", err, badInput...)
}

// badInput are the servicecidr errors that mean the input was refused
// before anything was written: exit code 2.
var badInput = []error{servicecidr.ErrInvalid, servicecidr.ErrConflict, servicecidr.ErrPlanFormat, servicecidr.ErrRangeFull}

func (a *app) dispatch(args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(a.stderr, usage)
		return badf("no command given; want one of show, add, plan, apply, verify")
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(a.stdout, usage)
		return errHelp
	case "show":
		return a.show(args[1:])
	case "add":
		return a.add(args[1:])
	case "plan":
		return a.plan(args[1:])
	case "apply":
		return a.apply(args[1:])
	case "verify":
		return a.verify(args[1:])
	}
	return badf("unknown command %q; want one of show, add, plan, apply, verify", args[0])
}

// flags returns a flag set with the common flags.
func (a *app) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("servicecidr "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&a.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&a.output, "o", "", "output format: json or yaml (default: text)")
	return fs
}

func (a *app) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(a.stdout)
			fmt.Fprintf(a.stdout, "usage of %s:\n", fs.Name())
			fs.PrintDefaults()
			return errHelp
		}
		return badf("%s", err)
	}
	if err := cli.NoArgs(fs); err != nil {
		return err
	}
	switch a.output {
	case "", "json", "yaml":
	default:
		return badf("-o %q: want json or yaml", a.output)
	}
	return nil
}

// planFlags are the flags that describe the user's intent for a move.
type planFlags struct {
	from, to, dnsService, allocate, name, podCIDR, nodeNetwork string
	includeLB, allowWellKnown                                  bool
}

func (p *planFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.from, "from", "", "old Service range(s), comma-separated (default: the \"kubernetes\" ServiceCIDR)")
	fs.StringVar(&p.to, "to", "", "new Service range(s), one per family, comma-separated (required)")
	fs.StringVar(&p.dnsService, "dns-service", "", "cluster DNS Service as namespace/name (default kube-system/kube-dns, else the one labelled k8s-app=kube-dns)")
	fs.StringVar(&p.allocate, "allocate", "offset", "new address choice: offset (keep each offset, DNS keeps the tenth address) or free (lowest free)")
	fs.BoolVar(&p.includeLB, "include-loadbalancers", false, "also move type=LoadBalancer Services (their external address may change)")
	fs.StringVar(&p.name, "name", "", "name of the ServiceCIDR to create for --to (default cidrshift-<range>)")
	fs.StringVar(&p.podCIDR, "pod-cidr", "", "the cluster's pod CIDR(s), to check for conflicts")
	fs.StringVar(&p.nodeNetwork, "node-network", "", "network(s) the nodes live on, comma-separated, to check for conflicts")
	fs.BoolVar(&p.allowWellKnown, "allow-well-known", false, "accept a --to overlapping a special-purpose range such as 100.64.0.0/10 (Tailscale, CGNAT)")
}

func parseList(field, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		ps, err := servicecidr.ParseCIDRs(field, strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	return out, nil
}

func (p *planFlags) options() (servicecidr.PlanOptions, error) {
	var o servicecidr.PlanOptions
	if p.to == "" {
		return o, badf("--to is required: the new Service range, e.g. --to 172.24.0.0/15")
	}
	var err error
	if o.To, err = servicecidr.ParseCIDRs("--to", p.to); err != nil {
		return o, err
	}
	if p.from != "" {
		if o.From, err = servicecidr.ParseCIDRs("--from", p.from); err != nil {
			return o, err
		}
	}
	switch servicecidr.AllocateMode(p.allocate) {
	case servicecidr.AllocateOffset, servicecidr.AllocateFree:
		o.Allocate = servicecidr.AllocateMode(p.allocate)
	default:
		return o, badf("--allocate %q: want offset or free", p.allocate)
	}
	if err := checkName(p.name); err != nil {
		return o, err
	}
	o.DNSService, o.IncludeLoadBalancers, o.ServiceCIDRName = p.dnsService, p.includeLB, p.name
	if o.Validate.PodCIDRs, err = parseList("--pod-cidr", p.podCIDR); err != nil {
		return o, err
	}
	if o.Validate.NodeNetworks, err = parseList("--node-network", p.nodeNetwork); err != nil {
		return o, err
	}
	o.Validate.AllowWellKnown = p.allowWellKnown
	return o, nil
}

func (a *app) client() (*servicecidr.Client, error) {
	return a.connect(a.ctx, a.kubeconfig, a.kubeContext)
}

// emit prints v as JSON or YAML when -o asks for it and reports whether it did.
func (a *app) emit(v any) (bool, error) {
	if a.output != "json" && a.output != "yaml" {
		return false, nil
	}
	return true, cli.Write(a.stdout, a.output, v)
}

// --- show ---

func (a *app) show(args []string) error {
	fs := a.flags("show")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	inv, err := c.Inventory(a.ctx)
	if err != nil {
		return err
	}
	if done, err := a.emit(inv); done {
		return err
	}
	fmt.Fprintf(a.stdout, "Kubernetes %s, ServiceCIDR %s, ClusterIP owners from %s\n\n", inv.Server.GitVersion, inv.APIVersion.GroupVersion(), inv.Source)
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICECIDR\tCIDRS\tSTATE\tCLUSTERIPS")
	for _, sc := range inv.ServiceCIDRs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", sc.Name, prefixes(sc.CIDRs), sc.State(), sc.ClusterIPs)
	}
	tw.Flush()
	fmt.Fprintln(a.stdout)
	tw = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tTYPE\tCLUSTERIP\tSERVICECIDR")
	for _, s := range inv.Services {
		for _, ip := range s.IPs {
			owner := strings.Join(ip.ServiceCIDRs, ",")
			if owner == "" {
				owner = "(none)"
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", s.Namespace, s.Name, s.Type, ip.IP, owner)
		}
	}
	tw.Flush()
	for _, sc := range inv.ServiceCIDRs {
		if sc.Deletion != nil {
			fmt.Fprintln(a.stdout, "\n"+sc.Deletion.Summary)
		}
	}
	for _, s := range inv.OutOfRange {
		fmt.Fprintln(a.stdout, "outside every ServiceCIDR:", s)
	}
	for _, o := range inv.Orphans {
		fmt.Fprintf(a.stdout, "IPAddress %s names %s, which does not hold it\n", o.IP, o.ParentRef)
	}
	return nil
}

// --- add ---

func (a *app) add(args []string) error {
	fs := a.flags("add")
	var to, name, dry, podCIDR, nodeNet string
	var apply, allowWK bool
	var wait time.Duration
	var lock cli.LockFlags
	lock.Register(fs)
	fs.StringVar(&to, "to", "", "the new range(s), one per family, comma-separated (required)")
	fs.StringVar(&name, "name", "", "ServiceCIDR name (default cidrshift-<range>)")
	fs.BoolVar(&apply, "apply", false, "create the ServiceCIDR (otherwise only validate)")
	fs.StringVar(&dry, "dry-run", "", "client or server")
	fs.DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the ServiceCIDR to become Ready")
	fs.StringVar(&podCIDR, "pod-cidr", "", "the cluster's pod CIDR(s), to check for conflicts")
	fs.StringVar(&nodeNet, "node-network", "", "network(s) the nodes live on, to check for conflicts")
	fs.BoolVar(&allowWK, "allow-well-known", false, "accept an overlap with a special-purpose range such as 100.64.0.0/10")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if to == "" {
		return badf("--to is required: the range to add, e.g. --to 172.24.0.0/15")
	}
	if err := checkDryRun(dry); err != nil {
		return err
	}
	if err := checkApplyDryRun(apply, dry); err != nil {
		return err
	}
	if err := cli.NonNegative("wait", wait); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	if err := lock.Check(); err != nil {
		return err
	}
	cidrs, err := servicecidr.ParseCIDRs("--to", to)
	if err != nil {
		return err
	}
	vo := servicecidr.ValidateOptions{Field: "--to", AllowWellKnown: allowWK}
	if vo.PodCIDRs, err = parseList("--pod-cidr", podCIDR); err != nil {
		return err
	}
	if vo.NodeNetworks, err = parseList("--node-network", nodeNet); err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if vo.Existing, err = c.List(a.ctx); err != nil {
		return err
	}
	vo.KubernetesMinor = c.Server().Minor
	val, err := servicecidr.Validate(cidrs, vo)
	if err != nil {
		return err
	}
	// ServiceCIDRs may nest, but one inside a range already served adds no
	// address: it only keeps that range's addresses held when it is retired.
	for _, p := range cidrs {
		for _, sc := range vo.Existing {
			for _, q := range sc.CIDRs {
				if !sc.Terminating() && q.Overlaps(p) && q.Bits() <= p.Bits() {
					return badf("--to %s: already served by ServiceCIDR %s (%s); add a range outside every existing ServiceCIDR", p, sc.Name, q)
				}
			}
		}
	}
	if name == "" {
		name = servicecidr.TargetName(cidrs)
	}
	type result struct {
		Validation servicecidr.Validation   `json:"validation"`
		Created    *servicecidr.ServiceCIDR `json:"created,omitempty"`
		Action     string                   `json:"action"`
	}
	r := result{Validation: val}
	switch {
	case !apply && dry == "", dry == "client":
		r.Action = fmt.Sprintf("would create ServiceCIDR %s %s (run with --apply)", name, prefixes(cidrs))
	default:
		if dry == "" {
			release, err := lock.Hold(a.ctx, c.Kube(), lease.ScopeServiceCIDR)
			if err != nil {
				return err
			}
			defer release()
		}
		sc, err := c.Create(a.ctx, name, cidrs, servicecidr.WriteOptions{DryRun: dry == "server"})
		if err != nil {
			return err
		}
		r.Action = fmt.Sprintf("created ServiceCIDR %s %s", name, prefixes(cidrs))
		if dry == "server" {
			r.Action = fmt.Sprintf("server accepted ServiceCIDR %s %s (dry run, not stored)", name, prefixes(cidrs))
		} else if sc, err = c.WaitReady(a.ctx, name, servicecidr.WaitOptions{Timeout: wait}); err != nil {
			return err
		} else {
			r.Action += ", Ready"
		}
		r.Created = &sc
	}
	if done, err := a.emit(r); done {
		return err
	}
	for _, cp := range val.Capacity {
		fmt.Fprintf(a.stdout, "%s %s: %s usable ClusterIPs, kubernetes Service %s, DNS %s\n", cp.Family, cp.CIDR, cp.UsableIPs, cp.KubernetesIP, cp.DNSIP)
	}
	for _, w := range val.Warnings {
		fmt.Fprintln(a.stdout, "warning:", w)
	}
	fmt.Fprintln(a.stdout, r.Action)
	return nil
}

func checkDryRun(s string) error {
	switch s {
	case "", "client", "server":
		return nil
	}
	return badf("--dry-run %q: want client or server", s)
}

// checkApplyDryRun refuses --apply with --dry-run client: one asks for a
// change, the other for none.
func checkApplyDryRun(apply bool, dry string) error {
	if apply && dry == "client" {
		return badf("--apply and --dry-run client conflict: --apply changes the cluster, --dry-run client only prints; give one (--apply --dry-run server asks the API server to check every write)")
	}
	return nil
}

// checkName validates a ServiceCIDR name given with --name.
func checkName(name string) error {
	if name == "" {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return badf("--name %q: not a valid ServiceCIDR name: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// --- plan ---

func (a *app) plan(args []string) error {
	fs := a.flags("plan")
	var pf planFlags
	pf.register(fs)
	if err := a.parse(fs, args); err != nil {
		return err
	}
	o, err := pf.options()
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	p, err := c.Plan(a.ctx, o)
	if err != nil {
		return err
	}
	if done, err := a.emit(p); done {
		return err
	}
	printPlan(a.stdout, p)
	return nil
}

func printPlan(w io.Writer, p *servicecidr.Plan) {
	target := "create ServiceCIDR " + p.Target.Name
	if p.Target.Exists {
		target = "use ServiceCIDR " + p.Target.Name
	}
	fmt.Fprintf(w, "move Services from %s to %s (%s allocation; %s)\n\n", prefixes(p.From), prefixes(p.To), p.Allocate, target)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tSERVICE\tTYPE\tOLD\tNEW\tNOTE")
	for i, m := range p.Moves {
		note := m.Note
		if m.Role == "dns" {
			note = strings.TrimPrefix("cluster DNS; "+note, "; ")
			note = strings.TrimSuffix(note, "; ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i+1, m.Key(), m.Type, addrList(m.OldIPs), addrList(m.NewIPs), note)
	}
	if k := p.Kubernetes; k != nil {
		fmt.Fprintf(tw, "last\t%s\t%s\t%s\t%s\t%s\n", k.Key(), k.Type, addrList(k.OldIPs), addrList(k.NewIPs), "recreated by kube-apiserver after its flags change")
	}
	tw.Flush()
	if len(p.Skipped) > 0 {
		fmt.Fprintln(w, "\nleft alone:")
		for _, s := range p.Skipped {
			fmt.Fprintf(w, "  %s/%s: %s\n", s.Namespace, s.Name, s.Reason)
		}
	}
	fmt.Fprintln(w, "\nto do by hand:")
	for _, m := range p.Manual {
		change := ""
		if m.Old != "" || m.New != "" {
			change = fmt.Sprintf(" (%s -> %s)", m.Old, m.New)
		}
		fmt.Fprintf(w, "  %s: %s%s\n", m.Component, m.Action, change)
	}
	if n := len(p.PodsToRestart); n > 0 {
		show := p.PodsToRestart[:min(n, 10)]
		more := ""
		if n > 10 {
			more = fmt.Sprintf(" and %d more", n-10)
		}
		fmt.Fprintf(w, "\npods to restart after the DNS move: %s%s\n", strings.Join(show, ", "), more)
	}
	for _, x := range p.Warnings {
		fmt.Fprintln(w, "warning:", x)
	}
}

// --- apply ---

func (a *app) apply(args []string) error {
	fs := a.flags("apply")
	var pf planFlags
	pf.register(fs)
	var planFile, journalDir, dry string
	var doApply, deleteOld, deleteKube bool
	var drain time.Duration
	var concurrency int
	var qps float64
	var lock cli.LockFlags
	lock.Register(fs)
	fs.StringVar(&planFile, "plan", "", "a plan saved with plan -o yaml (instead of --from/--to)")
	fs.StringVar(&journalDir, "journal", "", "journal directory; required with --apply; run again with the same one to resume")
	fs.BoolVar(&doApply, "apply", false, "change the cluster (otherwise a client dry run)")
	fs.StringVar(&dry, "dry-run", "", "client (print only) or server (the API server checks every write, stores nothing)")
	fs.BoolVar(&deleteOld, "delete-old", false, "mark the old ServiceCIDR(s) for deletion once the new one is Ready (they stay Terminating until drained)")
	fs.BoolVar(&deleteKube, "delete-kubernetes-service", false, "delete default/kubernetes last; only once every kube-apiserver runs with the new --service-cluster-ip-range")
	fs.DurationVar(&drain, "drain-timeout", 0, "with --delete-old, wait this long for the old ServiceCIDR(s) to go")
	fs.IntVar(&concurrency, "concurrency", 4, "Services moved at once after the DNS Service")
	fs.Float64Var(&qps, "qps", 10, "Service moves started per second at most")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if err := checkDryRun(dry); err != nil {
		return err
	}
	if err := checkApplyDryRun(doApply, dry); err != nil {
		return err
	}
	if err := cli.NonNegative("drain-timeout", drain); err != nil {
		return err
	}
	set := setFlags(fs)
	if set["drain-timeout"] && !deleteOld {
		return badf("--drain-timeout %s needs --delete-old: it is how long to wait for the old ServiceCIDR(s) to go", drain)
	}
	mode := servicecidr.DryRun(dry)
	if !doApply && mode == servicecidr.DryRunNone {
		mode = servicecidr.DryRunClient
	}
	if mode == servicecidr.DryRunNone && journalDir == "" {
		return badf("--journal DIR is required with --apply: every Service is recorded there before it is deleted, so a crash loses nothing")
	}
	if concurrency < 1 {
		return badf("--concurrency %d: want 1 or more", concurrency)
	}
	if !(qps > 0) || math.IsInf(qps, 0) {
		return badf("--qps %g: want a positive, finite rate", qps)
	}
	if err := lock.Check(); err != nil {
		return err
	}
	if journalDir != "" {
		if st, err := os.Stat(journalDir); err == nil && !st.IsDir() {
			return badf("--journal %s: not a directory", journalDir)
		}
	}
	var p *servicecidr.Plan
	if planFile != "" {
		for _, name := range []string{"to", "from", "dns-service", "allocate", "include-loadbalancers", "name", "pod-cidr", "node-network", "allow-well-known"} {
			if set[name] {
				return badf("--plan %s and --%s conflict: the plan file already fixes it; give either --plan or --from/--to and the planning flags", planFile, name)
			}
		}
		data, err := os.ReadFile(planFile)
		if err != nil {
			return badf("--plan %s: %v", planFile, err)
		}
		if p, err = servicecidr.ParsePlan(data); err != nil {
			return fmt.Errorf("invalid plan %s: %w", planFile, err)
		}
	}
	var o servicecidr.PlanOptions
	if p == nil {
		var err error
		if o, err = pf.options(); err != nil {
			return err
		}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	ao := servicecidr.ApplyOptions{JournalDir: journalDir, DryRun: mode, DeleteOld: deleteOld, DeleteKubernetesService: deleteKube,
		DrainTimeout: drain, Concurrency: concurrency, QPS: float32(qps), Burst: max(1, int(qps))}
	if mode == servicecidr.DryRunNone {
		// One Service move at a time per cluster, from the recovery of an
		// interrupted run on (Lease cidrshift-servicecidr), checked before
		// each delete; the journal is kept in the cluster too.
		l, err := lock.Lease(c.Kube(), servicecidr.LockScope)
		if err != nil {
			return err
		}
		if l != nil {
			// Held across the recovery, the plan and the apply, which lock
			// it again.
			release, err := lease.Hold(a.ctx, l)
			if err != nil {
				return err
			}
			defer release()
			ao.Lock, ao.ClusterJournal = l, &servicecidr.ClusterJournal{Namespace: lock.Namespace}
		}
	}
	if p == nil {
		// A Service an interrupted run left deleted must be back, at its
		// journaled address, before planning again: otherwise the new plan
		// would not see it and could give that address to another Service.
		if _, err := c.Recover(a.ctx, ao); err != nil {
			return err
		}
		// The journal also keeps a default/kubernetes it deleted that
		// kube-apiserver has not recreated yet in the plan, so Apply waits.
		o.JournalDir = journalDir
		if p, err = c.Plan(a.ctx, o); err != nil {
			return err
		}
	}
	if a.output == "" {
		ao.Progress = func(e servicecidr.Event) {
			fmt.Fprintln(a.stderr, eventLine(e))
		}
	}
	res, err := c.Apply(a.ctx, p, ao)
	if errors.Is(err, servicecidr.ErrPlanFormat) && planFile != "" {
		return fmt.Errorf("invalid plan %s: %w", planFile, err)
	}
	if res != nil && a.output != "" {
		if _, eerr := a.emit(res); eerr != nil && err == nil {
			err = eerr
		}
	} else if res != nil {
		printResult(a.stdout, p, res, err == nil)
	}
	return err
}

func eventLine(e servicecidr.Event) string {
	var b strings.Builder
	b.WriteString(string(e.Kind))
	if e.ServiceCIDR != "" {
		b.WriteString(" servicecidr/" + e.ServiceCIDR)
	}
	if e.Service != "" {
		b.WriteString(" " + e.Service)
	}
	if len(e.NewIPs) > 0 {
		b.WriteString(" -> " + addrList(e.NewIPs))
	}
	if e.Gap > 0 {
		fmt.Fprintf(&b, " (absent %s)", e.Gap.Round(time.Microsecond))
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// printResult prints what Apply did; the next step only when it succeeded.
func printResult(w io.Writer, p *servicecidr.Plan, r *servicecidr.Result, ok bool) {
	verb := "moved"
	if r.DryRun != servicecidr.DryRunNone {
		verb = "would move (dry run: " + string(r.DryRun) + ")"
	}
	fmt.Fprintf(w, "%s %d Service(s)", verb, len(r.Moved))
	if len(r.AlreadyMoved) > 0 {
		fmt.Fprintf(w, "; %d already moved by an earlier run", len(r.AlreadyMoved))
	}
	fmt.Fprintln(w)
	for _, m := range r.Moved {
		note := ""
		if m.Resumed {
			note = " (resumed from the journal)"
		}
		if m.Note != "" {
			note += " (" + m.Note + ")"
		}
		fmt.Fprintf(w, "  %s %s -> %s%s\n", m.Service, addrList(m.OldIPs), addrList(m.NewIPs), note)
	}
	if r.Gaps.Count > 0 {
		fmt.Fprintf(w, "Services absent between delete and create: p50 %s, p99 %s, max %s over %d\n",
			r.Gaps.P50.Round(time.Microsecond), r.Gaps.P99.Round(time.Microsecond), r.Gaps.Max.Round(time.Microsecond), r.Gaps.Count)
	}
	if r.Kubernetes != "" {
		fmt.Fprintln(w, "default/kubernetes:", r.Kubernetes)
	}
	for _, o := range r.Old {
		fmt.Fprintln(w, o.Summary)
	}
	for _, x := range r.Warnings {
		fmt.Fprintln(w, "warning:", x)
	}
	if ok && p.DNS != nil && r.DryRun == servicecidr.DryRunNone {
		fmt.Fprintf(w, "next: set kubelet clusterDNS %s -> %s on every node, then restart the pods that use cluster DNS\n", addrList(p.DNS.OldIPs), addrList(p.DNS.NewIPs))
	}
}

// --- verify ---

func (a *app) verify(args []string) error {
	fs := a.flags("verify")
	var to, from, dnsService, dnsIP string
	var includeLB bool
	fs.StringVar(&to, "to", "", "the range(s) every ClusterIP must lie in (required)")
	fs.StringVar(&from, "from", "", "the old range(s), to report on their ServiceCIDRs")
	fs.StringVar(&dnsService, "dns-service", "", "cluster DNS Service as namespace/name (default kube-system/kube-dns)")
	fs.StringVar(&dnsIP, "dns-ip", "", "address(es) the DNS Service must have, comma-separated")
	fs.BoolVar(&includeLB, "include-loadbalancers", false, "count LoadBalancer Services outside --to as errors, not warnings")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if to == "" {
		return badf("--to is required: the range every ClusterIP must now lie in")
	}
	o := servicecidr.VerifyOptions{DNSService: dnsService, IncludeLoadBalancers: includeLB}
	var err error
	if o.To, err = servicecidr.ParseCIDRs("--to", to); err != nil {
		return err
	}
	if from != "" {
		if o.From, err = servicecidr.ParseCIDRs("--from", from); err != nil {
			return err
		}
	}
	for _, s := range strings.Split(dnsIP, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return badf("--dns-ip %q: not an IP address", s)
		}
		o.DNSIPs = append(o.DNSIPs, ip)
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	v, err := c.Verify(a.ctx, o)
	if err != nil {
		return err
	}
	if done, err := a.emit(v); done {
		if err != nil {
			return err
		}
	} else {
		sort.SliceStable(v.Findings, func(i, j int) bool { return rank(v.Findings[i].Severity) < rank(v.Findings[j].Severity) })
		for _, f := range v.Findings {
			fmt.Fprintf(a.stdout, "%s\t%s: %s\n", f.Severity, f.Object, f.Message)
		}
		warnings, errs := 0, 0
		for _, f := range v.Findings {
			switch f.Severity {
			case servicecidr.SeverityError:
				errs++
			case servicecidr.SeverityWarning:
				warnings++
			}
		}
		state := "OK"
		if !v.OK {
			state = "NOT OK"
		}
		fmt.Fprintf(a.stdout, "%s: %d Service(s) with a ClusterIP checked against %s: %d error(s), %d warning(s)\n", state, v.Services, prefixes(o.To), errs, warnings)
	}
	if !v.OK {
		return errFailed
	}
	return nil
}

func rank(s servicecidr.Severity) int {
	switch s {
	case servicecidr.SeverityError:
		return 0
	case servicecidr.SeverityWarning:
		return 1
	}
	return 2
}

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
