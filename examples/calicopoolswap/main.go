// Command calicopoolswap retires a Calico IP pool in favour of a new one:
// it plans the swap, applies it (create the new pool, disable the old one,
// move every pod, cluster DNS first, respecting disruption budgets), proves
// nothing is left on the old pool, and deletes it.
//
//	calicopoolswap plan     --old-pool NAME --new-cidr CIDR [--new-name NAME] [--block-size N]
//	                        [--cluster-cidr CIDR] [--service-cidr CIDR] [--node-network CIDR]
//	                        [--move rollout|evict] [--allow-delete-bare-pods]
//	calicopoolswap apply    (same flags, or --plan FILE) [--apply] [--dry-run client|server]
//	                        [--journal DIR] [--force] [--keep-old-pool] [--wait-for-operator]
//	                        [--lock-namespace NS] [--steal-lock] [--lock-duration D] [--no-lock]
//	calicopoolswap verify   --old-pool NAME [--old-cidr CIDR] [--new-name NAME]
//	calicopoolswap blocks   --old-pool NAME | --old-cidr CIDR
//	calicopoolswap capacity --pool NAME | --new-cidr CIDR [--block-size N]
//	                        [--cluster-cidr CIDR] [--kube-proxy-cluster-cidr CIDR]
//
// Every subcommand reads the kubeconfig the kubectl way (--kubeconfig,
// --context, KUBECONFIG), prints text by default and -o json|yaml for
// machines, and changes nothing unless `apply --apply` (or --dry-run=server,
// which sends dry-run writes). Exit status: 0 done, 1 failed (or verify found
// leftovers), 2 bad input (flags, a pool that does not exist, a plan file that
// does not decode or breaks its invariants, a kubeconfig that cannot be
// loaded), 3 waiting for a change to the Tigera operator's Installation (the
// line says which), 4 cluster unreachable or access forbidden, 130
// interrupted. A plan file is untrusted: its new pool must agree with its
// newCIDR, lie inside its cluster CIDR and overlap no pool, Service CIDR or
// node network; --plan excludes the flags that make a plan.
//
// `apply --apply` holds the Lease cidrshift-calico-pool in --lock-namespace
// (default kube-system) around the swap, so a second swap is refused naming
// the holder (RBAC: get, create, update on leases there; --no-lock skips it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	calicoclient "github.com/projectcalico/api/pkg/client/clientset_generated/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli"
)

func main() {
	ctx, stop := cli.SignalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// connectFunc builds the clients from the kubeconfig flags.
type connectFunc func(ctx context.Context, kubeconfig, kubeContext string) (calico.Cluster, error)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdout, stderr, connectWith(stderr))
}

// connectWith is connect with its progress lines written to progress.
func connectWith(progress io.Writer) connectFunc {
	return func(ctx context.Context, kubeconfig, kubeContext string) (calico.Cluster, error) {
		return connect(ctx, kubeconfig, kubeContext, progress)
	}
}

// connect reads the kubeconfig the way kubectl does, checks that the API
// server answers (an unreachable one is exit 4 within seconds, with progress
// on stderr) and picks the Calico API by discovery.
func connect(ctx context.Context, kubeconfig, kubeContext string, progress io.Writer) (calico.Cluster, error) {
	cfg, err := cli.Connect(ctx, kubeconfig, kubeContext, progress)
	if err != nil {
		return calico.Cluster{}, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return calico.Cluster{}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return calico.Cluster{}, err
	}
	cc, err := calicoclient.NewForConfig(cfg)
	if err != nil {
		return calico.Cluster{}, err
	}
	pools, err := calico.NewPoolStore(ctx, calico.StoreClients{Discovery: kube.Discovery(), Calico: cc, Dynamic: dyn})
	if err != nil {
		return calico.Cluster{}, err
	}
	return calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}, nil
}

// usageError is bad input: exit 2 with one line.
type usageError struct{ msg string }

// Error describes the problem in one line.
func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

type options struct {
	kubeconfig, kubeContext string
	oldPool, oldCIDR        string
	newCIDR, newName        string
	pool                    string
	blockSize               int
	clusterCIDR             string
	serviceCIDR             string
	nodeNetwork             string
	kubeProxyClusterCIDR    string
	move                    string
	allowBare               bool
	journal                 string
	dryRun                  string
	apply                   bool
	force                   bool
	keepOld                 bool
	waitOperator            bool
	planFile                string
	output                  string
	lock                    cli.LockFlags
}

