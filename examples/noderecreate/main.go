// Command noderecreate gives Kubernetes Nodes new podCIDRs without losing
// them: it plans the change, carries it out node by node (delete + create,
// with a crash-safe journal), resumes a run that was killed, and verifies the
// result. It is the reference use of package nodecidr.
//
//	# plan a rebase of every node (workers first, control plane last) and print it
//	noderecreate --from 10.10.0.0/18 --to 10.20.0.0/16
//	# carry it out; if killed, run the same command again to resume
//	noderecreate --from 10.10.0.0/18 --to 10.20.0.0/16 --apply --cordon
//	# give duplicated / missing / out-of-range podCIDRs fresh subnets
//	noderecreate --fix --cluster-cidr 10.244.0.0/12 --node-mask 24 --apply
//	# write a plan for review, apply it later
//	noderecreate --allocate --cluster-cidr 10.20.0.0/16 --plan plan.yaml
//	noderecreate --plan plan.yaml --apply
//
// Without --apply nothing changes; --dry-run=client prints each step,
// --dry-run=server sends every write with dryRun=All. Every flag, selector
// and plan file is checked before the first write; a plan file is untrusted
// (nodecidr.Apply re-checks it against its own target and the cluster).
//
// --apply holds the Lease cidrshift-nodecidr in --lock-namespace (default
// kube-system) for the whole run, so a second run, from any machine, is
// refused naming the holder; it also keeps the journal in ConfigMaps there,
// so a run whose machine is lost is finished from another one: the same
// command with any --journal directory resumes it (--steal-lock once the
// lost run's Lease expired, after --lock-duration). --no-lock, for callers
// that may not write Leases and ConfigMaps there, keeps only the local
// journal. RBAC: nodecidr.ClusterRoleYAML.
//
// Exit status: 0 done, 1 failure (a stale plan, a failed step or
// verification), 2 bad input (flags, an invalid plan, a request no plan can
// satisfy, a kubeconfig that cannot be loaded; nothing was changed),
// 4 cluster unreachable or access forbidden, 130 interrupted (run the same
// command again to resume).
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
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/nodecidr"
)

func main() {
	ctx, stop := cli.SignalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it parses args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{connect: func(kubeconfig, kubecontext string) (kubernetes.Interface, error) {
		return connect(ctx, kubeconfig, kubecontext, stderr)
	}}
	return a.run(ctx, args, stdout, stderr)
}

// connect reads a kubeconfig the way kubectl does (--kubeconfig, KUBECONFIG,
// ~/.kube/config, in-cluster) with an optional context, and checks that the
// API server answers: a kubeconfig that cannot be loaded is bad input (exit
// 2), a server that does not answer within seconds is exit 4.
func connect(ctx context.Context, kubeconfig, kubecontext string, progress io.Writer) (kubernetes.Interface, error) {
	cfg, err := cli.Connect(ctx, kubeconfig, kubecontext, progress)
	if err != nil {
		return nil, err
	}
	// No client-side limiter: Apply paces itself (--rate, --concurrency), and
	// a shared token bucket would make each create wait behind other
	// workers' requests right after its node was deleted (measured: gap p50
	// 40 ms x concurrency, throughput capped at 13 nodes/s).
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "cidrshift-noderecreate"
	return kubernetes.NewForConfig(cfg)
}

type app struct {
	connect func(kubeconfig, kubecontext string) (kubernetes.Interface, error)
}

// bad is bad input: exit status 2 with one line.
func bad(format string, args ...any) error { return cli.Usagef(format, args...) }

type options struct {
	kubeconfig, kubecontext string
	from, to                string
	fix, allocate           bool
	clusterCIDR, nodeMask   string
	serviceCIDR             string
	selector, nodes         string
	dryRun                  string
	apply                   bool
	journal, planFile       string
	concurrency             int
	rate                    float64
	cordon, emptyStatus     bool
	createGrace             time.Duration
	deletePods              bool
	restartCNI              string
	output                  string
	verbose                 int
	lock                    cli.LockFlags
	keepClusterJournal      bool

	// Parsed before anything is read from the cluster.
	names          []string
	rebase         []nodecidr.RebasePair
	layout         cidr.NodeIPAMLayout
	restartCNIOpts nodecidr.DeletePodsOptions
}

