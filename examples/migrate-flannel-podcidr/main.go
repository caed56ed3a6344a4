// Command migrate-flannel-podcidr is a runbook for a flannel cluster in kube
// subnet manager mode (story 2 of FACTS.md): it repairs duplicate and
// missing node podCIDRs, then widens flannel's Network (e.g. 10.244.0.0/16 to
// 10.240.0.0/12) and kube-controller-manager's --cluster-cidr with it. It can
// be stopped (even SIGKILLed) and rerun at any point. It is flags and output
// around migrate.FlannelPodCIDR, whose doc lists the five steps.
//
//	migrate-flannel-podcidr --network 10.240.0.0/12                         # print the runbook as a plan
//	migrate-flannel-podcidr --network 10.240.0.0/12 --journal DIR --apply   # run it; rerun the same command to resume
//
// Step 3 needs a person (kube-controller-manager's --cluster-cidr): the
// runbook exits 3 until it observes the new flag on the mirror pod, or is
// rerun with --continue.
//
// With --agents a moved node's pods keep their old addresses, reachable,
// until each is evicted in turn (make-before-break, the default with
// agents; --make-before-break=false deletes them right after the move); a
// pod that cannot be evicted within --health-timeout also stops the runbook
// with exit 3, naming the pods and the `kubectl rollout restart` commands.
//
// Exit codes (internal/cli): 0 done (or plan printed), 1 failure or a failed
// check, 2 bad input (one line), 3 waiting for an operator step, 4 cluster
// unreachable or forbidden, 130 interrupted (rerun to resume).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// Exit codes: the contract of internal/cli.
const (
	exitOK      = cli.ExitOK
	exitFailed  = cli.ExitProblems
	exitBad     = cli.ExitBadInput
	exitWaiting = cli.ExitWaiting
)

// Names of the composition this program's tests rely on.
const (
	stepKCM               = migrate.FlannelStepControllerManager
	keyFixPlan            = migrate.FlannelFixPlanKey
	restartedAtAnnotation = migrate.FlannelRestartedAtAnnotation
)

func main() {
	ctx, stop := cli.SignalContext()
	code := runWith(ctx, os.Args[1:], os.Stdout, os.Stderr, kubeconfigConnector)
	stop()
	os.Exit(code)
}

// connector builds the clientset.
type connector func(ctx context.Context, kubeconfig, kubeContext string) (kubernetes.Interface, error)