const usage = "usage: calicopoolswap plan|apply|verify|blocks|capacity [flags] (see -h of each)"

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, conn connectFunc) int {
	code, err := dispatch(ctx, args, stdout, stderr, conn)
	if err == nil {
		return code
	}
	var ue usageError
	if errors.As(err, &ue) {
		err = cli.Usagef("%s", ue.msg)
	}
	if errors.Is(err, calico.ErrWaitingForOperator) && ctx.Err() == nil {
		fmt.Fprintln(stderr, "calicopoolswap: "+oneLine(err.Error()))
		return cli.ExitWaiting
	}
	return cli.Fail(stderr, "calicopoolswap", err, badInput...)
}

// badInput are the sentinels that mean bad input (exit 2): a pool or plan
// that breaks a rule, a CIDR that does not parse, a verify target that
// contradicts the cluster.
var badInput = []error{
	calico.ErrInvalidPool, calico.ErrInvalidPlan, calico.ErrInvalidTarget, calico.ErrNoJournal,
	cidr.ErrSyntax, cidr.ErrHostBitsSet, cidr.ErrEmpty, cidr.ErrDualStack, cidr.ErrMappedIPv6, cidr.ErrZone,
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer, conn connectFunc) (int, error) {
	if len(args) == 0 {
		return 2, usageError{usage}
	}
	cmd := args[0]
	var o options
	fs := flag.NewFlagSet("calicopoolswap "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig (default: KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.output, "o", "", "output format: json or yaml (default text)")
	switch cmd {
	case "plan", "apply":
		fs.StringVar(&o.oldPool, "old-pool", "", "name of the IPPool to retire")
		fs.StringVar(&o.newCIDR, "new-cidr", "", "CIDR of the new pool, e.g. 10.20.0.0/16")
		fs.StringVar(&o.newName, "new-name", "", "name of the new pool (default derived from the CIDR)")
		fs.IntVar(&o.blockSize, "block-size", 0, "block size of the new pool (default: the old pool's)")
		fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "the cluster CIDR you intend (the new pool must lie inside it)")
		fs.StringVar(&o.serviceCIDR, "service-cidr", "", "the Service CIDR (the new pool must not overlap it)")
		fs.StringVar(&o.nodeNetwork, "node-network", "", "the node network(s), comma-separated")
		fs.StringVar(&o.move, "move", "rollout", "how pods move: rollout or evict")
		fs.BoolVar(&o.allowBare, "allow-delete-bare-pods", false, "delete pods without a controller (nothing recreates them)")
		if cmd == "apply" {
			fs.StringVar(&o.planFile, "plan", "", "apply a plan saved with `plan -o yaml` instead of planning again")
			fs.StringVar(&o.journal, "journal", "calicopoolswap-journal", "directory of the crash-safe progress journal")
			fs.StringVar(&o.dryRun, "dry-run", "", "client (print only) or server (dry-run writes)")
			fs.BoolVar(&o.apply, "apply", false, "make the changes")
			fs.BoolVar(&o.force, "force", false, "delete the old pool even if pods or IPAM allocations are left")
			fs.BoolVar(&o.keepOld, "keep-old-pool", false, "stop after verification; keep the disabled pool")
			fs.BoolVar(&o.waitOperator, "wait-for-operator", false, "poll until the operator change is made instead of exiting 3")
			o.lock.Register(fs)
		}
	case "verify", "blocks":
		fs.StringVar(&o.oldPool, "old-pool", "", "name of the retired IPPool")
		fs.StringVar(&o.oldCIDR, "old-cidr", "", "CIDR of the retired pool (when it is deleted already)")
		if cmd == "verify" {
			fs.StringVar(&o.newName, "new-name", "", "name of the new pool, checked to exist and be enabled")
		}
	case "capacity":
		fs.StringVar(&o.pool, "pool", "", "name of an IPPool in the cluster")
		fs.StringVar(&o.newCIDR, "new-cidr", "", "CIDR of a planned pool (no cluster needed)")
		fs.IntVar(&o.blockSize, "block-size", 0, "block size (default 26 for IPv4, 122 for IPv6)")
		fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "cluster CIDR to check the pool against")
		fs.StringVar(&o.kubeProxyClusterCIDR, "kube-proxy-cluster-cidr", "", "kube-proxy's clusterCIDR (config.conf in ConfigMap kube-system/kube-proxy)")
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0, nil
	default:
		return 2, usagef("unknown subcommand %q; %s", cmd, usage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0, nil
		}
		return 2, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return 2, usagef("unexpected argument %q: %s takes only flags", fs.Arg(0), fs.Name())
	}
	if cmd == "apply" {
		if err := o.lock.Check(); err != nil {
			return 2, err
		}
	}
	if o.planFile != "" {
		// A plan file fixes everything these flags would choose: refuse
		// them rather than silently ignore one.
		var conflict string
		fs.Visit(func(f *flag.Flag) {
			if conflict == "" && planFlags[f.Name] {
				conflict = f.Name
			}
		})
		if conflict != "" {
			return 2, usagef("--plan %s and --%s exclude each other: the plan file fixes the swap; drop --%s or plan again", o.planFile, conflict, conflict)
		}
	}
	switch o.output {
	case "", "json", "yaml":
	default:
		return 2, usagef("-o %q: want json or yaml", o.output)
	}
	switch cmd {
	case "plan", "apply":
		return planOrApply(ctx, cmd, o, stdout, stderr, conn)
	case "verify":
		return verify(ctx, o, stdout, conn)
	case "blocks":
		return blocks(ctx, o, stdout, conn)
	default:
		return capacity(ctx, o, stdout, conn)
	}
}

