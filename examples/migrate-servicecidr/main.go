// Command migrate-servicecidr is a runbook: it moves a cluster's Service
// range (story 3: 100.64.0.0/13, which collides with Tailscale, to
// 172.24.0.0/15) from start to finish and can be stopped and rerun at any
// point. It is flags and output around migrate.ServiceCIDR, whose doc lists
// the six steps.
//
//	migrate-servicecidr --to 172.24.0.0/15                          # print the whole runbook as a plan
//	migrate-servicecidr --to 172.24.0.0/15 --journal DIR --apply    # run it; rerun the same command to resume
//
// Step 5 needs a person (the control-plane flags): the runbook prints what
// to do and exits 3; the next run goes on once it observes the change
// through the API, or when given --continue.
//
// Exit codes: 0 done (or plan printed), 1 failure, 2 bad input (one line),
// 3 waiting for an operator step, 4 unreachable, 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// Exit codes.
const (
	exitOK      = cli.ExitOK
	exitFailed  = cli.ExitProblems
	exitBad     = cli.ExitBadInput
	exitWaiting = cli.ExitWaiting
)

// reasonInconsistent is the event that proves kube-apiserver's restart.
const reasonInconsistent = migrate.ReasonServiceCIDRInconsistent

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

// connector builds a servicecidr.Client (whose Kube() serves everything else).
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

type options struct {
	lock                                                cli.LockFlags
	kubeconfig, kubeContext, output, journalDir, dryRun string
	from, to                                            string
	m                                                   migrate.ServiceCIDROptions
	apply                                               bool
}

// Report is the runbook's output.
type Report struct {
	Mode    string               `json:"mode"`
	From    []netip.Prefix       `json:"from"`
	To      []netip.Prefix       `json:"to"`
	Journal string               `json:"journal,omitempty"`
	Steps   []migrate.StepReport `json:"steps"`
	Waiting *migrate.Pause       `json:"waiting,omitempty"`
	Error   string               `json:"error,omitempty"`
}

