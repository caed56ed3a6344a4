// Command migrate-calico-podcidr is a runbook: it moves a kubeadm + Calico
// cluster to a new pod range (story 1: pod CIDR 10.233.64.0/18 with /24 node
// masks, boxed in by the Service CIDR 10.233.0.0/18, moves to 10.200.0.0/16)
// from start to finish, composing the calico, nodecidr and kubeadmcfg
// packages, in the one order that never crash-loops kube-controller-manager
// and never loses a node. It can be stopped (or killed) and rerun at any point.
//
//	migrate-calico-podcidr --to 10.200.0.0/16 --service-cidr 10.233.0.0/18                      # print the runbook as a plan
//	migrate-calico-podcidr --to 10.200.0.0/16 --service-cidr 10.233.0.0/18 --journal DIR --apply # run it; rerun the same command to resume
//
// Steps, each recorded in one journal (--journal DIR) once done:
//
//  1. preflight: the new cluster CIDR holds every node (cidr.ComputePodCapacity),
//     conflicts with nothing (cidr.Analyze: Service CIDR, node addresses),
//     kube-controller-manager would start with the new --cluster-cidr once the
//     nodes are moved (nodecidr.PreflightAfter), and the caller may do
//     everything the runbook needs (SelfSubjectAccessReview).
//  2. add-pool: create the new Calico pool inside the new cluster CIDR
//     (calico Plan, journaled, then Apply stopped after create-new-pool).
//  3. disable-old-pool: the old pool gives no new addresses (Apply stopped
//     after disable-old-pool); running pods keep theirs.
//  4. move-nodes: rewrite every node's podCIDR into the new range, keeping its
//     offset, workers first and control-plane nodes last (nodecidr rebase,
//     delete + create per node, crash-safe journal in DIR/nodecidr).
//  5. kubeadm-config: podSubnet in kubeadm-config and clusterCIDR in
//     kube-proxy's ConfigMap, when they exist (kubeadmcfg).
//  6. controller-manager-flags: the --cluster-cidr edit of
//     kube-controller-manager (rewritten manifest in --out with --manifests;
//     /etc is never touched). This step needs a person: the runbook checks
//     once more that no node would crash kube-controller-manager, prints what
//     to do and exits 3. The next run goes on once it observes the change
//     (every kube-controller-manager mirror pod runs with the new flag, or,
//     with --probe-node, a probe Node gets a podCIDR in the new range), or when
//     given --continue.
//  7. move-workloads: recreate every pod that holds an old address (cluster
//     DNS first; rollout restart or eviction, respecting PodDisruptionBudgets).
//  8. verify: no pod and no IPAM allocation left in the old pool, every planned
//     node has its new podCIDR and kept its metadata, and kube-controller-manager
//     would start with the new flag against the live nodes.
//  9. delete-old-pool: delete the old Calico pool.
//
// Every input is checked against the cluster before the first write: --from
// must be the old pool's CIDR, the old pool must exist, the new pool and the
// node moves must be plannable.
//
// Exit codes: 0 done (or plan printed), 1 failure, 2 bad input (one line),
// 3 waiting for an operator step, 4 cluster unreachable or forbidden, 130
// interrupted (rerun the same command to resume).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	calicoclient "github.com/projectcalico/api/pkg/client/clientset_generated/clientset"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitBad     = 2
	exitWaiting = 3
)

// Step names, in order. They are the journal keys (step/<name>).
const (
	stepPreflight = "preflight"
	stepAddPool   = "add-pool"
	stepDisable   = "disable-old-pool"
	stepNodes     = "move-nodes"
	stepKubeadm   = "kubeadm-config"
	stepFlags     = "controller-manager-flags"
	stepMove      = "move-workloads"
	stepVerify    = "verify"
	stepDelete    = "delete-old-pool"
)

var stepNames = []string{stepPreflight, stepAddPool, stepDisable, stepNodes, stepKubeadm, stepFlags, stepMove, stepVerify, stepDelete}

var stepTitles = map[string]string{
	stepPreflight: "check capacity, conflicts, permissions and kube-controller-manager's start-up",
	stepAddPool:   "add the new Calico pool inside the new cluster CIDR",
	stepDisable:   "disable the old Calico pool (no new addresses from it)",
	stepNodes:     "rewrite every node's podCIDR into the new range, control plane last",
	stepKubeadm:   "kubeadm-config podSubnet and kube-proxy clusterCIDR",
	stepFlags:     "kube-controller-manager --cluster-cidr (operator)",
	stepMove:      "move the pods off the old pool (cluster DNS first)",
	stepVerify:    "verify pods, IPAM blocks and nodes",
	stepDelete:    "delete the old Calico pool",
}

// Journal keys.
const (
	keyRunbook     = "runbook"
	keyCalicoPlan  = "calico-plan"
	keyNodePlan    = "nodecidr-plan"
	keyKubeadmPlan = "kubeadmcfg-plan"
)

// ProbeNodeName is the Node --probe-node creates (and deletes) to see which
// range kube-controller-manager hands out.
const ProbeNodeName = "cidrshift-probe"

const probeLabel = "cidrshift.io/probe"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runWith(ctx, os.Args[1:], os.Stdout, os.Stderr, connectorWith(os.Stderr))
	stop()
	os.Exit(code)
}

// connector builds the clients (calico.Cluster.Kube serves everything else).
type connector func(ctx context.Context, kubeconfig, kubeContext string) (calico.Cluster, error)

// connectorWith is kubeconfigConnector with its progress lines (while the
// API server does not answer) written to progress.
func connectorWith(progress io.Writer) connector {
	return func(ctx context.Context, kubeconfig, kubeContext string) (calico.Cluster, error) {
		return kubeconfigConnector(ctx, kubeconfig, kubeContext, progress)
	}
}