// planFlags are the flags that make a plan; --plan excludes them.
var planFlags = map[string]bool{
	"old-pool": true, "new-cidr": true, "new-name": true, "block-size": true, "cluster-cidr": true,
	"service-cidr": true, "node-network": true, "move": true, "allow-delete-bare-pods": true,
}

func (o options) request() (calico.SwapRequest, error) {
	if o.oldPool == "" {
		return calico.SwapRequest{}, usagef("--old-pool is required (the IPPool to retire)")
	}
	if o.newCIDR == "" {
		return calico.SwapRequest{}, usagef("--new-cidr is required (e.g. 10.20.0.0/16)")
	}
	pfx, err := cidr.Parse(o.newCIDR)
	if err != nil {
		return calico.SwapRequest{}, usagef("--new-cidr: %v", err)
	}
	for _, f := range []struct{ name, v string }{{"--cluster-cidr", o.clusterCIDR}, {"--service-cidr", o.serviceCIDR}, {"--node-network", o.nodeNetwork}} {
		if strings.TrimSpace(f.v) == "" {
			continue
		}
		if _, err := cidr.ParseList(f.v); err != nil {
			return calico.SwapRequest{}, usagef("%s: %v", f.name, err)
		}
	}
	if o.blockSize != 0 && (o.blockSize < calico.MinBlockSizeIPv4 || o.blockSize > calico.MaxBlockSizeIPv6 ||
		(o.blockSize > calico.MaxBlockSizeIPv4 && o.blockSize < calico.MinBlockSizeIPv6)) {
		return calico.SwapRequest{}, usagef("--block-size %d: want 20-32 (IPv4) or 116-128 (IPv6)", o.blockSize)
	}
	move := calico.MoveMethod(o.move)
	if move != calico.MoveRollout && move != calico.MoveEvict {
		return calico.SwapRequest{}, usagef("--move %q: want rollout or evict", o.move)
	}
	name := o.newName
	if name == "" {
		name = "pool-" + strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(pfx.String())
	}
	return calico.SwapRequest{
		OldPool: o.oldPool, NewName: name, NewCIDR: o.newCIDR, BlockSize: o.blockSize,
		ClusterCIDR: o.clusterCIDR, ServiceCIDR: o.serviceCIDR, NodeNetwork: o.nodeNetwork,
		Move: move, AllowDeleteBarePods: o.allowBare,
	}, nil
}