func (a *app) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = a.execute(ctx, o, stdout, stderr)
	}
	// Bad input never reached the cluster: invalid options or plan, and a
	// request no plan can satisfy (a --from that is not the range in use, a
	// target too small).
	return cli.Fail(stderr, "noderecreate", err, nodecidr.ErrInvalidOptions, nodecidr.ErrInvalidPlan, nodecidr.ErrPlan)
}

func oneLine(err error) string { return cli.OneLine(err) }

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("noderecreate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is one line; -h prints the usage below
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&o.kubecontext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.from, "from", "", "rebase: the old range(s), one per family, comma-separated")
	fs.StringVar(&o.to, "to", "", "rebase: the new range(s), matched to --from by family")
	fs.BoolVar(&o.fix, "fix", false, "give nodes with a missing, duplicated, overlapping or out-of-range podCIDR a free subnet of --cluster-cidr")
	fs.BoolVar(&o.allocate, "allocate", false, "give every selected node not already in --cluster-cidr a fresh subnet of it")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "--fix: the current --cluster-cidr (read from the cluster when omitted); --allocate: the target cluster CIDR(s)")
	fs.StringVar(&o.nodeMask, "node-mask", "", "node subnet prefix length(s), one per cluster CIDR (default: 24 for IPv4, 64 for IPv6)")
	fs.StringVar(&o.serviceCIDR, "service-cidr", "", "Service CIDR(s); subnets overlapping it are never handed out")
	fs.StringVar(&o.selector, "select", "", "only nodes matching this label selector")
	fs.StringVar(&o.nodes, "nodes", "", "only these nodes (comma-separated names)")
	fs.StringVar(&o.dryRun, "dry-run", "", `"client" prints every step, "server" sends every write with dryRun=All; nothing changes`)
	fs.BoolVar(&o.apply, "apply", false, "carry the plan out (without it the plan is only printed)")
	fs.StringVar(&o.journal, "journal", "./noderecreate-journal", "journal directory: node backups and progress, used to resume")
	fs.StringVar(&o.planFile, "plan", "", "plan file: written when planning, read with --apply")
	fs.IntVar(&o.concurrency, "concurrency", nodecidr.DefaultConcurrency, "worker nodes moved at once, i.e. at most this many absent at any instant (control-plane nodes always one at a time)")
	fs.Float64Var(&o.rate, "rate", 0, "at most this many nodes started per second (0: no limit, --concurrency bounds how many are in flight)")
	fs.BoolVar(&o.cordon, "cordon", false, "cordon each node before it is recreated and uncordon it after")
	fs.BoolVar(&o.emptyStatus, "empty-status", false, "create nodes with an empty status instead of the old one")
	fs.DurationVar(&o.createGrace, "create-grace", nodecidr.DefaultCreateGrace, "after an interrupt, keep retrying the create of a node just deleted for this long")
	fs.BoolVar(&o.deletePods, "delete-pods", false, "after each node, delete its pods (not hostNetwork, not static) so they get addresses from the new podCIDR")
	fs.StringVar(&o.restartCNI, "restart-cni", "", "after each node, delete its CNI pod first: NAMESPACE/SELECTOR, e.g. kube-flannel/app=flannel")
	fs.StringVar(&o.output, "o", "text", "output format: text, json or yaml")
	fs.IntVar(&o.verbose, "v", 0, "log verbosity")
	o.lock.Register(fs)
	fs.BoolVar(&o.keepClusterJournal, "keep-cluster-journal", false, "keep the records of a finished run in the cluster (labelled journal.cidrshift.io/state=finished) instead of deleting them")
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := cli.CheckFormat(o.output); err != nil {
		return nil, bad("%v", err)
	}
	switch o.dryRun {
	case "", "none", "client", "server":
	default:
		return nil, bad("--dry-run=%q: want client or server", o.dryRun)
	}
	if o.dryRun == "none" {
		o.dryRun = ""
	}
	if o.concurrency < 1 {
		return nil, bad("--concurrency=%d: want 1 or more", o.concurrency)
	}
	if o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0) {
		return nil, bad("--rate=%g: want 0 (no limit) or a positive number of nodes per second", o.rate)
	}
	if err := cli.NonNegative("create-grace", o.createGrace); err != nil {
		return nil, err
	}
	if o.verbose < 0 {
		return nil, bad("-v=%d: want 0 or more", o.verbose)
	}
	if err := o.lock.Check(); err != nil {
		return nil, err
	}
	if o.keepClusterJournal && o.lock.Off {
		return nil, bad("--keep-cluster-journal with --no-lock: without the lock no journal is kept in the cluster")
	}
	if o.journal == "" {
		return nil, bad("--journal must not be empty")
	}
	if fi, err := os.Stat(o.planFile); o.planFile != "" && err == nil && fi.IsDir() {
		return nil, bad("--plan %s is a directory: want a file", o.planFile)
	}
	if fi, err := os.Stat(o.journal); err == nil && !fi.IsDir() {
		return nil, bad("--journal %s is a file: want a directory", o.journal)
	}
	modes := 0
	if o.from != "" || o.to != "" {
		modes++
		if o.from == "" || o.to == "" {
			return nil, bad("--from and --to go together")
		}
	}
	if o.fix {
		modes++
	}
	if o.allocate {
		modes++
	}
	if modes > 1 {
		return nil, bad("choose one of --from/--to, --fix and --allocate")
	}
	// Flags that only shape a new plan are refused where they would be ignored.
	shaping := []string{"select", "nodes", "cluster-cidr", "node-mask", "service-cidr"}
	for _, name := range shaping {
		if !set[name] {
			continue
		}
		switch {
		case modes == 0 && o.planFile != "":
			return nil, bad("--%s with --plan %s: the plan file already fixes which nodes move and where; drop --%s, or add --from/--to, --fix or --allocate to write a new plan", name, o.planFile, name)
		case o.from != "" && (name == "cluster-cidr" || name == "node-mask" || name == "service-cidr"):
			return nil, bad("--%s with --from/--to: a rebase keeps each node's mask and offset; --%s goes with --fix or --allocate", name, name)
		}
	}
	if set["nodes"] {
		for _, n := range strings.Split(o.nodes, ",") {
			n = strings.TrimSpace(n)
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				return nil, bad("--nodes %q: node name %q: %s", o.nodes, n, strings.Join(errs, "; "))
			}
			o.names = append(o.names, n)
		}
	}
	if _, err := labels.Parse(o.selector); err != nil {
		return nil, bad("--select %q: %v", o.selector, err)
	}
	if set["restart-cni"] {
		ns, sel, ok := strings.Cut(o.restartCNI, "/")
		if !ok || ns == "" || sel == "" {
			return nil, bad("--restart-cni=%q: want NAMESPACE/SELECTOR, e.g. kube-flannel/app=flannel", o.restartCNI)
		}
		o.restartCNIOpts = nodecidr.DeletePodsOptions{Namespace: ns, LabelSelector: sel, IncludeHostNetwork: true}
		if err := o.restartCNIOpts.Validate(); err != nil {
			return nil, bad("--restart-cni=%q: %v", o.restartCNI, err)
		}
	}
	if err := parseMode(o); err != nil {
		return nil, err
	}
	return o, nil
}