// kubeconfigConnector loads the kubeconfig the kubectl way and checks that the
// API server answers: exit 2 for a kubeconfig that cannot be loaded, 4 for a
// server that does not answer within seconds.
func kubeconfigConnector(ctx context.Context, kubeconfig, kubeContext string, progress io.Writer) (calico.Cluster, error) {
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

// usageError is bad input: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func badf(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

var errHelp = errors.New("help")

// errWaiting ends a run that stopped at an operator step (exit 3).
var errWaiting = errors.New("waiting for an operator step")

type options struct {
	kubeconfig, kubeContext, output       string
	from, to, serviceCIDR, journalDir     string
	oldPool, newPool, newPoolCIDR, dryRun string
	manifests, out, move                  string
	nodeMask                              int
	apply, cont, probeNode                bool
	poll, rolloutTimeout, drainTimeout    time.Duration
	probeTimeout                          time.Duration
}

// StepReport is what the runbook says about one step.
type StepReport struct {
	Number int    `json:"number"`
	Name   string `json:"name"`
	Title  string `json:"title"`
	// Status: done (by an earlier run), completed (now), planned, dry-run,
	// operator, waiting (for an operator), failed, not-run, not-reached.
	Status  string   `json:"status"`
	Details []string `json:"details,omitempty"`
}

// Report is the runbook's output.
type Report struct {
	Mode        string       `json:"mode"`
	From        netip.Prefix `json:"from"`
	To          netip.Prefix `json:"to"`
	ServiceCIDR netip.Prefix `json:"serviceCIDR"`
	OldPool     string       `json:"oldPool"`
	NewPool     string       `json:"newPool"`
	Journal     string       `json:"journal,omitempty"`
	Steps       []StepReport `json:"steps"`
	// Waiting is set when the run stopped at an operator step.
	Waiting *Waiting `json:"waiting,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// Waiting says what the operator must do before the next run.
type Waiting struct {
	Step         string   `json:"step"`
	Instructions []string `json:"instructions"`
	Observed     string   `json:"observed"`
	Resume       string   `json:"resume"`
}

// state is the runbook's own journal record: a rerun must ask for the same move.
type state struct {
	From        netip.Prefix `json:"from"`
	To          netip.Prefix `json:"to"`
	ServiceCIDR netip.Prefix `json:"serviceCIDR"`
	OldPool     string       `json:"oldPool"`
	NewPool     string       `json:"newPool"`
	NewPoolCIDR netip.Prefix `json:"newPoolCIDR"`
	Started     time.Time    `json:"started"`
}

// stepRecord marks a step done.
type stepRecord struct {
	Done time.Time `json:"done"`
	Note string    `json:"note,omitempty"`
}

type runbook struct {
	o      options
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	cl     calico.Cluster
	kube   kubernetes.Interface
	j      *journal.Journal
	mode   string // plan, apply, server-dry-run
	rep    Report

	from, to, svc, poolCIDR netip.Prefix
	nodeMask                int
	cplan                   *calico.SwapPlan
	nplan                   *nodecidr.Plan
	// cplanSaved and nplanSaved: the plan is in the journal.
	cplanSaved, nplanSaved bool
	// validated: validate passed; the steps run.
	validated bool
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "migrate-calico-podcidr: "+oneLine(err.Error()))
		return exitBad
	}
	r := &runbook{o: o, ctx: ctx, stdout: stdout, stderr: stderr}
	return r.run(connect)
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("migrate-calico-podcidr", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.output, "o", "", "output format: json or yaml (default: text)")
	fs.StringVar(&o.from, "from", "", "old pod CIDR (default: the old pool's CIDR; recorded in the journal)")
	fs.StringVar(&o.to, "to", "", "new cluster CIDR, e.g. 10.200.0.0/16 (required)")
	fs.StringVar(&o.serviceCIDR, "service-cidr", "", "the Service CIDR (default: kube-controller-manager's --service-cluster-ip-range as found in the cluster)")
	fs.StringVar(&o.oldPool, "old-pool", "default-ipv4-ippool", "the Calico IPPool to retire")
	fs.StringVar(&o.newPool, "new-pool", "", "name of the new IPPool (default: ippool-<cidr>)")
	fs.StringVar(&o.newPoolCIDR, "new-pool-cidr", "", "CIDR of the new IPPool, inside --to (default: --to)")
	fs.IntVar(&o.nodeMask, "node-mask", 0, "kube-controller-manager's --node-cidr-mask-size (default: as found in the cluster, else 24)")
	fs.StringVar(&o.journalDir, "journal", "", "journal directory; required with --apply; rerun with the same one to resume")
	fs.BoolVar(&o.apply, "apply", false, "carry out the runbook (otherwise print it as a plan)")
	fs.StringVar(&o.dryRun, "dry-run", "", "client (print the plan) or server (the API server checks the writes of steps 2-5, stores nothing)")
	fs.StringVar(&o.manifests, "manifests", "", "directory holding kube-controller-manager.yaml to render the flag edit from (read only)")
	fs.StringVar(&o.out, "out", "", "with --manifests: directory to write the rewritten manifest to")
	fs.BoolVar(&o.cont, "continue", false, "the operator step (kube-controller-manager flag) is done: go on without observing it")
	fs.BoolVar(&o.probeNode, "probe-node", false, "observe the operator step by creating (and deleting) a Node "+ProbeNodeName+" and reading the podCIDR kube-controller-manager gives it")
	fs.StringVar(&o.move, "move", "rollout", "how pods leave the old pool: rollout or evict")
	fs.DurationVar(&o.poll, "poll-interval", 2*time.Second, "poll period of the waits")
	fs.DurationVar(&o.rolloutTimeout, "rollout-timeout", 10*time.Minute, "how long one workload's rollout may take")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 2*time.Minute, "how long to wait for Calico to release the old pool's addresses")
	fs.DurationVar(&o.probeTimeout, "probe-timeout", 20*time.Second, "with --probe-node: how long to wait for the probe's podCIDR")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: migrate-calico-podcidr --to CIDR [--service-cidr CIDR] [--journal DIR --apply] [flags]")
			fs.PrintDefaults()
			return o, errHelp
		}
		return o, badf("%s", err)
	}
	if err := cli.NoArgs(fs); err != nil {
		return o, err
	}
	switch o.output {
	case "", "json", "yaml":
	default:
		return o, badf("-o %q: want json or yaml", o.output)
	}
	switch o.dryRun {
	case "", "client", "server":
	default:
		return o, badf("--dry-run %q: want client or server", o.dryRun)
	}
	switch calico.MoveMethod(o.move) {
	case calico.MoveRollout, calico.MoveEvict:
	default:
		return o, badf("--move %q: want rollout or evict", o.move)
	}
	if o.to == "" {
		return o, badf("--to is required: the new cluster CIDR, e.g. --to 10.200.0.0/16")
	}
	if o.apply && o.dryRun == "" && o.journalDir == "" {
		return o, badf("--journal DIR is required with --apply: it records the finished steps and every node before its delete, so a rerun resumes")
	}
	if o.out != "" && o.manifests == "" {
		return o, badf("--out %s needs --manifests DIR: the manifests to rewrite", o.out)
	}
	if o.manifests != "" {
		if st, err := os.Stat(o.manifests); err != nil || !st.IsDir() {
			return o, badf("--manifests %s: not a directory", o.manifests)
		}
	}
	if o.out != "" {
		a, _ := filepath.Abs(o.out)
		b, _ := filepath.Abs(o.manifests)
		if a == b {
			return o, badf("--out must differ from --manifests: the runbook never rewrites manifests in place")
		}
	}
	if o.nodeMask < 0 || o.nodeMask > 32 {
		return o, badf("--node-mask %d: want 1-32 (IPv4)", o.nodeMask)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll-interval", o.poll}, {"rollout-timeout", o.rolloutTimeout}, {"drain-timeout", o.drainTimeout}, {"probe-timeout", o.probeTimeout}} {
		if err := cli.NonNegative(d.name, d.v); err != nil {
			return o, err
		}
		if d.v == 0 {
			return o, badf("--%s %s: must be positive, e.g. 2s", d.name, d.v)
		}
	}
	if o.apply && o.dryRun != "" {
		return o, badf("--apply and --dry-run=%s exclude each other: give one of them", o.dryRun)
	}
	if o.newPool != "" && o.newPool == o.oldPool {
		return o, badf("--new-pool %q is the --old-pool: the new pool needs another name", o.newPool)
	}
	return o, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// badInput are the sentinels that mean bad input (exit 2).
var badInput = []error{calico.ErrInvalidPool, calico.ErrInvalidPlan, calico.ErrPoolNotFound, nodecidr.ErrInvalidOptions}

func isBadInput(err error) bool {
	var ue usageError
	return errors.As(err, &ue) || cli.ExitCode(err, badInput...) == cli.ExitBadInput
}

// parseStrict parses a CIDR a person typed.
func parseStrict(flagName, v string) (netip.Prefix, error) {
	p, err := cidr.Parse(v)
	if err != nil {
		return netip.Prefix{}, badf("%s %s: %v", flagName, v, err)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, badf("%s %s: only IPv4 single-stack clusters are supported by this runbook", flagName, v)
	}
	return p, nil
}

// run executes or plans the runbook and prints the report.
func (r *runbook) run(connect connector) int {
	switch {
	case r.o.dryRun == "server":
		r.mode = "server-dry-run"
	case r.o.apply && r.o.dryRun == "":
		r.mode = "apply"
	default:
		r.mode = "plan"
	}
	r.rep.Mode = r.mode
	err := r.execute(connect)
	code := exitOK
	switch {
	case err == nil:
	case errors.Is(err, errWaiting):
		code = exitWaiting
	case isBadInput(err):
		code = exitBad
	default:
		// 4 unreachable or forbidden, 130 interrupted, else 1.
		code = cli.ExitCode(err, badInput...)
	}
	if r.j != nil {
		_ = r.j.Close()
	}
	if code == exitBad || (code != exitFailed && code != exitWaiting && len(r.rep.Steps) == 0) {
		// Refused before any step ran: one line, no report, no next step.
		cli.Fail(r.stderr, "migrate-calico-podcidr", err, badInput...)
		return code
	}
	if err != nil && !errors.Is(err, errWaiting) {
		r.rep.Error = oneLine(err.Error())
	}
	if r.o.output != "" {
		if werr := cli.Write(r.stdout, r.o.output, r.rep); werr != nil && code == exitOK {
			code = exitFailed
		}
	} else {
		r.printText()
	}
	if err != nil && !errors.Is(err, errWaiting) {
		cli.Fail(r.stderr, "migrate-calico-podcidr", err, badInput...)
	}
	return code
}

func (r *runbook) execute(connect connector) error {
	var err error
	if r.to, err = parseStrict("--to", r.o.to); err != nil {
		return err
	}
	if r.o.from != "" {
		if r.from, err = parseStrict("--from", r.o.from); err != nil {
			return err
		}
	}
	if r.o.serviceCIDR != "" {
		if r.svc, err = parseStrict("--service-cidr", r.o.serviceCIDR); err != nil {
			return err
		}
	}
	r.poolCIDR = r.to
	if r.o.newPoolCIDR != "" {
		if r.poolCIDR, err = parseStrict("--new-pool-cidr", r.o.newPoolCIDR); err != nil {
			return err
		}
		if !cidr.ContainsPrefix(r.to, r.poolCIDR) {
			return badf("--new-pool-cidr %s lies outside --to %s: Calico pools must stay inside the cluster CIDR", r.poolCIDR, r.to)
		}
	}
	newPool := r.o.newPool
	if newPool == "" {
		newPool = "ippool-" + strings.NewReplacer(".", "-", "/", "-").Replace(r.poolCIDR.String())
	}
	r.rep.OldPool, r.rep.NewPool = r.o.oldPool, newPool

	if r.mode == "apply" {
		if r.j, err = journal.Open(r.o.journalDir); err != nil {
			return fmt.Errorf("--journal %s: %w", r.o.journalDir, err)
		}
		r.rep.Journal = r.o.journalDir
	} else if r.o.journalDir != "" {
		if _, serr := os.Stat(r.o.journalDir); serr == nil {
			if r.j, err = journal.Open(r.o.journalDir); err != nil {
				return fmt.Errorf("--journal %s: %w", r.o.journalDir, err)
			}
			r.rep.Journal = r.o.journalDir
		}
	}
	var st state
	found := false
	if r.j != nil {
		if found, err = r.j.Get(keyRunbook, &st); err != nil {
			return err
		}
		if found {
			if st.To != r.to || st.OldPool != r.o.oldPool || st.NewPool != newPool || st.NewPoolCIDR != r.poolCIDR ||
				(r.from.IsValid() && st.From != r.from) || (r.svc.IsValid() && st.ServiceCIDR != r.svc) {
				return badf("--journal %s records a move of pool %s (%s) to %s (pool %s %s, Service CIDR %s); rerun with those values or use another journal",
					r.o.journalDir, st.OldPool, st.From, st.To, st.NewPool, st.NewPoolCIDR, st.ServiceCIDR)
			}
			r.from, r.svc = st.From, st.ServiceCIDR
		}
		r.cplan = &calico.SwapPlan{}
		if ok, err := r.j.Get(keyCalicoPlan, r.cplan); err != nil {
			return err
		} else if !ok {
			r.cplan = nil
		}
		r.cplanSaved = r.cplan != nil
		r.nplan = &nodecidr.Plan{}
		if ok, err := r.j.Get(keyNodePlan, r.nplan); err != nil {
			return err
		} else if !ok {
			r.nplan = nil
		}
		r.nplanSaved = r.nplan != nil
	}
	r.cl, err = connect(r.ctx, r.o.kubeconfig, r.o.kubeContext)
	if err != nil {
		return err
	}
	r.kube = r.cl.Kube
	if err := r.discover(); err != nil {
		return err
	}
	r.rep.From, r.rep.To, r.rep.ServiceCIDR = r.from, r.to, r.svc
	// Every input is checked against the cluster, and the plans are made,
	// before the first write (and before the first progress line).
	pre, err := r.validate(found)
	if err != nil {
		return err
	}
	if r.mode == "apply" && !found {
		if err := r.j.Put(keyRunbook, state{From: r.from, To: r.to, ServiceCIDR: r.svc, OldPool: r.o.oldPool, NewPool: newPool,
			NewPoolCIDR: r.poolCIDR, Started: time.Now().UTC()}); err != nil {
			return err
		}
	}
	if r.mode == "apply" && r.o.probeNode {
		// A probe left by a killed run would crash a kube-controller-manager
		// restarted with the new flag if it holds an old podCIDR.
		if err := r.deleteProbe(); err != nil {
			return err
		}
	}

	r.validated = true
	if r.mode == "apply" {
		if err := r.savePlans(); err != nil {
			return err
		}
	}

	steps := map[string]func(*StepReport) error{
		stepPreflight: func(sr *StepReport) error { sr.Details = append(sr.Details, pre.Details...); return nil },
		stepAddPool:   r.addPool,
		stepDisable:   r.disablePool,
		stepNodes:     r.moveNodes,
		stepKubeadm:   r.kubeadmConfig,
		stepFlags:     r.controllerManagerFlags,
		stepMove:      r.moveWorkloads,
		stepVerify:    r.verify,
		stepDelete:    r.deletePool,
	}
	var failed error
	for i, name := range stepNames {
		sr := StepReport{Number: i + 1, Name: name, Title: stepTitles[name]}
		if failed != nil {
			sr.Status = "not-reached"
			r.rep.Steps = append(r.rep.Steps, sr)
			continue
		}
		if r.j != nil {
			var rec stepRecord
			ok, err := r.j.Get("step/"+name, &rec)
			if err != nil {
				return err
			}
			if ok {
				sr.Status = "done"
				sr.Details = append(sr.Details, "done "+rec.Done.Format(time.RFC3339)+noteSuffix(rec.Note))
				r.rep.Steps = append(r.rep.Steps, sr)
				continue
			}
		}
		if r.mode == "apply" {
			r.progress("step %d/%d %s: %s", i+1, len(stepNames), name, stepTitles[name])
		}
		err := steps[name](&sr)
		switch {
		case err == nil:
			if sr.Status == "" {
				sr.Status = map[string]string{"apply": "completed", "plan": "planned", "server-dry-run": "dry-run"}[r.mode]
			}
			if r.mode == "apply" && sr.Status == "completed" {
				note := ""
				if name == stepFlags && len(sr.Details) > 0 {
					note = sr.Details[len(sr.Details)-1]
				}
				if err := r.j.Put("step/"+name, stepRecord{Done: time.Now().UTC(), Note: note}); err != nil {
					return err
				}
			}
		case errors.Is(err, errWaiting):
			sr.Status = "waiting"
			failed = err
		default:
			sr.Status = "failed"
			sr.Details = append(sr.Details, oneLine(err.Error()))
			failed = err
		}
		r.rep.Steps = append(r.rep.Steps, sr)
	}
	return failed
}

// discover fills --from (the old pool's CIDR), the Service CIDR and the node
// mask from the cluster when they were not given.
// validate checks the inputs against the cluster, read-only: the old pool
// exists (unless this journal's run retired it already) and holds --from;
// --to is a move; the preflight holds (capacity, conflicts, kube-controller-
// manager's start-up, permissions); the Calico pool swap and the node moves
// can be planned (a plan kept in the journal is checked as untrusted input).
// It returns the preflight step's report.
func (r *runbook) validate(found bool) (StepReport, error) {
	sr := StepReport{Number: 1, Name: stepPreflight, Title: stepTitles[stepPreflight]}
	old, err := r.cl.Pools.Get(r.ctx, r.o.oldPool)
	oldExists := err == nil
	switch {
	case errors.Is(err, calico.ErrPoolNotFound):
		if !found {
			return sr, badf("--old-pool %q: no such IPPool in the cluster", r.o.oldPool)
		}
	case err != nil:
		return sr, err
	default:
		pfx, err := old.Prefix()
		if err != nil {
			return sr, fmt.Errorf("IPPool %q: %w", r.o.oldPool, err)
		}
		if pfx != r.from {
			return sr, badf("--from %s is not the range of IPPool %q (%s): --from must be the pod range in use", r.from, r.o.oldPool, pfx)
		}
	}
	if r.to == r.from {
		return sr, badf("--to %s is the range in use already (IPPool %q): nothing to move", r.to, r.o.oldPool)
	}
	if r.cplan != nil {
		if err := calico.CheckPlan(r.cplan); err != nil {
			return sr, fmt.Errorf("--journal %s: the recorded Calico plan: %w", r.o.journalDir, err)
		}
	}
	if err := r.preflight(&sr); err != nil {
		return sr, err
	}
	if oldExists || r.cplan != nil {
		if _, err := r.calicoPlan(); err != nil {
			return sr, err
		}
	}
	if _, err := r.nodePlan(); err != nil {
		return sr, err
	}
	return sr, nil
}

// savePlansIfApplying saves the plans once validation has passed (the steps
// run): a refused run leaves no plan behind in the journal.
func (r *runbook) savePlansIfApplying() error {
	if r.mode != "apply" || !r.validated {
		return nil
	}
	return r.savePlans()
}

// savePlans records the plans made by validate in the journal, so a rerun
// carries out the same plans.
func (r *runbook) savePlans() error {
	if r.cplan != nil && !r.cplanSaved {
		if err := r.j.Put(keyCalicoPlan, r.cplan); err != nil {
			return err
		}
		r.cplanSaved = true
	}
	if r.nplan != nil && !r.nplanSaved {
		if err := r.j.Put(keyNodePlan, r.nplan); err != nil {
			return err
		}
		r.nplanSaved = true
	}
	return nil
}

func (r *runbook) discover() error {
	if !r.from.IsValid() {
		p, err := r.cl.Pools.Get(r.ctx, r.o.oldPool)
		if err != nil {
			return fmt.Errorf("--from not given and IPPool %q cannot be read (%w); give --from and --old-pool", r.o.oldPool, err)
		}
		pfx, err := p.Prefix()
		if err != nil {
			return fmt.Errorf("IPPool %q: %w", r.o.oldPool, err)
		}
		r.from = pfx
	}
	r.nodeMask = r.o.nodeMask
	if !r.svc.IsValid() || r.nodeMask == 0 {
		d, err := nodecidr.DiscoverControllerManagerFlags(r.ctx, r.kube)
		if err != nil && !errors.Is(err, nodecidr.ErrNotDiscovered) {
			return err
		}
		if d != nil {
			if !r.svc.IsValid() && d.Flags.ServiceClusterIPRange != "" {
				if ps, _, perr := cidr.ParseListLenient(d.Flags.ServiceClusterIPRange); perr == nil && len(ps) > 0 {
					r.svc = ps[0]
				}
			}
			if r.nodeMask == 0 {
				r.nodeMask = max(d.Flags.NodeCIDRMaskSizeIPv4, d.Flags.NodeCIDRMaskSize)
			}
		}
		if !r.svc.IsValid() {
			return badf("--service-cidr is required: kube-controller-manager's --service-cluster-ip-range was not found in the cluster")
		}
	}
	if r.nodeMask == 0 {
		r.nodeMask = cidr.DefaultNodeMaskIPv4
	}
	return nil
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

// progress prints a line on stderr in text mode.
func (r *runbook) progress(format string, args ...any) {
	if r.o.output == "" {
		fmt.Fprintf(r.stderr, format+"\n", args...)
	}
}

// newFlags are kube-controller-manager's node IPAM flags at the end.
func (r *runbook) newFlags() cidr.ControllerManagerFlags {
	return cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: r.to.String(), NodeCIDRMaskSize: r.nodeMask, ServiceClusterIPRange: r.svc.String()}
}

func (r *runbook) rebase() nodecidr.PlanOptions {
	return nodecidr.PlanOptions{Mode: nodecidr.ModeRebase, Rebase: []nodecidr.RebasePair{{From: r.from, To: r.to}}}
}

// --- step 1: preflight ---

func (r *runbook) preflight(sr *StepReport) error {
	nodes, err := nodecidr.ListNodes(r.ctx, r.kube, nodecidr.ListOptions{})
	if err != nil {
		return err
	}
	newCap, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: r.to, NodeMask: r.nodeMask})
	if err != nil {
		return badf("--to %s with node mask /%d: %v", r.to, r.nodeMask, err)
	}
	oldCap, err := cidr.ComputePodCapacity(cidr.NodeIPAM{ClusterCIDR: r.from, NodeMask: r.nodeMask})
	if err != nil {
		return badf("--from %s with node mask /%d: %v", r.from, r.nodeMask, err)
	}
	sr.Details = append(sr.Details, fmt.Sprintf("capacity: %s with /%d node subnets holds %s nodes (was %s in %s); %d node(s) now",
		r.to, r.nodeMask, newCap.MaxNodes, oldCap.MaxNodes, r.from, len(nodes)))
	if newCap.MaxNodes.IsInt64() && newCap.MaxNodes.Int64() < int64(len(nodes)) {
		return badf("--to %s holds only %s node subnets of /%d, the cluster has %d nodes", r.to, newCap.MaxNodes, r.nodeMask, len(nodes))
	}

	ranges := []cidr.Range{
		{Name: "new cluster CIDR (--to)", Kind: cidr.KindClusterCIDR, Prefix: r.to},
		{Name: "Service CIDR", Kind: cidr.KindServiceCIDR, Prefix: r.svc},
	}
	if r.poolCIDR != r.to {
		ranges = append(ranges, cidr.Range{Name: "new IPPool " + r.rep.NewPool, Kind: cidr.KindCalicoPool, Prefix: r.poolCIDR})
	}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				ranges = append(ranges, cidr.Range{Name: "node " + n.Name + " address", Kind: cidr.KindNodeNetwork, Prefix: netip.PrefixFrom(ip, 32)})
			}
		}
	}
	var conflicts []string
	for _, o := range cidr.Analyze(ranges, cidr.AnalyzeOptions{}) {
		if o.Severity == cidr.SeverityError {
			conflicts = append(conflicts, o.Message())
		} else if o.Severity == cidr.SeverityWarning {
			sr.Details = append(sr.Details, "warning: "+o.Message())
		}
	}
	if len(conflicts) > 0 {
		return badf("--to %s conflicts: %s", r.to, strings.Join(conflicts, "; "))
	}
	sr.Details = append(sr.Details, fmt.Sprintf("conflicts: none between %s, the Service CIDR %s and %d node address(es)", r.to, r.svc, len(ranges)-2))

	plan, err := nodecidr.PlanNodes(nodes, r.rebase())
	if err != nil {
		return err
	}
	pf := nodecidr.PreflightAfter(r.newFlags(), nodes, plan)
	if !pf.WouldStart {
		return fmt.Errorf("kube-controller-manager would not start with %s once the nodes are moved: %s", strings.Join(r.newFlags().Args(), " "), preflightProblems(pf))
	}
	sr.Details = append(sr.Details, fmt.Sprintf("kube-controller-manager would start with %s once the %d node(s) are moved (control plane included)",
		strings.Join(r.newFlags().Args(), " "), len(plan.Steps)))

	checks := r.accessChecks()
	if err := access.Preflight(r.ctx, r.kube, checks); err != nil {
		if r.mode == "plan" {
			sr.Details = append(sr.Details, "warning: "+oneLine(err.Error()))
			return nil
		}
		return err
	}
	sr.Details = append(sr.Details, fmt.Sprintf("permissions: all %d checks allowed", len(checks)))
	return nil
}

func preflightProblems(pf cidr.PreflightResult) string {
	var out []string
	out = append(out, pf.FlagErrors...)
	for _, c := range pf.Crashes {
		out = append(out, c.Message)
	}
	return strings.Join(out, "; ")
}

func (r *runbook) accessChecks() []access.Check {
	group := calico.CRDGroup
	if r.cl.Pools != nil && r.cl.Pools.API() == calico.APIProjectCalicoV3 {
		group = calico.IPPoolsV3.Group
	}
	var out []access.Check
	for _, v := range []string{"get", "list", "create", "update", "delete"} {
		out = append(out, access.Check{Verb: v, Group: group, Resource: "ippools"})
	}
	for _, v := range []string{"get", "list", "create", "delete", "patch"} {
		out = append(out, access.Check{Verb: v, Resource: "nodes"})
	}
	out = append(out,
		access.Check{Verb: "list", Group: calico.CRDGroup, Resource: "ipamblocks"},
		access.Check{Verb: "list", Group: calico.CRDGroup, Resource: "blockaffinities"},
		access.Check{Verb: "list", Resource: "pods"},
		access.Check{Verb: "create", Resource: "pods", Subresource: "eviction"},
		access.Check{Verb: "patch", Group: "apps", Resource: "deployments"},
		access.Check{Verb: "patch", Group: "apps", Resource: "statefulsets"},
		access.Check{Verb: "patch", Group: "apps", Resource: "daemonsets"},
		access.Check{Verb: "get", Resource: "configmaps", Namespace: kubeadmcfg.Namespace},
		access.Check{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeadmConfigMap},
		access.Check{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeProxyConfigMap},
	)
	return out
}

// --- steps 2, 3, 7, 9: the Calico pool swap ---

// calicoPlan returns the journaled swap plan, or makes (and in apply mode
// journals) one.
func (r *runbook) calicoPlan() (*calico.SwapPlan, error) {
	if r.cplan != nil {
		return r.cplan, nil
	}
	p, err := calico.Plan(r.ctx, r.cl, calico.SwapRequest{
		OldPool: r.o.oldPool, NewName: r.rep.NewPool, NewCIDR: r.poolCIDR.String(),
		ClusterCIDR: r.to.String(), ServiceCIDR: r.svc.String(), Move: calico.MoveMethod(r.o.move),
	})
	if err != nil {
		return nil, err
	}
	r.cplan = p
	return p, r.savePlansIfApplying()
}

func (r *runbook) calicoApply(sr *StepReport, stopAfter calico.Phase) (*calico.ApplyResult, error) {
	p, err := r.calicoPlan()
	if err != nil {
		return nil, err
	}
	opts := calico.ApplyOptions{
		JournalDir: filepath.Join(r.o.journalDir, "calico"), StopAfter: stopAfter,
		PollInterval: r.o.poll, RolloutTimeout: r.o.rolloutTimeout, DrainTimeout: r.o.drainTimeout,
		OnEvent: func(e calico.Event) {
			if e.Type == calico.EventPhase {
				return
			}
			line := string(e.Type)
			if e.Object != "" {
				line += " " + e.Object
			}
			line += ": " + e.Message
			r.progress("  calico %s", line)
			if e.Type != calico.EventRolloutWait && e.Type != calico.EventLeftoversWait {
				sr.Details = append(sr.Details, line)
			}
		},
	}
	if r.mode == "server-dry-run" {
		opts.DryRun, opts.JournalDir = calico.DryRunServer, ""
	}
	res, err := calico.Apply(r.ctx, r.cl, p, opts)
	var oc *calico.OperatorChangeError
	if errors.As(err, &oc) {
		r.rep.Waiting = &Waiting{Step: sr.Name, Instructions: []string{oc.Change.String(), oc.Change.Command},
			Observed: "the Tigera operator manages IPPool " + p.OldPool.Name, Resume: "rerun the same command once the Installation is changed"}
		return res, errWaiting
	}
	return res, err
}

func (r *runbook) addPool(sr *StepReport) error {
	p, err := r.calicoPlan()
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, fmt.Sprintf("new IPPool %s %s (blockSize %d, %s blocks), copying encapsulation and NAT of %s %s",
		p.NewPool.Name, p.NewCIDR, p.NewPool.EffectiveBlockSize(), p.Capacity.Blocks, p.OldPool.Name, p.OldCIDR))
	for _, w := range p.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	if r.mode == "plan" {
		return nil
	}
	if r.mode == "server-dry-run" {
		_, err := r.calicoApply(sr, calico.PhaseDisableOldPool)
		return err
	}
	_, err = r.calicoApply(sr, calico.PhaseCreatePool)
	return err
}

func (r *runbook) disablePool(sr *StepReport) error {
	if r.mode != "apply" {
		sr.Details = append(sr.Details, fmt.Sprintf("set IPPool %s disabled: new pods get addresses from the new pool only; running pods keep theirs", r.o.oldPool))
		if r.mode == "server-dry-run" {
			sr.Details = append(sr.Details, "dry-run together with step 2")
		}
		return nil
	}
	_, err := r.calicoApply(sr, calico.PhaseDisableOldPool)
	return err
}

func (r *runbook) moveWorkloads(sr *StepReport) error {
	if r.mode != "apply" {
		p, err := r.calicoPlan()
		if err != nil {
			return err
		}
		for _, w := range p.Workloads {
			sr.Details = append(sr.Details, fmt.Sprintf("%s %s (%d pod(s) in %s)%s", w.Method, w.Workload, len(w.Pods), p.OldCIDR, map[bool]string{true: " (cluster DNS)"}[w.DNS]))
		}
		for _, b := range p.Blocked {
			sr.Details = append(sr.Details, fmt.Sprintf("blocked: %s: %s", b.Pod, b.Reason))
		}
		if r.mode == "server-dry-run" {
			sr.Status = "not-run"
		}
		return nil
	}
	res, err := r.calicoApply(sr, calico.PhaseVerify)
	if err != nil {
		return err
	}
	if res.Verify != nil && !res.Verify.Clear() {
		return fmt.Errorf("the old pool is not clear yet: %s; rerun to move again", res.Verify.Summary())
	}
	return nil
}

func (r *runbook) deletePool(sr *StepReport) error {
	if r.mode != "apply" {
		sr.Details = append(sr.Details, fmt.Sprintf("delete IPPool %s once nothing is left on it", r.o.oldPool))
		if r.mode == "server-dry-run" {
			sr.Status = "not-run"
		}
		return nil
	}
	res, err := r.calicoApply(sr, "")
	if err != nil {
		return err
	}
	if !res.Done {
		return fmt.Errorf("the pool swap did not finish (phase %s); rerun", res.Phase)
	}
	return nil
}

// --- step 4: move the nodes ---

func (r *runbook) nodePlan() (*nodecidr.Plan, error) {
	if r.nplan != nil {
		return r.nplan, nil
	}
	p, err := nodecidr.MakePlan(r.ctx, r.kube, r.rebase())
	if err != nil {
		return nil, err
	}
	r.nplan = p
	return p, r.savePlansIfApplying()
}

func (r *runbook) moveNodes(sr *StepReport) error {
	p, err := r.nodePlan()
	if err != nil {
		return err
	}
	for _, s := range p.Steps {
		role := ""
		if s.ControlPlane {
			role = " (control plane)"
		}
		sr.Details = append(sr.Details, fmt.Sprintf("%s %s%s: %s -> %s", s.Action, s.Node, role, strings.Join(s.OldPodCIDRs, ","), strings.Join(s.NewPodCIDRs, ",")))
	}
	if p.Unchanged > 0 {
		sr.Details = append(sr.Details, fmt.Sprintf("%d node(s) already in %s", p.Unchanged, r.to))
	}
	for _, w := range p.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	if cm := p.ControllerManager; cm != nil && !cm.WouldStart {
		return fmt.Errorf("kube-controller-manager would not start with --cluster-cidr=%s after this plan: %s", r.to, preflightProblems(*cm))
	}
	if r.mode == "plan" || len(p.Steps) == 0 {
		return nil
	}
	opts := nodecidr.ApplyOptions{
		JournalDir: filepath.Join(r.o.journalDir, "nodecidr"),
		Note:       "migrate-calico-podcidr " + r.from.String() + " -> " + r.to.String(),
		OnEvent: func(e nodecidr.Event) {
			r.progress("  node %s", e.String())
		},
	}
	if r.mode == "server-dry-run" {
		opts.DryRun, opts.JournalDir = nodecidr.DryRunServer, ""
	}
	res, err := nodecidr.Apply(r.ctx, r.kube, p, opts)
	if res != nil {
		if len(res.Changed) > 0 {
			sr.Details = append(sr.Details, fmt.Sprintf("moved %d node(s); absent for p50 %s, max %s", len(res.Changed), res.Gaps.P50, res.Gaps.Max))
		}
		if len(res.AlreadyDone) > 0 {
			sr.Details = append(sr.Details, fmt.Sprintf("%d node(s) moved by an earlier run", len(res.AlreadyDone)))
		}
	}
	return err
}

// --- step 5: kubeadm ConfigMaps ---

func (r *runbook) kubeadmConfig(sr *StepReport) error {
	snap, err := kubeadmcfg.Read(r.ctx, r.kube, kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	if snap.Kubeadm == nil && snap.KubeProxy == nil {
		sr.Details = append(sr.Details, "no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API")
		return nil
	}
	// A run killed between the two ConfigMap updates would plan nothing for
	// the first one: the plan is journaled before Apply and reused.
	kp := &kubeadmcfg.Plan{}
	found := false
	if r.j != nil && r.mode == "apply" {
		if found, err = r.j.Get(keyKubeadmPlan, kp); err != nil {
			return err
		}
	}
	if !found {
		kp, err = kubeadmcfg.NewPlan(snap, kubeadmcfg.Intent{PodSubnet: r.to.String()}, kubeadmcfg.PlanOptions{KeepNodeIPAM: true})
		if errors.Is(err, kubeadmcfg.ErrNothingToDo) {
			sr.Details = append(sr.Details, "kubeadm ConfigMaps already hold "+r.to.String())
			return nil
		}
		if err != nil {
			return err
		}
		if r.mode == "apply" {
			if err := r.j.Put(keyKubeadmPlan, kp); err != nil {
				return err
			}
		}
	}
	var edits []string
	for _, e := range kp.ConfigMapEdits {
		if e.ID != kubeadmcfg.EditKubeadmConfig && e.ID != kubeadmcfg.EditKubeProxy {
			continue
		}
		edits = append(edits, e.ID)
		sr.Details = append(sr.Details, fmt.Sprintf("%s: %s", e.Ref, strings.Join(e.Changes, "; ")))
	}
	if len(edits) == 0 {
		sr.Details = append(sr.Details, "kubeadm ConfigMaps: nothing to change")
		return nil
	}
	dry := map[string]kubeadmcfg.DryRun{"plan": kubeadmcfg.DryRunClient, "server-dry-run": kubeadmcfg.DryRunServer}[r.mode]
	res, err := kubeadmcfg.Apply(r.ctx, r.kube, kp, kubeadmcfg.ApplyOptions{DryRun: dry, Edits: edits})
	for _, e := range res.Events {
		sr.Details = append(sr.Details, fmt.Sprintf("%s %s: %s", e.Edit, e.ConfigMap, e.Outcome))
	}
	return err
}

// --- step 6: kube-controller-manager --cluster-cidr (operator) ---

func (r *runbook) controllerManagerFlags(sr *StepReport) error {
	flagValue := r.to.String()
	var instr []string
	if r.o.manifests != "" {
		path := filepath.Join(r.o.manifests, kubeadmcfg.ControllerManagerManifest)
		m, err := kubeadmcfg.ReadManifestFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			sr.Details = append(sr.Details, path+": not found, skipped")
		case err != nil:
			return err
		default:
			before := slices.Clone(m.Bytes())
			if err := m.Apply([]kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagClusterCIDR, Value: flagValue}}); err != nil {
				return err
			}
			target := filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.ControllerManagerManifest)
			if diff := kubeadmcfg.UnifiedDiff(target, target, before, m.Bytes()); diff != "" {
				sr.Details = append(sr.Details, "diff for "+target+":\n"+diff)
			} else {
				sr.Details = append(sr.Details, path+" already has --cluster-cidr="+flagValue)
			}
			if r.o.out != "" {
				if err := os.MkdirAll(r.o.out, 0o755); err != nil {
					return err
				}
				outPath := filepath.Join(r.o.out, kubeadmcfg.ControllerManagerManifest)
				if err := kubeadmcfg.WriteFileAtomic(outPath, m.Bytes()); err != nil {
					return err
				}
				sr.Details = append(sr.Details, "wrote "+outPath)
				instr = append(instr, fmt.Sprintf("copy %s to %s on every control-plane node (the kubelet restarts kube-controller-manager)", outPath, target))
			}
		}
	}
	if len(instr) == 0 {
		instr = append(instr, fmt.Sprintf("on every control-plane node, set --cluster-cidr=%s in %s (the kubelet restarts kube-controller-manager)",
			flagValue, filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.ControllerManagerManifest)))
	}
	if r.mode != "apply" {
		sr.Details = append(sr.Details, instr...)
		sr.Details = append(sr.Details, "the runbook stops here (exit 3) until it observes the new flag, or is rerun with --continue")
		sr.Status = "operator"
		return nil
	}
	// The last word before the restart: every live node lies in the new
	// range, so kube-controller-manager starts with the new flag.
	pf, err := nodecidr.PreflightCluster(r.ctx, r.kube, r.newFlags(), nodecidr.ListOptions{})
	if err != nil {
		return err
	}
	if !pf.WouldStart {
		return fmt.Errorf("do not restart kube-controller-manager yet: with --cluster-cidr=%s it would exit: %s", flagValue, preflightProblems(pf))
	}
	sr.Details = append(sr.Details, "every node lies in "+flagValue+": kube-controller-manager will start with the new flag")
	observed, why, err := r.observeFlags()
	if err != nil {
		return err
	}
	if observed {
		sr.Details = append(sr.Details, "observed: "+why)
		return nil
	}
	if r.o.cont {
		sr.Details = append(sr.Details, "not observed ("+why+"); --continue given: the operator confirmed the restart")
		return nil
	}
	sr.Details = append(sr.Details, "not observed yet: "+why)
	resume := "rerun the same command: it goes on once it sees the new flag on the kube-controller-manager mirror pods"
	if r.o.probeNode {
		resume += " or on the podCIDR of a probe Node"
	}
	r.rep.Waiting = &Waiting{Step: stepFlags, Instructions: instr, Observed: why, Resume: resume + "; add --continue if it cannot see it"}
	return errWaiting
}

// observeFlags decides from the API whether kube-controller-manager runs with
// the new --cluster-cidr: its kubeadm mirror pods all carry the flag, or (with
// --probe-node) a Node created without podCIDR gets one inside the new range.
func (r *runbook) observeFlags() (bool, string, error) {
	want := r.to.String()
	pods, err := r.kube.CoreV1().Pods(metav1.NamespaceSystem).List(r.ctx, metav1.ListOptions{LabelSelector: "component=" + cidr.KubeControllerManager})
	if err != nil {
		return false, "", fmt.Errorf("listing %s pods: %w", cidr.KubeControllerManager, err)
	}
	var names, stale []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
		if v, ok := podFlag(&p, cidr.KubeControllerManager, "--cluster-cidr"); !ok || v != want {
			stale = append(stale, fmt.Sprintf("%s has --cluster-cidr=%s", p.Name, v))
		}
	}
	if len(names) > 0 && len(stale) == 0 {
		return true, fmt.Sprintf("every kube-controller-manager pod (%s) runs with --cluster-cidr=%s", strings.Join(names, ", "), want), nil
	}
	why := strings.Join(stale, "; ")
	if len(names) == 0 {
		why = "no kube-controller-manager mirror pod in kube-system"
	}
	if !r.o.probeNode {
		return false, why, nil
	}
	got, err := r.probe()
	if err != nil {
		return false, "", err
	}
	if got.IsValid() && cidr.ContainsPrefix(r.to, got) {
		return true, fmt.Sprintf("probe Node %s got podCIDR %s inside %s", ProbeNodeName, got, want), nil
	}
	if got.IsValid() {
		return false, fmt.Sprintf("%s; probe Node %s got podCIDR %s, outside %s", why, ProbeNodeName, got, want), nil
	}
	return false, fmt.Sprintf("%s; probe Node %s got no podCIDR within %s", why, ProbeNodeName, r.o.probeTimeout), nil
}

// probe creates the probe Node without podCIDR, waits for the podCIDR
// kube-controller-manager gives it, and deletes it whatever happens.
func (r *runbook) probe() (netip.Prefix, error) {
	if err := r.deleteProbe(); err != nil {
		return netip.Prefix{}, err
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: ProbeNodeName, Labels: map[string]string{probeLabel: "true"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: probeLabel, Effect: corev1.TaintEffectNoSchedule}, {Key: probeLabel, Effect: corev1.TaintEffectNoExecute}}},
	}
	if _, err := r.kube.CoreV1().Nodes().Create(r.ctx, n, metav1.CreateOptions{}); err != nil {
		return netip.Prefix{}, fmt.Errorf("creating probe Node %s: %w", ProbeNodeName, err)
	}
	r.progress("  probe Node %s created", ProbeNodeName)
	defer func() {
		if err := r.deleteProbe(); err != nil {
			r.progress("  warning: probe Node %s not deleted: %v; delete it before restarting kube-controller-manager", ProbeNodeName, err)
		}
	}()
	deadline := time.Now().Add(r.o.probeTimeout)
	for {
		got, err := r.kube.CoreV1().Nodes().Get(r.ctx, ProbeNodeName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return netip.Prefix{}, err
		}
		if err == nil && got.Spec.PodCIDR != "" {
			p, _, perr := cidr.ParseLenient(got.Spec.PodCIDR)
			if perr != nil {
				return netip.Prefix{}, fmt.Errorf("probe Node %s: podCIDR %q: %w", ProbeNodeName, got.Spec.PodCIDR, perr)
			}
			return p, nil
		}
		if time.Now().After(deadline) {
			return netip.Prefix{}, nil
		}
		select {
		case <-r.ctx.Done():
			return netip.Prefix{}, r.ctx.Err()
		case <-time.After(min(r.o.poll, 500*time.Millisecond)):
		}
	}
}

// deleteProbe deletes the probe Node if it exists (with a context of its
// own, so it also runs when the run was interrupted).
func (r *runbook) deleteProbe() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 30*time.Second)
	defer cancel()
	n, err := r.kube.CoreV1().Nodes().Get(ctx, ProbeNodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if n.Labels[probeLabel] != "true" {
		return badf("Node %s exists but is not a probe of this runbook (label %s missing); rename it or run without --probe-node", ProbeNodeName, probeLabel)
	}
	err = r.kube.CoreV1().Nodes().Delete(ctx, ProbeNodeName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting probe Node %s: %w", ProbeNodeName, err)
	}
	return nil
}

// podFlag returns the value of a flag on the command line of a pod's container.
func podFlag(p *corev1.Pod, container, flagName string) (string, bool) {
	for _, c := range p.Spec.Containers {
		if c.Name != container && len(p.Spec.Containers) > 1 {
			continue
		}
		val, found := "", false
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, flagName+"="); ok {
				val, found = v, true
			} else if a == flagName && i+1 < len(args) {
				val, found = args[i+1], true
			}
		}
		return val, found
	}
	return "", false
}

// --- step 8: verify ---

func (r *runbook) verify(sr *StepReport) error {
	if r.mode != "apply" {
		sr.Details = append(sr.Details,
			fmt.Sprintf("no live pod and no IPAM allocation left in %s; IPPool %s gives no addresses, %s is enabled", r.from, r.o.oldPool, r.rep.NewPool),
			fmt.Sprintf("every planned node has its new podCIDR in %s and kept its labels, taints and annotations", r.to),
			fmt.Sprintf("kube-controller-manager would start with --cluster-cidr=%s against the live nodes", r.to))
		if r.mode == "server-dry-run" {
			sr.Status = "not-run"
		}
		return nil
	}
	p, err := r.calicoPlan()
	if err != nil {
		return err
	}
	var problems []string
	v, err := calico.Verify(r.ctx, r.cl, p.Target())
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, "calico: "+v.Summary())
	if !v.Clear() {
		problems = append(problems, "calico: "+v.Summary())
	}
	np, err := r.nodePlan()
	if err != nil {
		return err
	}
	nv, err := nodecidr.Verify(r.ctx, r.kube, np, nodecidr.VerifyOptions{JournalDir: filepath.Join(r.o.journalDir, "nodecidr")})
	if err != nil {
		return err
	}
	for _, f := range nv.Findings {
		if f.Severity == cidr.SeverityError {
			problems = append(problems, "nodes: "+f.String())
		} else {
			sr.Details = append(sr.Details, "nodes: "+f.String())
		}
	}
	sr.Details = append(sr.Details, fmt.Sprintf("nodes: %d planned node(s) checked", nv.Checked))
	pf, err := nodecidr.PreflightCluster(r.ctx, r.kube, r.newFlags(), nodecidr.ListOptions{})
	if err != nil {
		return err
	}
	if !pf.WouldStart {
		problems = append(problems, "kube-controller-manager: "+preflightProblems(pf))
	} else {
		sr.Details = append(sr.Details, "kube-controller-manager starts with --cluster-cidr="+r.to.String()+" against every live node")
	}
	if len(problems) > 0 {
		return fmt.Errorf("verification failed: %s", strings.Join(problems, "; "))
	}
	return nil
}

// --- output ---

func (r *runbook) printText() {
	w := r.stdout
	head := fmt.Sprintf("runbook: move the pod range %s -> %s (Calico pool %s -> %s)", r.from, r.to, r.rep.OldPool, r.rep.NewPool)
	switch r.mode {
	case "plan":
		fmt.Fprintln(w, head+" (plan only; run with --journal DIR --apply)")
	case "server-dry-run":
		fmt.Fprintln(w, head+" (server dry run: nothing stored)")
	default:
		fmt.Fprintf(w, "%s (journal %s)\n", head, r.o.journalDir)
	}
	for _, s := range r.rep.Steps {
		fmt.Fprintf(w, "\n%d. %s [%s] %s\n", s.Number, s.Name, s.Status, s.Title)
		for _, d := range s.Details {
			fmt.Fprintln(w, "   "+strings.ReplaceAll(strings.TrimRight(d, "\n"), "\n", "\n   "))
		}
	}
	if wt := r.rep.Waiting; wt != nil {
		fmt.Fprintf(w, "\nWAITING FOR AN OPERATOR (step %s):\n", wt.Step)
		for i, in := range wt.Instructions {
			fmt.Fprintf(w, "  %d) %s\n", i+1, in)
		}
		fmt.Fprintln(w, "then: "+wt.Resume)
	}
}