func planOrApply(ctx context.Context, cmd string, o options, stdout, stderr io.Writer, conn connectFunc) (int, error) {
	var plan *calico.SwapPlan
	var req calico.SwapRequest
	var err error
	if o.planFile != "" {
		data, err := os.ReadFile(o.planFile)
		if err != nil {
			return 2, usagef("--plan: %v", err)
		}
		// Untrusted input: decoded strictly, its invariants checked.
		if plan, err = calico.DecodePlan(data); err != nil {
			return 2, fmt.Errorf("--plan %s: %w", o.planFile, err)
		}
	} else if req, err = o.request(); err != nil {
		return 2, err
	}
	var mode calico.DryRun
	if cmd == "apply" {
		switch o.dryRun {
		case "", "none":
		case "client":
			mode = calico.DryRunClient
		case "server":
			mode = calico.DryRunServer
		default:
			return 2, usagef("--dry-run %q: want client or server", o.dryRun)
		}
		if o.apply && mode != calico.DryRunNone {
			return 2, usagef("--apply and --dry-run=%s exclude each other", o.dryRun)
		}
	}
	cl, err := conn(ctx, o.kubeconfig, o.kubeContext)
	if err != nil {
		return 1, err
	}
	if plan == nil {
		if plan, err = calico.Plan(ctx, cl, req); err != nil {
			if cmd == "apply" && errors.Is(err, calico.ErrPoolNotFound) && swapDone(ctx, cl, req) {
				// A finished swap (or one killed after the old pool's delete):
				// the old pool is gone and the new one is in place.
				fmt.Fprintf(stdout, "Nothing to do: pool %s is gone and pool %s (%s) is in place; the swap is complete.\n", req.OldPool, req.NewName, req.NewCIDR)
				return 0, nil
			}
			if errors.Is(err, calico.ErrPoolNotFound) {
				return 2, usagef("--old-pool %q: no such IPPool in the cluster", req.OldPool)
			}
			return 1, err
		}
	}
	if cmd == "plan" || (!o.apply && mode == calico.DryRunNone) {
		if err := printPlan(stdout, o.output, plan); err != nil {
			return 1, err
		}
		if cmd == "apply" && o.output == "" {
			fmt.Fprintln(stdout, "Not applied: pass --apply to make these changes (or --dry-run=server to have the API server check them).")
		}
		return 0, nil
	}
	events := stdout
	if o.output != "" {
		events = stderr
	}
	if o.output == "" {
		if err := printPlan(stdout, "", plan); err != nil {
			return 1, err
		}
		fmt.Fprintln(stdout)
	}
	opts := calico.ApplyOptions{
		DryRun: mode, JournalDir: o.journal, Force: o.force, KeepOldPool: o.keepOld, WaitForOperator: o.waitOperator,
		OnEvent: func(e calico.Event) {
			prefix := ""
			if e.DryRun != "" {
				prefix = "(dry run " + string(e.DryRun) + ") "
			}
			fmt.Fprintf(events, "%s [%s] %s%s\n", e.Time.Format("15:04:05"), e.Phase, prefix, e.Message)
		},
	}
	if mode != calico.DryRunNone {
		opts.JournalDir = ""
	} else {
		// One pool swap at a time per cluster (Lease cidrshift-calico-pool),
		// checked before each restart, eviction and the pool's delete; the
		// journal is kept in the cluster too.
		l, err := o.lock.Lease(cl.Kube, calico.LockScope)
		if err != nil {
			return 1, err
		}
		if l != nil {
			opts.Lock, opts.ClusterJournal = l, &calico.ClusterJournal{Namespace: o.lock.Namespace}
		}
	}
	res, applyErr := calico.Apply(ctx, cl, plan, opts)
	if res != nil {
		if err := printResult(stdout, o.output, res); err != nil {
			return 1, err
		}
	}
	if applyErr != nil {
		return 1, applyErr
	}
	return 0, nil
}

func emit(w io.Writer, format string, v any) error {
	if format != "json" && format != "yaml" {
		return nil
	}
	return cli.Write(w, format, v)
}

func printPlan(w io.Writer, format string, p *calico.SwapPlan) error {
	if format != "" {
		return emit(w, format, p)
	}
	fmt.Fprintf(w, "Swap plan %s (through %s)\n", p.ID, p.API)
	fmt.Fprintf(w, "Old pool: %s %s (blockSize %d)\n", p.OldPool.Name, p.OldCIDR, p.OldPool.EffectiveBlockSize())
	c := p.Capacity
	fmt.Fprintf(w, "New pool: %s %s (blockSize %d: %s blocks of %s addresses, %s nodes with a block each)\n",
		p.NewPool.Name, p.NewCIDR, c.BlockSize, c.Blocks, c.AddressesPerBlock, c.MaxNodesOneBlockEach)
	pods := 0
	for _, wl := range p.Workloads {
		pods += len(wl.Pods)
	}
	fmt.Fprintf(w, "Pods in the old pool: %d in %d workload(s), %d cannot be moved, %d hostNetwork pod(s) skipped\n",
		pods, len(p.Workloads), len(p.Blocked), p.HostNetworkPods)
	fmt.Fprintln(w, "Steps:")
	for i, s := range p.Steps {
		fmt.Fprintf(w, "  %d. %s\n", i+1, s)
	}
	if len(p.Warnings) > 0 {
		fmt.Fprintln(w, "Warnings:")
		for _, s := range p.Warnings {
			fmt.Fprintf(w, "  - %s\n", s)
		}
	}
	return nil
}