// parseMode parses the CIDRs and masks of the mode before anything is read.
func parseMode(o *options) error {
	switch {
	case o.from != "":
		from, err := cidr.ParseList(o.from)
		if err != nil {
			return bad("--from %q: %v", o.from, err)
		}
		to, err := cidr.ParseList(o.to)
		if err != nil {
			return bad("--to %q: %v", o.to, err)
		}
		if len(from) != len(to) {
			return bad("--from has %d ranges but --to has %d; give one pair per family", len(from), len(to))
		}
		for _, f := range from {
			i := slices.IndexFunc(to, func(t netip.Prefix) bool { return cidr.FamilyOf(t) == cidr.FamilyOf(f) })
			if i < 0 {
				return bad("--from %s is %s but --to has no %s range", f, cidr.FamilyOf(f), cidr.FamilyOf(f))
			}
			o.rebase = append(o.rebase, nodecidr.RebasePair{From: f, To: to[i]})
		}
	case o.fix && o.clusterCIDR != "":
		l, err := fixLayout(o.clusterCIDR, o.nodeMask, o.serviceCIDR, io.Discard)
		if err != nil {
			return err
		}
		o.layout = l
	case o.fix:
		if o.nodeMask != "" {
			if _, err := parseMasks(o.nodeMask, len(strings.Split(o.nodeMask, ","))); err != nil {
				return err
			}
		}
		if o.serviceCIDR != "" {
			if _, _, err := cidr.ParseListLenient(o.serviceCIDR); err != nil {
				return bad("--service-cidr %q: %v", o.serviceCIDR, err)
			}
		}
	case o.allocate:
		if o.clusterCIDR == "" {
			return bad("--allocate needs --cluster-cidr: the target range(s)")
		}
		clusters, err := cidr.ParseList(o.clusterCIDR)
		if err != nil {
			return bad("--cluster-cidr %q: %v", o.clusterCIDR, err)
		}
		masks, err := parseMasks(o.nodeMask, len(clusters))
		if err != nil {
			return err
		}
		for i, m := range masks {
			if c := clusters[i]; m != 0 && (m < c.Bits() || m > cidr.FamilyOf(c).AddrBits()) {
				return bad("--node-mask %q: /%d does not fit --cluster-cidr %s: want %d to %d", o.nodeMask, m, c, c.Bits(), cidr.FamilyOf(c).AddrBits())
			}
		}
		o.layout = cidr.NodeIPAMLayout{ClusterCIDRs: clusters, NodeMasks: masks}
		if o.serviceCIDR != "" {
			svc, err := cidr.ParseList(o.serviceCIDR)
			if err != nil {
				return bad("--service-cidr %q: %v", o.serviceCIDR, err)
			}
			o.layout.ServiceCIDRs = svc
		}
	}
	return nil
}