// kubeconfigConnector loads the kubeconfig and checks, within
// cli.ReachTimeout, that the API server answers (exit 4 otherwise).
func kubeconfigConnector(ctx context.Context, kubeconfig, kubeContext string) (kubernetes.Interface, error) {
	cfg, err := cli.Connect(ctx, kubeconfig, kubeContext, os.Stderr)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

type options struct {
	lock                                                cli.LockFlags
	kubeconfig, kubeContext, output, journalDir, dryRun string
	network, from, nodeRange                            string
	apply, agents                                       bool
	m                                                   migrate.FlannelPodCIDROptions
	hosts                                               migrate.HostAgents
}

// Report is the runbook's output.
type Report struct {
	Mode    string               `json:"mode"`
	From    netip.Prefix         `json:"from"`
	To      netip.Prefix         `json:"to"`
	Journal string               `json:"journal,omitempty"`
	Steps   []migrate.StepReport `json:"steps"`
	Waiting *migrate.Pause       `json:"waiting,omitempty"`
	Error   string               `json:"error,omitempty"`
}

// badInput are the sentinels that mean bad input (exit 2): an option the
// composition or a library refused, or a plan read back from the journal
// that fails its invariants.
var badInput = []error{migrate.ErrInvalidInput, nodecidr.ErrInvalidOptions, nodecidr.ErrInvalidPlan, flannel.ErrInvalidRequest}

// exitCode maps an error to the exit-code contract (internal/cli).
func exitCode(err error) int {
	var pe *cidr.ParseError
	if errors.As(err, &pe) {
		return exitBad
	}
	return cli.ExitCode(err, badInput...)
}

const prog = "migrate-flannel-podcidr"

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		// Options that need no cluster are checked before connecting.
		err = o.m.Validate()
	}
	if err == nil {
		o.m.Kube, err = connect(ctx, o.kubeconfig, o.kubeContext)
		o.hosts.Kube = o.m.Kube
	}
	var m *migrate.FlannelPodCIDRMigration
	if err == nil {
		m, err = migrate.FlannelPodCIDR(o.m)
	}
	if err != nil {
		return cli.Fail(stderr, prog, err, badInput...)
	}
	mode := migrate.ModePlan
	switch {
	case o.dryRun == "server":
		mode = migrate.ModeServerDryRun
	case o.apply && o.dryRun == "":
		mode = migrate.ModeApply
	}
	runner := migrate.Runner{Mode: mode, JournalDir: o.journalDir}
	// Every run that writes holds the Leases of the packages it writes
	// through, and keeps its journal in the cluster too (unless --no-lock).
	lock, err := o.lock.Locker(o.m.Kube, mode != migrate.ModePlan, migrate.LockScopes(m)...)
	if err != nil {
		return cli.Fail(stderr, prog, err, badInput...)
	}
	if lock != nil {
		runner.Lock, runner.ClusterJournal = lock, &migrate.ClusterJournal{Client: o.m.Kube, Namespace: o.lock.Namespace}
	}
	if o.agents {
		runner.Agents = &o.hosts
	}
	if o.output == "" {
		runner.Progress = func(line string) { fmt.Fprintln(stderr, line) }
	}
	rep, err := runner.Run(ctx, m)
	code := exitCode(err)
	if rep == nil || code == exitBad || (err != nil && len(rep.Steps) == 0) {
		// Refused before the first step: one line, no report, no next step.
		return cli.Fail(stderr, prog, err, badInput...)
	}
	if rep.Paused() {
		code = exitWaiting
	}
	out := Report{Mode: string(rep.Mode), From: m.From(), To: m.To(), Journal: rep.Journal, Steps: rep.Steps, Waiting: rep.Waiting}
	if err != nil {
		out.Error = cli.OneLine(err)
	}
	if o.output != "" {
		if werr := cli.Write(stdout, o.output, out); werr != nil && code == exitOK {
			code = exitFailed
		}
	} else {
		printText(stdout, out)
	}
	if err != nil {
		cli.Fail(stderr, prog, err, badInput...)
	}
	return code
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	o := options{}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.output, "o", "", "output format: json or yaml (default: text)")
	fs.StringVar(&o.network, "network", "", "new flannel Network and --cluster-cidr; must contain the current Network (required)")
	fs.StringVar(&o.from, "from", "", "current Network (default: net-conf.json's; recorded in the journal)")
	fs.StringVar(&o.m.Namespace, "namespace", flannel.DefaultNetConfNamespace, "namespace of flannel's ConfigMap and pods")
	fs.StringVar(&o.m.ConfigMap, "configmap", flannel.DefaultNetConfName, "name of the ConfigMap holding net-conf.json")
	fs.StringVar(&o.m.FlannelSelector, "flannel-selector", "app=flannel", "label selector of the flannel pods")
	fs.StringVar(&o.journalDir, "journal", "", "journal directory; required with --apply; rerun with the same one to resume")
	fs.BoolVar(&o.apply, "apply", false, "carry out the runbook (otherwise print it as a plan)")
	o.lock.Register(fs)
	fs.StringVar(&o.dryRun, "dry-run", "", "client (print the plan) or server (the API server checks every write, stores nothing)")
	fs.StringVar(&o.m.Manifests, "manifests", "", "directory holding kube-controller-manager.yaml to render the --cluster-cidr edit from (read only)")
	fs.StringVar(&o.m.Out, "out", "", "with --manifests: directory to write the rewritten manifest to")
	fs.BoolVar(&o.m.Continue, "continue", false, "the operator step (kube-controller-manager restart) is done: go on without observing it")
	fs.BoolVar(&o.m.RewriteNodes, "rewrite-nodes", false, "also renumber every node's podCIDR from the old Network into --node-range")
	fs.StringVar(&o.nodeRange, "node-range", "", "with --rewrite-nodes: the range inside --network the old Network's subnets move to (same offsets)")
	fs.IntVar(&o.m.NodeMask, "node-mask", cidr.DefaultNodeMaskIPv4, "node mask when kube-controller-manager's flags cannot be discovered")
	fs.DurationVar(&o.m.HealthTimeout, "health-timeout", 2*time.Minute, "how long a moved node may take to be Ready with its pods running")
	fs.DurationVar(&o.m.PollInterval, "poll-interval", time.Second, "poll period of the waits")
	fs.BoolVar(&o.m.MakeBeforeBreak, "make-before-break", false, "keep each moved node's old subnet reachable through the agents and replace its pods one at a time by eviction (PodDisruptionBudgets respected) instead of deleting them; needs --agents, and is on by default with it (--make-before-break=false: delete them)")
	fs.BoolVar(&o.m.FixOnly, "fix-only", false, "repair only: nodes with a duplicate or missing podCIDR get a free subnet of the Network in use, and their hosts follow; the Network and --cluster-cidr stay (--network may be left out)")
	fs.BoolVar(&o.agents, "agents", false, "nodes running examples/nodenet-agent get their host work through it (others: the command to run there)")
	fs.StringVar(&o.hosts.Namespace, "agent-namespace", migrate.DefaultAgentNamespace, "namespace of the node agents' Leases")
	fs.DurationVar(&o.hosts.Timeout, "agent-timeout", 2*time.Minute, "how long to wait for one node agent's report")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: migrate-flannel-podcidr (--network CIDR | --fix-only) [--journal DIR --apply] [flags]")
			fs.PrintDefaults()
			return o, err
		}
		return o, cli.Usagef("%s", err)
	}
	if fs.NArg() > 0 {
		return o, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	// With agents, make-before-break is the default: the node's pods stay
	// reachable while it moves (BENCHMARKS.md section 6).
	mbbSet := false
	fs.Visit(func(f *flag.Flag) { mbbSet = mbbSet || f.Name == "make-before-break" })
	if o.agents && !mbbSet {
		o.m.MakeBeforeBreak = true
	}
	switch o.output {
	case "", "json", "yaml":
	default:
		return o, cli.Usagef("-o %q: want json or yaml", o.output)
	}
	switch o.dryRun {
	case "", "client", "server":
	default:
		return o, cli.Usagef("--dry-run %q: want client or server", o.dryRun)
	}
	if o.network == "" && !o.m.FixOnly {
		return o, cli.Usagef("--network is required: the new flannel Network, which must contain the current one, e.g. --network 10.240.0.0/12 (or --fix-only)")
	}
	if o.apply && o.dryRun == "" && o.journalDir == "" {
		return o, cli.Usagef("--journal DIR is required with --apply: it records the finished steps and every Node before its delete, so a rerun resumes")
	}
	// Zero values the composition would default are refused on the command line.
	switch {
	case o.m.NodeMask == 0:
		return o, cli.Usagef("--node-mask 0: want 1..32")
	case o.m.HealthTimeout == 0:
		return o, cli.Usagef("--health-timeout 0s: must be positive, e.g. 2m")
	case o.m.PollInterval == 0:
		return o, cli.Usagef("--poll-interval 0s: must be positive, e.g. 1s")
	}
	for _, p := range []struct {
		flag, v string
		dst     *netip.Prefix
	}{{"network", o.network, &o.m.Network}, {"from", o.from, &o.m.From}, {"node-range", o.nodeRange, &o.m.NodeRange}} {
		if p.v == "" {
			continue
		}
		v, err := cidr.Parse(p.v)
		if err != nil {
			return o, cli.Usagef("--%s: %s", p.flag, err)
		}
		*p.dst = v
	}
	if err := o.lock.Check(); err != nil {
		return o, err
	}
	return o, nil
}

func printText(w io.Writer, rep Report) {
	what := fmt.Sprintf("flannel Network %s -> %s", rep.From, rep.To)
	if rep.From == rep.To {
		what = fmt.Sprintf("repair in flannel Network %s (--fix-only)", rep.To)
	}
	switch migrate.Mode(rep.Mode) {
	case migrate.ModePlan:
		fmt.Fprintf(w, "runbook: %s (plan only; run with --journal DIR --apply)\n", what)
	case migrate.ModeServerDryRun:
		fmt.Fprintf(w, "runbook: %s (server dry run: nothing stored)\n", what)
	default:
		fmt.Fprintf(w, "runbook: %s (journal %s)\n", what, rep.Journal)
	}
	migrate.WriteSteps(w, rep.Steps, rep.Waiting)
}
