// Command migrate-calico-podcidr is a runbook: it moves a kubeadm + Calico
// cluster to a new pod range (story 1: pod CIDR 10.233.64.0/18 with /24 node
// masks, boxed in by the Service CIDR 10.233.0.0/18, moves to 10.200.0.0/16)
// in the one order that never crash-loops kube-controller-manager and never
// loses a node. It can be stopped (or killed) and rerun at any point. It is
// flags and output around migrate.CalicoPodCIDR, whose doc lists the steps.
//
//	migrate-calico-podcidr --to 10.200.0.0/16 --service-cidr 10.233.0.0/18                      # print the runbook as a plan
//	migrate-calico-podcidr --to 10.200.0.0/16 --service-cidr 10.233.0.0/18 --journal DIR --apply # run it; rerun the same command to resume
//
// Step 6 needs a person (kube-controller-manager's --cluster-cidr): the runbook
// prints what to do and exits 3 until it sees the change (mirror pods, or
// --probe-node) or is given --continue. Exit codes: 0 done (or plan printed),
// 1 failure, 2 bad input (one line), 3 waiting for an operator step, 4 cluster
// unreachable or forbidden, 130 interrupted (rerun the same command to resume).
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

	calicoclient "github.com/projectcalico/api/pkg/client/clientset_generated/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// Exit codes, and the name errors start with.
const (
	exitOK      = cli.ExitOK
	exitFailed  = cli.ExitProblems
	exitBad     = cli.ExitBadInput
	exitWaiting = cli.ExitWaiting
	prog        = "migrate-calico-podcidr"
)

// ProbeNodeName is the Node --probe-node creates (and deletes) to see which
// range kube-controller-manager hands out.
const ProbeNodeName = migrate.CalicoProbeNodeName

var stepNames = []string{migrate.CalicoStepPreflight, migrate.CalicoStepAddPool, migrate.CalicoStepDisable, migrate.CalicoStepNodes,
	migrate.CalicoStepKubeadm, migrate.CalicoStepFlags, migrate.CalicoStepMove, migrate.CalicoStepVerify, migrate.CalicoStepDelete}

func main() {
	ctx, stop := cli.SignalContext()
	code := runWith(ctx, os.Args[1:], os.Stdout, os.Stderr, connectorWith(os.Stderr))
	stop()
	os.Exit(code)
}

// connector builds the clients (calico.Cluster.Kube serves everything else).
type connector func(ctx context.Context, kubeconfig, kubeContext string) (calico.Cluster, error)

// connectorWith loads the kubeconfig the kubectl way and checks, with progress
// lines on progress, that the API server answers: exit 2 for a kubeconfig
// that cannot be loaded, 4 for a server that does not answer within seconds.
func connectorWith(progress io.Writer) connector {
	return func(ctx context.Context, kubeconfig, kubeContext string) (calico.Cluster, error) {
		cfg, err := cli.Connect(ctx, kubeconfig, kubeContext, progress)
		if err != nil {
			return calico.Cluster{}, err
		}
		kube, kerr := kubernetes.NewForConfig(cfg)
		dyn, derr := dynamic.NewForConfig(cfg)
		cc, cerr := calicoclient.NewForConfig(cfg)
		if err := errors.Join(kerr, derr, cerr); err != nil {
			return calico.Cluster{}, err
		}
		pools, err := calico.NewPoolStore(ctx, calico.StoreClients{Discovery: kube.Discovery(), Calico: cc, Dynamic: dyn})
		if err != nil {
			return calico.Cluster{}, err
		}
		return calico.Cluster{Kube: kube, Pools: pools, Blocks: calico.NewCRDBlockSource(dyn), Dynamic: dyn}, nil
	}
}

type options struct {
	lock                                                cli.LockFlags
	kubeconfig, kubeContext, output, journalDir, dryRun string
	from, to, serviceCIDR, newPoolCIDR                  string
	m                                                   migrate.CalicoPodCIDROptions
	apply                                               bool
}

// Report is the runbook's output.
type Report struct {
	Mode        string               `json:"mode"`
	From        netip.Prefix         `json:"from"`
	To          netip.Prefix         `json:"to"`
	ServiceCIDR netip.Prefix         `json:"serviceCIDR"`
	OldPool     string               `json:"oldPool"`
	NewPool     string               `json:"newPool"`
	Journal     string               `json:"journal,omitempty"`
	Steps       []migrate.StepReport `json:"steps"`
	Waiting     *migrate.Pause       `json:"waiting,omitempty"`
	Error       string               `json:"error,omitempty"`
}