// fixLayout reads the current layout the way kube-controller-manager reads
// its flags; warnings go to stderr.
func fixLayout(text, mask, svc string, stderr io.Writer) (cidr.NodeIPAMLayout, error) {
	flags := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: text, ServiceClusterIPRange: svc}
	if err := setMasks(&flags, text, mask); err != nil {
		return cidr.NodeIPAMLayout{}, err
	}
	l, warnings, err := cidr.ParseControllerManagerFlags(flags)
	if err != nil {
		return l, bad("--cluster-cidr %s: %v", text, oneLine(err))
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	return l, nil
}

func (o *options) hasMode() bool { return o.from != "" || o.fix || o.allocate }

// planKey identifies the command's intent: a rerun with the same key resumes.
func (o *options) planKey() string {
	return strings.Join([]string{"from=" + o.from, "to=" + o.to, fmt.Sprintf("fix=%t allocate=%t", o.fix, o.allocate),
		"cluster-cidr=" + o.clusterCIDR, "node-mask=" + o.nodeMask, "service-cidr=" + o.serviceCIDR,
		"select=" + o.selector, "nodes=" + o.nodes, "plan=" + o.planFile}, " ")
}

func (a *app) execute(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	log := logr.Discard()
	if o.verbose > 0 {
		log = funcr.New(func(prefix, args string) { fmt.Fprintln(stderr, prefix, args) }, funcr.Options{Verbosity: o.verbose})
	}
	ctx = logr.NewContext(ctx, log)
	applying := o.apply || o.dryRun != ""
	if !o.hasMode() && o.planFile == "" && !applying {
		return bad("choose what to do: --from/--to (rebase), --fix or --allocate, or --plan FILE with --apply")
	}

	// A plan file given without a mode is read (to apply it), not written.
	var filePlan *nodecidr.Plan
	if o.planFile != "" && !o.hasMode() {
		if !applying {
			return bad("--plan %s without --from/--to, --fix or --allocate: add --apply to apply it, or a mode to write a new plan", o.planFile)
		}
		data, err := os.ReadFile(o.planFile)
		if err != nil {
			return bad("--plan: %v", err)
		}
		if filePlan, err = nodecidr.DecodePlan(data); err != nil {
			return fmt.Errorf("--plan %s: %w", o.planFile, err)
		}
	}

	// Rerunning the command of an unfinished run resumes it: the journal
	// holds the plan, in the directory or, for a run started on another
	// machine, in the cluster.
	var plan *nodecidr.Plan
	resuming := false
	resume := func(st *nodecidr.JournalState, where, elsewhere string) error {
		if st == nil || st.Finished {
			return nil
		}
		switch {
		case filePlan != nil && filePlan.ID() != st.PlanID:
			return bad("%s holds the unfinished plan %s (%s); finish it by running that command again, or %s", where, st.PlanID, st.Note, elsewhere)
		case filePlan == nil && o.hasMode() && st.Note != o.planKey():
			return bad("%s holds an unfinished run of another command (%s); run that command again to finish it, or %s", where, st.Note, elsewhere)
		}
		plan, resuming = st.Plan, true
		fmt.Fprintf(stderr, "resuming plan %s from %s (%d of %d nodes reached)\n", st.PlanID, where, len(st.Phases), len(st.Plan.Steps))
		return nil
	}
	if applying {
		st, err := nodecidr.ReadJournal(o.journal)
		if err != nil {
			return err
		}
		if err := resume(st, "journal "+o.journal, "use another --journal"); err != nil {
			return err
		}
	}
	var clusterJournal *nodecidr.ClusterJournal
	if o.apply && o.dryRun == "" && !o.lock.Off {
		clusterJournal = &nodecidr.ClusterJournal{Namespace: o.lock.Namespace, Keep: o.keepClusterJournal}
	}
	if plan == nil && filePlan == nil && !o.hasMode() && clusterJournal == nil {
		return bad("choose what to do: --from/--to (rebase), --fix or --allocate, or --plan FILE with --apply (journal %s holds no unfinished run)", o.journal)
	}

	client, err := a.connect(o.kubeconfig, o.kubecontext)
	if err != nil {
		return err
	}
	if !resuming && clusterJournal != nil {
		st, err := nodecidr.ReadClusterJournal(ctx, client, *clusterJournal)
		if err != nil {
			return err
		}
		if st != nil {
			where := fmt.Sprintf("the cluster journal (ConfigMaps -l journal.cidrshift.io/run=%s in %s, started by %s at %s)",
				st.Cluster.Run, o.lock.Namespace, st.Cluster.StartedBy, st.Cluster.Started.Format(time.RFC3339))
			abandoned := fmt.Sprintf("remove it if it was abandoned (kubectl delete configmap -n %s -l journal.cidrshift.io/run=%s)", o.lock.Namespace, st.Cluster.Run)
			if err := resume(st, where, abandoned); err != nil {
				return err
			}
		}
	}
	if plan == nil {
		plan = filePlan
	}
	if plan == nil && !o.hasMode() {
		return bad("choose what to do: --from/--to (rebase), --fix or --allocate, or --plan FILE with --apply (journal %s and the cluster journal hold no unfinished run)", o.journal)
	}
	if plan == nil {
		opts, err := planOptions(ctx, client, o, stderr)
		if err != nil {
			return err
		}
		if plan, err = nodecidr.MakePlan(ctx, client, opts); err != nil {
			return err
		}
		if o.planFile != "" {
			y, err := plan.YAML()
			if err != nil {
				return err
			}
			if err := journal.WriteFileAtomic(o.planFile, y, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "plan %s written to %s\n", plan.ID(), o.planFile)
		}
	}

	out := struct {
		Plan   *nodecidr.Plan         `json:"plan"`
		Result *nodecidr.Result       `json:"result,omitempty"`
		Verify *nodecidr.VerifyReport `json:"verify,omitempty"`
	}{Plan: plan}
	if o.output == "text" && !resuming {
		printPlan(stdout, plan)
	}
	if !applying {
		if o.output == "text" {
			fmt.Fprintln(stdout, "\nNothing was changed. Run again with --apply to carry the plan out (or --dry-run=server to have the API server check every write).")
		}
		return emit(stdout, o.output, out)
	}
	if len(plan.Steps) == 0 {
		if o.output == "text" {
			fmt.Fprintln(stdout, "Nothing to do.")
		}
		return emit(stdout, o.output, out)
	}

	// Progress goes to stderr, whatever the format: stdout holds the plan
	// and the result, and a caller following a run reads one stream.
	events := stderr
	opts := nodecidr.ApplyOptions{
		JournalDir:  o.journal,
		DryRun:      nodecidr.DryRun(o.dryRun),
		Concurrency: o.concurrency,
		RateLimit:   o.rate,
		Cordon:      o.cordon,
		EmptyStatus: o.emptyStatus,
		CreateGrace: o.createGrace,
		Note:        o.planKey(),
		OnEvent:     func(e nodecidr.Event) { printEvent(events, e) },
	}
	if o.restartCNI != "" {
		opts.Hooks = append(opts.Hooks, nodecidr.DeleteNodePods(client, o.restartCNIOpts))
	}
	if o.deletePods {
		opts.Hooks = append(opts.Hooks, nodecidr.DeleteNodePods(client, nodecidr.DeletePodsOptions{}))
	}
	if clusterJournal != nil {
		l, err := o.lock.Lease(client, nodecidr.LockScope)
		if err != nil {
			return err
		}
		opts.Lock, opts.ClusterJournal = l, clusterJournal
	}
	res, applyErr := nodecidr.Apply(ctx, client, plan, opts)
	out.Result = res
	if res != nil && o.output == "text" {
		printResult(stdout, res)
	}
	if applyErr != nil {
		_ = emit(stdout, o.output, out)
		return applyErr
	}
	if o.dryRun == "" {
		v, err := nodecidr.Verify(ctx, client, plan, nodecidr.VerifyOptions{JournalDir: o.journal})
		if err != nil {
			return err
		}
		out.Verify = v
		if o.output == "text" {
			printVerify(stdout, v)
		}
		if err := emit(stdout, o.output, out); err != nil {
			return err
		}
		if !v.OK {
			return errors.New("verification found problems")
		}
		return nil
	}
	return emit(stdout, o.output, out)
}