// badInput are the errors that mean the input was refused before anything
// was written: exit code 2.
var badInput = []error{migrate.ErrInvalidInput, migrate.ErrStalePlan, servicecidr.ErrInvalid, servicecidr.ErrConflict, servicecidr.ErrRangeFull, servicecidr.ErrPlanFormat}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		o.m.To, err = servicecidr.ParseCIDRs("--to", o.to)
	}
	if err == nil && o.from != "" {
		o.m.From, err = servicecidr.ParseCIDRs("--from", o.from)
	}
	if err == nil {
		// Options that need no cluster are checked before connecting.
		err = o.m.Validate()
	}
	if err == nil {
		o.m.Client, err = connect(ctx, o.kubeconfig, o.kubeContext)
	}
	if o.output == "" {
		o.m.Events = func(e servicecidr.Event) { fmt.Fprintln(stderr, "  "+migrate.EventLine(e)) }
	}
	var m *migrate.ServiceCIDRMigration
	if err == nil {
		m, err = migrate.ServiceCIDR(o.m)
	}
	if err != nil {
		return cli.Fail(stderr, "migrate-servicecidr", err, badInput...)
	}
	mode := migrate.ModePlan
	switch {
	case o.dryRun == "server":
		mode = migrate.ModeServerDryRun
	case o.apply:
		mode = migrate.ModeApply
	}
	runner := migrate.Runner{Mode: mode, JournalDir: o.journalDir}
	// Every run that writes holds the Leases of the packages it writes
	// through, and keeps its journal in the cluster too (unless --no-lock).
	lock, err := o.lock.Locker(o.m.Client.Kube(), mode != migrate.ModePlan, migrate.LockScopes(m)...)
	if err != nil {
		return cli.Fail(stderr, "migrate-servicecidr", err, badInput...)
	}
	if lock != nil {
		runner.Lock, runner.ClusterJournal = lock, &migrate.ClusterJournal{Client: o.m.Client.Kube(), Namespace: o.lock.Namespace}
	}
	if o.output == "" {
		runner.Progress = func(line string) { fmt.Fprintln(stderr, line) }
	}
	rep, err := runner.Run(ctx, m)
	if rep == nil || cli.ExitCode(err, badInput...) == exitBad {
		// Refused: one line, no report, no next step.
		return cli.Fail(stderr, "migrate-servicecidr", err, badInput...)
	}
	out := Report{Mode: string(rep.Mode), From: m.From(), To: m.To(), Journal: rep.Journal, Steps: rep.Steps, Waiting: rep.Waiting}
	if err != nil {
		out.Error = cli.OneLine(err)
	}
	code := exitOK
	if rep.Paused() {
		code = exitWaiting
	}
	if o.output != "" {
		if werr := cli.Write(stdout, o.output, out); werr != nil && err == nil {
			return cli.Fail(stderr, "migrate-servicecidr", werr)
		}
	} else {
		printText(stdout, out)
	}
	if err != nil {
		return cli.Fail(stderr, "migrate-servicecidr", err, badInput...)
	}
	return code
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("migrate-servicecidr", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.output, "o", "", "output format: json or yaml (default: text)")
	fs.StringVar(&o.from, "from", "", "old Service range(s) (default: the \"kubernetes\" ServiceCIDR's; recorded in the journal)")
	fs.StringVar(&o.to, "to", "", "new Service range(s), one per family (required)")
	fs.StringVar(&o.journalDir, "journal", "", "journal directory; required with --apply; rerun with the same one to resume")
	fs.BoolVar(&o.apply, "apply", false, "carry out the runbook (otherwise print it as a plan)")
	o.lock.Register(fs)
	fs.StringVar(&o.dryRun, "dry-run", "", "client (print the plan) or server (the API server checks every write of steps 1-4, stores nothing)")
	fs.BoolVar(&o.m.IncludeLoadBalancers, "include-loadbalancers", false, "also move type=LoadBalancer Services (their external address may change)")
	fs.StringVar(&o.m.Manifests, "manifests", "", "directory holding kube-apiserver.yaml and kube-controller-manager.yaml to render the flag edits from (read only)")
	fs.StringVar(&o.m.Out, "out", "", "with --manifests: directory to write the rewritten manifests to")
	fs.BoolVar(&o.m.Continue, "continue", false, "the operator step (control-plane flags) is done: go on without observing it")
	fs.DurationVar(&o.m.DrainTimeout, "drain-timeout", 2*time.Minute, "how long to wait for the old ServiceCIDR to drain in the last step")
	fs.DurationVar(&o.m.ReadyTimeout, "ready-timeout", 2*time.Minute, "how long to wait for a ServiceCIDR to become Ready and for default/kubernetes to be recreated")
	fs.DurationVar(&o.m.PollInterval, "poll-interval", time.Second, "poll period of the waits")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: migrate-servicecidr --to CIDR [--from CIDR] [--journal DIR --apply] [flags]")
			fs.PrintDefaults()
			return o, err
		}
		return o, cli.Usagef("%s", err)
	}
	if err := cli.NoArgs(fs); err != nil {
		return o, err
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
	if o.to == "" {
		return o, cli.Usagef("--to is required: the new Service range, e.g. --to 172.24.0.0/15")
	}
	if o.apply && o.dryRun == "client" {
		return o, cli.Usagef("--apply and --dry-run client conflict: --apply changes the cluster, --dry-run client only prints the runbook; give one (--dry-run server asks the API server to check every write)")
	}
	if o.apply && o.dryRun == "" && o.journalDir == "" {
		return o, cli.Usagef("--journal DIR is required with --apply: it records the finished steps and every Service before its delete, so a rerun resumes")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"drain-timeout", o.m.DrainTimeout}, {"ready-timeout", o.m.ReadyTimeout}, {"poll-interval", o.m.PollInterval}} {
		if err := cli.NonNegative(d.name, d.v); err != nil {
			return o, err
		}
		if d.v == 0 {
			return o, cli.Usagef("--%s %s: must be positive", d.name, d.v)
		}
	}
	if err := o.lock.Check(); err != nil {
		return o, err
	}
	return o, nil
}

func printText(w io.Writer, rep Report) {
	move := fmt.Sprintf("move the Service range %s -> %s", prefixes(rep.From), prefixes(rep.To))
	switch migrate.Mode(rep.Mode) {
	case migrate.ModePlan:
		fmt.Fprintf(w, "runbook: %s (plan only; run with --journal DIR --apply)\n", move)
	case migrate.ModeServerDryRun:
		fmt.Fprintf(w, "runbook: %s (server dry run: nothing stored)\n", move)
	default:
		fmt.Fprintf(w, "runbook: %s (journal %s)\n", move, rep.Journal)
	}
	migrate.WriteSteps(w, rep.Steps, rep.Waiting)
}

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