func printResult(w io.Writer, format string, r *calico.ApplyResult) error {
	if format != "" {
		return emit(w, format, r)
	}
	state := "stopped at phase " + string(r.Phase)
	switch {
	case r.DryRun != "":
		state = "dry run (" + string(r.DryRun) + ") finished; nothing changed"
	case r.Done:
		state = "done"
	case r.Waiting != nil:
		state = "waiting: " + r.Waiting.String()
	}
	fmt.Fprintf(w, "Result: %s\n", state)
	fmt.Fprintf(w, "  restarted %d workload(s), evicted %d pod(s), %d pod(s) could not be moved\n", len(r.Restarted), len(r.Evicted), len(r.Blocked))
	for _, b := range r.Blocked {
		fmt.Fprintf(w, "  cannot move %s: %s\n", b.Pod, b.Reason)
	}
	if r.Verify != nil {
		fmt.Fprintf(w, "  verify: %s\n", r.Verify.Summary())
	}
	if r.OldPoolDeleted {
		fmt.Fprintln(w, "  old pool deleted")
	}
	return nil
}

func verify(ctx context.Context, o options, stdout io.Writer, conn connectFunc) (int, error) {
	t, err := target(o)
	if err != nil {
		return 2, err
	}
	cl, err := conn(ctx, o.kubeconfig, o.kubeContext)
	if err != nil {
		return 1, err
	}
	if err := poolExists(ctx, cl, "--old-pool", t.OldPool, !t.OldCIDR.IsValid()); err != nil {
		return 2, err
	}
	v, err := calico.Verify(ctx, cl, t)
	if err != nil {
		return 1, err
	}
	if o.output != "" {
		if err := emit(stdout, o.output, v); err != nil {
			return 1, err
		}
	} else {
		status := "CLEAR"
		if !v.Clear() {
			status = "NOT CLEAR"
		}
		fmt.Fprintf(stdout, "%s: %s\n", status, v.Summary())
		for _, p := range v.PodsLeft {
			fmt.Fprintf(stdout, "  pod %s (%s) of %s\n", p, addrs(p), p.Owner)
		}
	}
	if !v.Clear() {
		return 1, nil
	}
	return 0, nil
}