// planOptions turns the parsed mode flags into nodecidr.PlanOptions; --fix
// without --cluster-cidr reads kube-controller-manager's flags.
func planOptions(ctx context.Context, client kubernetes.Interface, o *options, stderr io.Writer) (nodecidr.PlanOptions, error) {
	opts := nodecidr.PlanOptions{ListOptions: nodecidr.ListOptions{LabelSelector: o.selector}, Names: o.names}
	switch {
	case o.from != "":
		opts.Mode, opts.Rebase = nodecidr.ModeRebase, o.rebase
	case o.fix:
		opts.Mode, opts.Layout = nodecidr.ModeFix, o.layout
		if o.clusterCIDR != "" {
			break
		}
		d, err := nodecidr.DiscoverControllerManagerFlags(ctx, client)
		if err != nil {
			if errors.Is(err, nodecidr.ErrNotDiscovered) {
				return opts, bad("--cluster-cidr is required: %v", err)
			}
			return opts, err
		}
		fmt.Fprintf(stderr, "using kube-controller-manager's flags from %s: %s\n", d.Source, strings.Join(d.Flags.Args(), " "))
		for _, w := range d.Warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
		mask, svc := o.nodeMask, o.serviceCIDR
		if mask == "" {
			mask = maskText(d.Flags)
		}
		if svc == "" {
			svc = d.Flags.ServiceClusterIPRange
		}
		if opts.Layout, err = fixLayout(d.Flags.ClusterCIDR, mask, svc, stderr); err != nil {
			return opts, err
		}
	case o.allocate:
		opts.Mode, opts.Layout = nodecidr.ModeAllocate, o.layout
	}
	return opts, nil
}