// badInput are the sentinels that mean bad input (exit 2).
var badInput = []error{migrate.ErrInvalidInput, calico.ErrInvalidPool, calico.ErrInvalidPlan, calico.ErrPoolNotFound, nodecidr.ErrInvalidOptions}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		o.m.Cluster, err = connect(ctx, o.kubeconfig, o.kubeContext)
	}
	var m *migrate.CalicoPodCIDRMigration
	if err == nil {
		m, err = migrate.CalicoPodCIDR(o.m)
	}
	if err != nil {
		return cli.Fail(stderr, prog, err, badInput...)
	}
	mode := map[bool]migrate.Mode{false: migrate.ModePlan, true: migrate.ModeApply}[o.apply]
	if o.dryRun == "server" {
		mode = migrate.ModeServerDryRun
	}
	runner := migrate.Runner{Mode: mode, JournalDir: o.journalDir}
	// Every run that writes holds the Leases of the packages it writes
	// through, and keeps its journal in the cluster too (unless --no-lock).
	lock, err := o.lock.Locker(o.m.Cluster.Kube, mode != migrate.ModePlan, migrate.LockScopes(m)...)
	if err != nil {
		return cli.Fail(stderr, prog, err, badInput...)
	}
	if lock != nil {
		runner.Lock, runner.ClusterJournal = lock, &migrate.ClusterJournal{Client: o.m.Cluster.Kube, Namespace: o.lock.Namespace}
	}
	if o.output == "" {
		runner.Progress = func(line string) { fmt.Fprintln(stderr, line) }
	}
	rep, err := runner.Run(ctx, m)
	code := cli.ExitCode(err, badInput...)
	if rep.Paused() {
		code = exitWaiting
	}
	out := Report{Mode: string(mode), From: m.From(), To: m.To(), ServiceCIDR: m.ServiceCIDR(), OldPool: m.OldPool(), NewPool: m.NewPool()}
	if rep != nil {
		out.Journal, out.Steps, out.Waiting = rep.Journal, rep.Steps, rep.Waiting
	} else if _, serr := os.Stat(o.journalDir); serr == nil || mode == migrate.ModeApply {
		out.Journal = o.journalDir
	}
	if code == exitBad || (code != exitFailed && code != exitWaiting && len(out.Steps) == 0) {
		// Refused before any step ran: one line, no report, no next step.
		return cli.Fail(stderr, prog, err, badInput...)
	}
	if err != nil {
		out.Error = cli.OneLine(err)
	}
	if o.output != "" {
		if werr := cli.Write(stdout, o.output, out); werr != nil && code == exitOK {
			code = exitFailed
		}
	} else {
		printText(stdout, out, o.journalDir)
	}
	cli.Fail(stderr, prog, err, badInput...)
	return code
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.output, "o", "", "output format: json or yaml (default: text)")
	fs.StringVar(&o.from, "from", "", "old pod CIDR (default: the old pool's CIDR; recorded in the journal)")
	fs.StringVar(&o.to, "to", "", "new cluster CIDR, e.g. 10.200.0.0/16 (required)")
	fs.StringVar(&o.serviceCIDR, "service-cidr", "", "the Service CIDR (default: kube-controller-manager's --service-cluster-ip-range as found in the cluster)")
	fs.StringVar(&o.m.OldPool, "old-pool", migrate.CalicoDefaultOldPool, "the Calico IPPool to retire")
	fs.StringVar(&o.m.NewPool, "new-pool", "", "name of the new IPPool (default: ippool-<cidr>)")
	fs.StringVar(&o.newPoolCIDR, "new-pool-cidr", "", "CIDR of the new IPPool, inside --to (default: --to)")
	fs.IntVar(&o.m.NodeMask, "node-mask", 0, "kube-controller-manager's --node-cidr-mask-size (default: as found in the cluster, else 24)")
	fs.StringVar(&o.journalDir, "journal", "", "journal directory; required with --apply; rerun with the same one to resume")
	fs.BoolVar(&o.apply, "apply", false, "carry out the runbook (otherwise print it as a plan)")
	o.lock.Register(fs)
	fs.StringVar(&o.dryRun, "dry-run", "", "client (print the plan) or server (the API server checks the writes of steps 2-5, stores nothing)")
	fs.StringVar(&o.m.Manifests, "manifests", "", "directory holding kube-controller-manager.yaml to render the flag edit from (read only)")
	fs.StringVar(&o.m.Out, "out", "", "with --manifests: directory to write the rewritten manifest to")
	fs.BoolVar(&o.m.Continue, "continue", false, "the operator step (kube-controller-manager flag) is done: go on without observing it")
	fs.BoolVar(&o.m.ProbeNode, "probe-node", false, "observe the operator step by creating (and deleting) a Node "+ProbeNodeName+" and reading the podCIDR kube-controller-manager gives it")
	fs.StringVar((*string)(&o.m.Move), "move", string(calico.MoveRollout), "how pods leave the old pool: rollout or evict")
	fs.DurationVar(&o.m.PollInterval, "poll-interval", 2*time.Second, "poll period of the waits")
	fs.DurationVar(&o.m.RolloutTimeout, "rollout-timeout", 10*time.Minute, "how long one workload's rollout may take")
	fs.DurationVar(&o.m.DrainTimeout, "drain-timeout", 2*time.Minute, "how long to wait for Calico to release the old pool's addresses")
	fs.DurationVar(&o.m.ProbeTimeout, "probe-timeout", 20*time.Second, "with --probe-node: how long to wait for the probe's podCIDR")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: migrate-calico-podcidr --to CIDR [--service-cidr CIDR] [--journal DIR --apply] [flags]")
			fs.PrintDefaults()
			return o, err
		}
		return o, cli.Usagef("%s", err)
	}
	if err := cli.NoArgs(fs); err != nil {
		return o, err
	}
	if err := o.lock.Check(); err != nil {
		return o, err
	}
	switch {
	case o.output != "" && o.output != "json" && o.output != "yaml":
		return o, cli.Usagef("-o %q: want json or yaml", o.output)
	case o.dryRun != "" && o.dryRun != "client" && o.dryRun != "server":
		return o, cli.Usagef("--dry-run %q: want client or server", o.dryRun)
	case o.to == "":
		return o, cli.Usagef("--to is required: the new cluster CIDR, e.g. --to 10.200.0.0/16")
	case o.apply && o.dryRun == "" && o.journalDir == "":
		return o, cli.Usagef("--journal DIR is required with --apply: it records the finished steps and every node before its delete, so a rerun resumes")
	case o.apply && o.dryRun != "":
		return o, cli.Usagef("--apply and --dry-run=%s exclude each other: give one of them", o.dryRun)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll-interval", o.m.PollInterval}, {"rollout-timeout", o.m.RolloutTimeout}, {"drain-timeout", o.m.DrainTimeout}, {"probe-timeout", o.m.ProbeTimeout}} {
		if d.v == 0 { // negative: Validate
			return o, cli.Usagef("--%s %s: must be positive, e.g. 2s", d.name, d.v)
		}
	}
	for _, f := range []struct {
		name, v string
		p       *netip.Prefix
	}{{"--to", o.to, &o.m.To}, {"--from", o.from, &o.m.From}, {"--service-cidr", o.serviceCIDR, &o.m.ServiceCIDR}, {"--new-pool-cidr", o.newPoolCIDR, &o.m.NewPoolCIDR}} {
		if f.v == "" {
			continue
		}
		p, err := cidr.Parse(f.v)
		if err != nil {
			return o, cli.Usagef("%s %s: %v", f.name, f.v, err)
		}
		*f.p = p
	}
	// Options that need no cluster are checked before connecting.
	return o, o.m.Validate()
}

func printText(w io.Writer, rep Report, journalDir string) {
	head := fmt.Sprintf("runbook: move the pod range %s -> %s (Calico pool %s -> %s)", rep.From, rep.To, rep.OldPool, rep.NewPool)
	switch migrate.Mode(rep.Mode) {
	case migrate.ModePlan:
		fmt.Fprintln(w, head+" (plan only; run with --journal DIR --apply)")
	case migrate.ModeServerDryRun:
		fmt.Fprintln(w, head+" (server dry run: nothing stored)")
	default:
		fmt.Fprintf(w, "%s (journal %s)\n", head, journalDir)
	}
	migrate.WriteSteps(w, rep.Steps, rep.Waiting)
}