func addrs(p calico.PodRef) string {
	s := make([]string, len(p.IPs))
	for i, a := range p.IPs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func target(o options) (calico.VerifyTarget, error) {
	if o.oldPool == "" && o.oldCIDR == "" {
		return calico.VerifyTarget{}, usagef("--old-pool or --old-cidr is required")
	}
	t := calico.VerifyTarget{OldPool: o.oldPool, NewPool: o.newName}
	if o.oldCIDR != "" {
		p, err := cidr.Parse(o.oldCIDR)
		if err != nil {
			return calico.VerifyTarget{}, usagef("--old-cidr: %v", err)
		}
		t.OldCIDR = p
	}
	return t, nil
}

func blocks(ctx context.Context, o options, stdout io.Writer, conn connectFunc) (int, error) {
	t, err := target(o)
	if err != nil {
		return 2, err
	}
	cl, err := conn(ctx, o.kubeconfig, o.kubeContext)
	if err != nil {
		return 1, err
	}
	if t.OldPool != "" {
		p, err := cl.Pools.Get(ctx, t.OldPool)
		switch {
		case errors.Is(err, calico.ErrPoolNotFound) && t.OldCIDR.IsValid():
			// Deleted already: the CIDR given is the one to report.
		case errors.Is(err, calico.ErrPoolNotFound):
			return 2, usagef("--old-pool %q: no such IPPool in the cluster (give --old-cidr for a pool deleted already)", t.OldPool)
		case err != nil:
			return 1, err
		default:
			pfx, err := p.Prefix()
			if err != nil {
				return 1, err
			}
			if t.OldCIDR.IsValid() && t.OldCIDR != pfx {
				return 2, usagef("--old-cidr %s is not the CIDR of IPPool %q (%s): give one of the two, or both agreeing", t.OldCIDR, t.OldPool, pfx)
			}
			t.OldCIDR = pfx
		}
	}
	r, err := calico.ReportBlocks(ctx, cl.Blocks, t.OldCIDR)
	if err != nil {
		return 1, err
	}
	if o.output != "" {
		return 0, emit(stdout, o.output, r)
	}
	if !r.Available {
		fmt.Fprintf(stdout, "IPAM blocks in %s cannot be read: %s\n", r.CIDR, r.Note)
		return 1, nil
	}
	fmt.Fprintf(stdout, "%d block(s) in %s, %d address(es) allocated (%d pod, %d tunnel, %d other), %d affinity(ies)\n",
		len(r.Blocks), r.CIDR, r.Allocated, r.PodAllocations, r.TunnelAllocations, r.OtherAllocations, len(r.Affinities))
	for _, b := range r.Blocks {
		node := b.Node
		if node == "" {
			node = "(no affinity)"
		}
		fmt.Fprintf(stdout, "  %s %s: %d allocated\n", b.CIDR, node, len(b.Allocations))
		for _, a := range b.Allocations {
			who := a.HandleID
			if a.Pod != "" {
				who = a.Namespace + "/" + a.Pod
			}
			fmt.Fprintf(stdout, "    %s %s %s\n", a.IP, a.Kind, who)
		}
	}
	for _, a := range r.Affinities {
		fmt.Fprintf(stdout, "  affinity %s -> %s (%s)\n", a.CIDR, a.Node, a.State)
	}
	return 0, nil
}

func capacity(ctx context.Context, o options, stdout io.Writer, conn connectFunc) (int, error) {
	var p calico.IPPool
	switch {
	case o.pool != "" && o.newCIDR != "":
		return 2, usagef("give --pool or --new-cidr, not both")
	case o.newCIDR != "":
		if _, err := cidr.Parse(o.newCIDR); err != nil {
			return 2, usagef("--new-cidr: %v", err)
		}
		p = calico.IPPool{Name: "(planned)", Spec: calico.PoolSpec{CIDR: o.newCIDR, BlockSize: o.blockSize}}
		if err := calico.Validate(calico.IPPool{Name: "planned", Spec: p.Spec}); err != nil {
			return 2, err
		}
	case o.pool != "":
		cl, err := conn(ctx, o.kubeconfig, o.kubeContext)
		if err != nil {
			return 1, err
		}
		if p, err = cl.Pools.Get(ctx, o.pool); err != nil {
			if errors.Is(err, calico.ErrPoolNotFound) {
				return 2, usagef("--pool %q: no such IPPool in the cluster", o.pool)
			}
			return 1, err
		}
	default:
		return 2, usagef("--pool NAME or --new-cidr CIDR is required")
	}
	c, err := calico.PoolCapacity(p, calico.CapacityOptions{ClusterCIDR: o.clusterCIDR, KubeProxyClusterCIDR: o.kubeProxyClusterCIDR})
	if err != nil {
		return 2, usageError{err.Error()}
	}
	if o.output != "" {
		return 0, emit(stdout, o.output, c)
	}
	fmt.Fprintf(stdout, "Pool %s %s (%s), blockSize %d\n", p.Name, c.CIDR, c.Family, c.BlockSize)
	fmt.Fprintf(stdout, "  addresses:               %s\n", c.Addresses)
	fmt.Fprintf(stdout, "  blocks:                  %s\n", c.Blocks)
	fmt.Fprintf(stdout, "  addresses per block:     %s\n", c.AddressesPerBlock)
	fmt.Fprintf(stdout, "  nodes with a block each: %s\n", c.MaxNodesOneBlockEach)
	for _, w := range c.Warnings {
		fmt.Fprintf(stdout, "  warning: %s\n", w.Message)
	}
	return 0, nil
}

// poolExists refuses a named pool that does not exist, when it must.
func poolExists(ctx context.Context, cl calico.Cluster, flagName, name string, must bool) error {
	if name == "" || !must {
		return nil
	}
	_, err := cl.Pools.Get(ctx, name)
	if errors.Is(err, calico.ErrPoolNotFound) {
		return usagef("%s %q: no such IPPool in the cluster (give --old-cidr for a pool deleted already)", flagName, name)
	}
	return err
}

// swapDone reports whether the new pool exists with the requested CIDR.
func swapDone(ctx context.Context, cl calico.Cluster, req calico.SwapRequest) bool {
	want, err := cidr.Parse(req.NewCIDR)
	if err != nil {
		return false
	}
	p, err := cl.Pools.Get(ctx, req.NewName)
	if err != nil {
		return false
	}
	got, _, err := cidr.ParseLenient(p.Spec.CIDR)
	return err == nil && got == want
}