func maskText(f cidr.ControllerManagerFlags) string {
	switch {
	case f.NodeCIDRMaskSize != 0:
		return fmt.Sprint(f.NodeCIDRMaskSize)
	case f.NodeCIDRMaskSizeIPv4 != 0 || f.NodeCIDRMaskSizeIPv6 != 0:
		return fmt.Sprintf("%d,%d", f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6)
	}
	return ""
}

func parseMasks(text string, n int) ([]int, error) {
	if text == "" {
		return nil, nil
	}
	parts := strings.Split(text, ",")
	if len(parts) != n {
		return nil, bad("--node-mask %q: want %d value(s), one per cluster CIDR", text, n)
	}
	out := make([]int, n)
	for i, p := range parts {
		if _, err := fmt.Sscanf(strings.TrimSpace(p), "%d", &out[i]); err != nil || out[i] < 0 || out[i] > 128 {
			return nil, bad("--node-mask %q: %q is not a prefix length", text, p)
		}
	}
	return out, nil
}

// setMasks sets kube-controller-manager's mask flags from --node-mask.
func setMasks(f *cidr.ControllerManagerFlags, clusters, mask string) error {
	if mask == "" {
		return nil
	}
	n := len(strings.Split(clusters, ","))
	masks, err := parseMasks(mask, n)
	if err != nil {
		return err
	}
	if n == 1 {
		f.NodeCIDRMaskSize = masks[0]
		return nil
	}
	for i, c := range strings.Split(clusters, ",") {
		p, _, err := cidr.ParseLenient(c)
		if err != nil {
			return bad("--cluster-cidr %q: %v", clusters, err)
		}
		if cidr.FamilyOf(p) == cidr.IPv4 {
			f.NodeCIDRMaskSizeIPv4 = masks[i]
		} else {
			f.NodeCIDRMaskSizeIPv6 = masks[i]
		}
	}
	return nil
}

func emit(w io.Writer, format string, v any) error {
	if format != "json" && format != "yaml" {
		return nil
	}
	return cli.Write(w, format, v)
}

func printPlan(w io.Writer, p *nodecidr.Plan) {
	fmt.Fprintf(w, "Plan %s (%s): %d node(s) to change, %d already fine\n", p.ID(), p.Mode, len(p.Steps), p.Unchanged)
	if len(p.Steps) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tACTION\tOLD PODCIDRS\tNEW PODCIDRS\tWHY")
		for _, s := range p.Steps {
			name := s.Node
			if s.ControlPlane {
				name += " (control plane)"
			}
			old := strings.Join(s.OldPodCIDRs, ",")
			if old == "" {
				old = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, s.Action, old, strings.Join(s.NewPodCIDRs, ","), s.Reason)
		}
		tw.Flush()
	}
	for _, s := range p.Skipped {
		fmt.Fprintf(w, "  skipped %s: %s\n", s.Node, s.Reason)
	}
	if cm := p.ControllerManager; cm != nil && cm.Layout != nil {
		verdict := "would start"
		if !cm.WouldStart {
			verdict = "would NOT start"
		}
		fmt.Fprintf(w, "kube-controller-manager with the target cluster CIDR %s %s once this plan is applied\n", joinPrefixes(cm.Layout.ClusterCIDRs), verdict)
	}
	for _, warn := range p.Warnings {
		fmt.Fprintln(w, "WARNING:", warn)
	}
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func printEvent(w io.Writer, e nodecidr.Event) {
	line := fmt.Sprintf("%s  %s", e.Time.Format(time.TimeOnly), e.String())
	if e.Gap > 0 {
		line += fmt.Sprintf(" (absent %s)", e.Gap.Round(time.Millisecond))
	}
	fmt.Fprintln(w, line)
}

func printResult(w io.Writer, r *nodecidr.Result) {
	verb := "changed"
	if r.DryRun != "" {
		verb = "would change (" + string(r.DryRun) + " dry run)"
	}
	fmt.Fprintf(w, "\n%d node(s) %s, %d already done", len(r.Changed), verb, len(r.AlreadyDone))
	if r.Gaps.Count > 0 {
		fmt.Fprintf(w, "; delete->create gap p50 %s, p99 %s, max %s (pod GC waits %s)",
			r.Gaps.P50.Round(time.Millisecond), r.Gaps.P99.Round(time.Millisecond), r.Gaps.Max.Round(time.Millisecond), nodecidr.PodGCQuarantine)
	}
	fmt.Fprintln(w)
}

func printVerify(w io.Writer, v *nodecidr.VerifyReport) {
	if v.OK {
		fmt.Fprintf(w, "Verified: %d node(s) have their planned podCIDRs and their metadata; no podCIDR is shared.\n", v.Checked)
	} else {
		fmt.Fprintln(w, "Verification found problems:")
	}
	for _, f := range v.Findings {
		fmt.Fprintf(w, "  %s %s: %s\n", f.Severity, f.Kind, f.Message)
	}
}
