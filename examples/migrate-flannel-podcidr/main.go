// Command migrate-flannel-podcidr is a runbook for a flannel cluster in kube
// subnet manager mode (story 2 of FACTS.md): it repairs duplicate and
// missing node podCIDRs, then widens flannel's Network (e.g. 10.244.0.0/16 to
// 10.240.0.0/12) and kube-controller-manager's --cluster-cidr with it,
// composing the nodecidr, flannel and kubeadmcfg packages. It can be stopped
// (even SIGKILLed) and rerun at any point.
//
//	migrate-flannel-podcidr --network 10.240.0.0/12                         # print the runbook as a plan
//	migrate-flannel-podcidr --network 10.240.0.0/12 --journal DIR --apply   # run it; rerun the same command to resume
//
// Steps, each recorded in one journal (--journal DIR) once done:
//
//  1. fix-podcidrs: nodes with a duplicate (every holder but the oldest) or
//     missing podCIDR get a free subnet of the current Network (nodecidr
//     ModeFix plan + Apply, its crash-safe journal in DIR/fix); hooks then
//     restart the node's flannel pod, delete its controller-owned pods so
//     they get addresses from the new subnet, and wait until the node is
//     Ready and its pods run again before the next node.
//  2. set-network: rewrite only the "Network" value of net-conf.json in the
//     kube-flannel-cfg ConfigMap (flannel PlanNetConf / ApplyNetConf). The
//     new Network must contain the old one, so no node is outside it at any
//     time.
//  3. controller-manager: the kubeadm ConfigMaps (when they exist) and the
//     --cluster-cidr edit of kube-controller-manager (rendered from
//     --manifests into --out). An operator restarts kube-controller-manager;
//     the runbook exits 3 until it observes --cluster-cidr=<network> on the
//     kube-system kube-controller-manager mirror pod, or is rerun with
//     --continue.
//  4. rewrite-nodes: optional. The containing Network keeps every podCIDR
//     valid, so nodes need no change; --rewrite-nodes --node-range R renumbers
//     them (nodecidr ModeRebase from the old Network to R, journal
//     DIR/rebase) node by node, with the same hooks and health check.
//  5. host-cleanup: the host commands for every node whose subnet moved
//     (flannel CleanupSteps: cni0, flannel.1, CNI IPAM state), a rolling
//     restart of the flannel DaemonSet so every flanneld reads the new
//     Network, and a final audit.
//
// Before the first write it checks every input and what later steps need:
// the flags (selector, names, CIDRs, durations), --from against the Network
// net-conf.json holds, every node's podCIDR inside that Network, the
// net-conf.json rewrite, the kubeadm ConfigMaps and the --manifests edit.
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
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// Exit codes: the contract of internal/cli.
const (
	exitOK      = cli.ExitOK
	exitFailed  = cli.ExitProblems
	exitBad     = cli.ExitBadInput
	exitWaiting = cli.ExitWaiting
)

// Step names, in order; journal keys are step/<name>.
const (
	stepFix     = "fix-podcidrs"
	stepNetwork = "set-network"
	stepKCM     = "controller-manager"
	stepRewrite = "rewrite-nodes"
	stepCleanup = "host-cleanup"
)

var stepNames = []string{stepFix, stepNetwork, stepKCM, stepRewrite, stepCleanup}

var stepTitles = map[string]string{
	stepFix:     "give nodes with duplicate or missing podCIDRs a free subnet",
	stepNetwork: "widen net-conf.json Network",
	stepKCM:     "kube-controller-manager --cluster-cidr (operator)",
	stepRewrite: "renumber node podCIDRs (optional)",
	stepCleanup: "host clean-up per moved node, restart flanneld, verify",
}

// Journal keys.
const (
	keyRunbook     = "runbook"
	keyFixPlan     = "fix-plan"
	keyRebasePlan  = "rebase-plan"
	keyKubeadmPlan = "kubeadmcfg-plan"
	keyNetConf     = "netconf-before"
)

// restartedAtAnnotation is what `kubectl rollout restart` sets.
const restartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

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

// badf is bad input: exit 2, one line naming the flag and the value.
func badf(format string, args ...any) error { return cli.Usagef(format, args...) }

var (
	errHelp    = errors.New("help")
	errWaiting = errors.New("waiting for an operator step")
)

type options struct {
	kubeconfig, kubeContext, output       string
	network, from, nodeRange              string
	namespace, configMap, flannelSelector string
	journalDir, dryRun, manifests, out    string
	apply, cont, rewrite                  bool
	nodeMask                              int
	healthTimeout, poll                   time.Duration
}

// StepReport is what the runbook says about one step.
type StepReport struct {
	Number int    `json:"number"`
	Name   string `json:"name"`
	Title  string `json:"title"`
	// Status: done (earlier run), completed, skipped, planned, dry-run,
	// operator, waiting, failed, not-reached.
	Status  string   `json:"status"`
	Details []string `json:"details,omitempty"`
}

// Report is the runbook's output.
type Report struct {
	Mode    string       `json:"mode"`
	From    netip.Prefix `json:"from"`
	To      netip.Prefix `json:"to"`
	Journal string       `json:"journal,omitempty"`
	Steps   []StepReport `json:"steps"`
	Waiting *Waiting     `json:"waiting,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// Waiting says what the operator must do before the next run.
type Waiting struct {
	Step         string   `json:"step"`
	Instructions []string `json:"instructions"`
	Observed     string   `json:"observed"`
	Resume       string   `json:"resume"`
}

// state is the runbook's own journal record: the move it carries out.
type state struct {
	From         netip.Prefix `json:"from"`
	To           netip.Prefix `json:"to"`
	RewriteNodes bool         `json:"rewriteNodes"`
	NodeRange    netip.Prefix `json:"nodeRange,omitzero"`
	Started      time.Time    `json:"started"`
}

type stepRecord struct {
	Done time.Time `json:"done"`
	Note string    `json:"note,omitempty"`
}

type runbook struct {
	o         options
	ctx       context.Context
	stdout    io.Writer
	stderr    io.Writer
	kube      kubernetes.Interface
	j         *journal.Journal
	mode      string // plan, apply, server-dry-run
	from, to  netip.Prefix
	nodeRange netip.Prefix
	nc        *flannel.NetConf
	rep       Report

	fixPlan, rebasePlan *nodecidr.Plan

	mu     sync.Mutex
	manual []string // bare pods left for a person
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "migrate-flannel-podcidr: "+oneLine(err.Error()))
		return exitBad
	}
	r := &runbook{o: o, ctx: ctx, stdout: stdout, stderr: stderr}
	return r.run(connect)
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("migrate-flannel-podcidr", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	fs.StringVar(&o.output, "o", "", "output format: json or yaml (default: text)")
	fs.StringVar(&o.network, "network", "", "new flannel Network and --cluster-cidr; must contain the current Network (required)")
	fs.StringVar(&o.from, "from", "", "current Network (default: net-conf.json's; recorded in the journal)")
	fs.StringVar(&o.namespace, "namespace", flannel.DefaultNetConfNamespace, "namespace of flannel's ConfigMap and pods")
	fs.StringVar(&o.configMap, "configmap", flannel.DefaultNetConfName, "name of the ConfigMap holding net-conf.json")
	fs.StringVar(&o.flannelSelector, "flannel-selector", "app=flannel", "label selector of the flannel pods")
	fs.StringVar(&o.journalDir, "journal", "", "journal directory; required with --apply; rerun with the same one to resume")
	fs.BoolVar(&o.apply, "apply", false, "carry out the runbook (otherwise print it as a plan)")
	fs.StringVar(&o.dryRun, "dry-run", "", "client (print the plan) or server (the API server checks every write, stores nothing)")
	fs.StringVar(&o.manifests, "manifests", "", "directory holding kube-controller-manager.yaml to render the --cluster-cidr edit from (read only)")
	fs.StringVar(&o.out, "out", "", "with --manifests: directory to write the rewritten manifest to")
	fs.BoolVar(&o.cont, "continue", false, "the operator step (kube-controller-manager restart) is done: go on without observing it")
	fs.BoolVar(&o.rewrite, "rewrite-nodes", false, "also renumber every node's podCIDR from the old Network into --node-range")
	fs.StringVar(&o.nodeRange, "node-range", "", "with --rewrite-nodes: the range inside --network the old Network's subnets move to (same offsets)")
	fs.IntVar(&o.nodeMask, "node-mask", cidr.DefaultNodeMaskIPv4, "node mask when kube-controller-manager's flags cannot be discovered")
	fs.DurationVar(&o.healthTimeout, "health-timeout", 2*time.Minute, "how long a moved node may take to be Ready with its pods running")
	fs.DurationVar(&o.poll, "poll-interval", time.Second, "poll period of the waits")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: migrate-flannel-podcidr --network CIDR [--journal DIR --apply] [flags]")
			fs.PrintDefaults()
			return o, errHelp
		}
		return o, badf("%s", err)
	}
	if fs.NArg() > 0 {
		return o, badf("unexpected argument %q", fs.Arg(0))
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
	if o.network == "" {
		return o, badf("--network is required: the new flannel Network, which must contain the current one, e.g. --network 10.240.0.0/12")
	}
	if o.apply && o.dryRun == "" && o.journalDir == "" {
		return o, badf("--journal DIR is required with --apply: it records the finished steps and every Node before its delete, so a rerun resumes")
	}
	if o.nodeRange != "" && !o.rewrite {
		return o, badf("--node-range %s needs --rewrite-nodes", o.nodeRange)
	}
	if o.rewrite && o.nodeRange == "" {
		return o, badf("--rewrite-nodes needs --node-range: the range inside --network %s the nodes' subnets move to", o.network)
	}
	if o.out != "" && o.manifests == "" {
		return o, badf("--out %s needs --manifests DIR: the manifests to rewrite", o.out)
	}
	if o.manifests != "" {
		if st, err := os.Stat(o.manifests); err != nil || !st.IsDir() {
			return o, badf("--manifests %s: not a directory", o.manifests)
		}
		if o.out != "" {
			a, _ := filepath.Abs(o.out)
			b, _ := filepath.Abs(o.manifests)
			if a == b {
				return o, badf("--out must differ from --manifests: the runbook never rewrites manifests in place")
			}
		}
	}
	if o.nodeMask < 1 || o.nodeMask > 32 {
		return o, badf("--node-mask %d: want 1..32", o.nodeMask)
	}
	if o.healthTimeout <= 0 {
		return o, badf("--health-timeout %s: must be positive, e.g. 2m", o.healthTimeout)
	}
	if o.poll <= 0 {
		return o, badf("--poll-interval %s: must be positive, e.g. 1s", o.poll)
	}
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return o, badf("--namespace %q is not a namespace name: %s", o.namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(o.configMap); len(errs) > 0 {
		return o, badf("--configmap %q is not a ConfigMap name: %s", o.configMap, strings.Join(errs, "; "))
	}
	// The selector picks the pods the fix and rewrite steps delete on each
	// moved node (host-network ones included): it must parse, and must not
	// select every pod of the namespace.
	sel, err := labels.Parse(o.flannelSelector)
	if err != nil {
		return o, badf("--flannel-selector %q: %v", o.flannelSelector, err)
	}
	if sel.Empty() {
		return o, badf("--flannel-selector %q selects every pod in namespace %s; give flannel's pod labels, e.g. app=flannel", o.flannelSelector, o.namespace)
	}
	if o.out != "" {
		if st, err := os.Stat(o.out); err == nil && !st.IsDir() {
			return o, badf("--out %s: exists and is not a directory", o.out)
		}
	}
	return o, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// badInput are the library sentinels that mean bad input (exit 2): a flag
// the library refused, or a plan read back from the journal that fails its
// invariants.
var badInput = []error{nodecidr.ErrInvalidOptions, nodecidr.ErrInvalidPlan, flannel.ErrInvalidRequest}

// exitCode maps an error to the exit-code contract (internal/cli).
func exitCode(err error) int {
	if errors.Is(err, errWaiting) {
		return exitWaiting
	}
	var pe *cidr.ParseError
	if errors.As(err, &pe) {
		return exitBad
	}
	return cli.ExitCode(err, badInput...)
}

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
	code := exitCode(err)
	if r.j != nil {
		_ = r.j.Close()
	}
	if code == exitBad || (code != exitOK && code != exitWaiting && len(r.rep.Steps) == 0) {
		// Refused before the first step: one line, no report, no next step.
		return cli.Fail(r.stderr, "migrate-flannel-podcidr", err, badInput...)
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
		cli.Fail(r.stderr, "migrate-flannel-podcidr", err, badInput...)
	}
	return code
}

func (r *runbook) execute(connect connector) error {
	var err error
	if r.to, err = cidr.Parse(r.o.network); err != nil {
		return badf("--network: %s", err)
	}
	if cidr.FamilyOf(r.to) != cidr.IPv4 {
		return badf("--network %s: only an IPv4 Network is supported", r.to)
	}
	var from netip.Prefix
	if r.o.from != "" {
		if from, err = cidr.Parse(r.o.from); err != nil {
			return badf("--from: %s", err)
		}
	}
	if r.o.rewrite {
		if r.nodeRange, err = cidr.Parse(r.o.nodeRange); err != nil {
			return badf("--node-range: %s", err)
		}
	}
	if r.mode == "apply" || r.o.journalDir != "" {
		if _, serr := os.Stat(r.o.journalDir); r.mode == "apply" || serr == nil {
			if r.j, err = journal.Open(r.o.journalDir); err != nil {
				return fmt.Errorf("--journal %s: %w", r.o.journalDir, err)
			}
			r.rep.Journal = r.o.journalDir
		}
	}
	var st state
	haveState := false
	if r.j != nil {
		if haveState, err = r.j.Get(keyRunbook, &st); err != nil {
			return err
		}
		if haveState {
			if st.To != r.to || (from.IsValid() && st.From != from) || st.RewriteNodes != r.o.rewrite || st.NodeRange != r.nodeRange {
				return badf("--journal %s records a move %s -> %s (rewrite-nodes %t, node-range %s); rerun with those flags or use another journal",
					r.o.journalDir, st.From, st.To, st.RewriteNodes, prefixOrNone(st.NodeRange))
			}
			from = st.From
		}
	}
	if r.kube, err = connect(r.ctx, r.o.kubeconfig, r.o.kubeContext); err != nil {
		return err
	}
	if r.nc, err = flannel.ReadNetConf(r.ctx, r.kube, r.kubeOptions()); err != nil {
		if errors.Is(err, flannel.ErrNotFound) {
			return badf("--namespace %s --configmap %s: no such ConfigMap; give the namespace and name of flannel's net-conf.json", r.o.namespace, r.o.configMap)
		}
		return fmt.Errorf("reading net-conf.json: %w", err)
	}
	if r.nc.Config == nil {
		return fmt.Errorf("net-conf.json in ConfigMap %s/%s does not parse (%s): fix it first", r.nc.Namespace, r.nc.Name, r.nc.Error)
	}
	if !from.IsValid() {
		from = r.nc.Config.Network
		if from == r.to {
			return badf("--network %s: net-conf.json already holds that Network; nothing to widen (a run that already changed it resumes from its --journal, or with --from OLD)", r.to)
		}
	}
	if !from.IsValid() {
		return badf("net-conf.json has no IPv4 Network; nothing to widen")
	}
	// --from (or the journal's move) must be what the cluster has: the
	// Network net-conf.json holds, or the new one once step 2 has run.
	if cur := r.nc.Config.Network; cur != from && cur != r.to {
		what := "--from " + from.String()
		if haveState {
			what = fmt.Sprintf("--journal %s records a move from %s", r.o.journalDir, from)
		}
		return badf("%s: net-conf.json in ConfigMap %s/%s holds Network %s; --from must be the Network in use (or the new one, after step 2)",
			what, r.nc.Namespace, r.nc.Name, prefixOrNone(cur))
	}
	r.from = from
	r.rep.From, r.rep.To = r.from, r.to
	if r.from == r.to || !cidr.ContainsPrefix(r.to, r.from) {
		return badf("--network %s must strictly contain the current Network %s, so no node's podCIDR is outside it during the move (e.g. %s)",
			r.to, r.from, suggest(r.from))
	}
	if r.o.rewrite {
		if !cidr.ContainsPrefix(r.to, r.nodeRange) {
			return badf("--node-range %s must lie inside --network %s", r.nodeRange, r.to)
		}
		if r.nodeRange.Bits() > r.from.Bits() {
			return badf("--node-range %s is smaller than the old Network %s: every subnet keeps its offset, so it must be at least /%d", r.nodeRange, r.from, r.from.Bits())
		}
		if r.nodeRange.Overlaps(r.from) {
			return badf("--node-range %s overlaps the old Network %s: renumbering needs a disjoint range", r.nodeRange, r.from)
		}
	}
	if err := r.preflight(); err != nil {
		return err
	}
	if r.j != nil && r.mode == "apply" && !haveState {
		if err := r.j.Put(keyRunbook, state{From: r.from, To: r.to, RewriteNodes: r.o.rewrite, NodeRange: r.nodeRange, Started: time.Now().UTC()}); err != nil {
			return err
		}
	}
	if r.j != nil {
		for key, dst := range map[string]**nodecidr.Plan{keyFixPlan: &r.fixPlan, keyRebasePlan: &r.rebasePlan} {
			p := &nodecidr.Plan{}
			if ok, err := r.j.Get(key, p); err != nil {
				return fmt.Errorf("%w: --journal %s %s: %w", nodecidr.ErrInvalidPlan, r.o.journalDir, key, err)
			} else if ok {
				*dst = p
			}
		}
		if err := r.checkJournalPlans(); err != nil {
			return err
		}
	}

	steps := map[string]func(*StepReport) error{
		stepFix:     r.fixPodCIDRs,
		stepNetwork: r.setNetwork,
		stepKCM:     r.controllerManager,
		stepRewrite: r.rewriteNodes,
		stepCleanup: r.hostCleanup,
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
			if r.mode == "apply" && (sr.Status == "completed" || sr.Status == "skipped") {
				note := ""
				if sr.Status == "skipped" || (name == stepKCM && r.o.cont) {
					note = sr.Details[len(sr.Details)-1]
				}
				if err := r.j.Put("step/"+name, stepRecord{Done: time.Now().UTC(), Note: note}); err != nil {
					return err
				}
				r.progress("step %d/%d %s: %s", i+1, len(stepNames), name, sr.Status)
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

// checkJournalPlans checks the node plans read back from the journal, which
// is untrusted input: the fix plan may only give nodes subnets of the old
// Network, the rebase plan only subnets of --node-range, each node once.
func (r *runbook) checkJournalPlans() error {
	for _, c := range []struct {
		key    string
		p      *nodecidr.Plan
		within netip.Prefix
	}{{keyFixPlan, r.fixPlan, r.from}, {keyRebasePlan, r.rebasePlan, r.nodeRange}} {
		if c.p == nil {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: --journal %s %s: %s", nodecidr.ErrInvalidPlan, r.o.journalDir, c.key, fmt.Sprintf(format, args...))
		}
		if !c.within.IsValid() {
			return bad("the journal holds a plan for a step this run does not make")
		}
		seen := map[string]bool{}
		for _, st := range c.p.Steps {
			if seen[st.Node] {
				return bad("node %s appears twice", st.Node)
			}
			seen[st.Node] = true
			for _, s := range st.NewPodCIDRs {
				p, err := cidr.Parse(s)
				if err != nil {
					return bad("node %s: new podCIDR %q: %v", st.Node, s, err)
				}
				if p.Addr().Is4() && !cidr.ContainsPrefix(c.within, p) {
					return bad("node %s: new podCIDR %s lies outside %s", st.Node, p, c.within)
				}
			}
		}
	}
	return nil
}

// stepDone says whether the journal records step name as done.
func (r *runbook) stepDone(name string) (bool, error) {
	if r.j == nil {
		return false, nil
	}
	var rec stepRecord
	return r.j.Get("step/"+name, &rec)
}

// preflight checks, before the first write, everything the later steps would
// otherwise find only after earlier steps changed the cluster: every node's
// podCIDR lies in the Network flanneld uses now, the node mask fits the
// Network, net-conf.json can be rewritten, the kubeadm ConfigMaps can be
// planned and the kube-controller-manager manifest can be edited.
func (r *runbook) preflight() error {
	nodes, err := flannel.ReadNodes(r.ctx, r.kube, r.kubeOptions())
	if err != nil {
		return err
	}
	cur := r.nc.Config.Network
	var outside []string
	for _, n := range nodes {
		for _, p := range n.PodCIDRs {
			if p.Addr().Is4() && !cidr.ContainsPrefix(cur, p) {
				outside = append(outside, fmt.Sprintf("%s (%s)", n.Name, p))
			}
		}
	}
	if len(outside) > 0 {
		return fmt.Errorf("node podCIDR outside the current flannel Network %s: %s; flanneld refuses such a node and kube-controller-manager would not start with --cluster-cidr=%s; move those nodes into %s first (examples/noderecreate)",
			cur, strings.Join(outside, ", "), r.to, cur)
	}
	if r.o.nodeMask < r.from.Bits() {
		return badf("--node-mask %d: a node subnet /%d is larger than the Network %s", r.o.nodeMask, r.o.nodeMask, r.from)
	}
	if done, err := r.stepDone(stepNetwork); err != nil {
		return err
	} else if !done && cur != r.to {
		if _, err := flannel.PlanNetConf(r.nc, flannel.SetNetworkRequest{Network: r.to}, nodes); err != nil {
			return fmt.Errorf("net-conf.json in ConfigMap %s/%s cannot be set to Network %s: %w", r.nc.Namespace, r.nc.Name, r.to, err)
		}
	}
	done, err := r.stepDone(stepKCM)
	if err != nil || done {
		return err
	}
	if r.o.manifests != "" {
		path := filepath.Join(r.o.manifests, kubeadmcfg.ControllerManagerManifest)
		m, err := kubeadmcfg.ReadManifestFile(path)
		if err != nil {
			return badf("--manifests %s: %s: %s", r.o.manifests, kubeadmcfg.ControllerManagerManifest, oneLine(err.Error()))
		}
		if err := m.Apply([]kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagClusterCIDR, Value: r.to.String()}}); err != nil {
			return badf("--manifests %s: %s: cannot set --cluster-cidr=%s: %s", r.o.manifests, kubeadmcfg.ControllerManagerManifest, r.to, oneLine(err.Error()))
		}
	}
	if r.mode == "apply" {
		if ok, err := r.j.Get(keyKubeadmPlan, &kubeadmcfg.Plan{}); err != nil || ok {
			return err
		}
	}
	snap, err := kubeadmcfg.Read(r.ctx, r.kube, kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	if snap.Kubeadm == nil && snap.KubeProxy == nil {
		return nil
	}
	_, err = kubeadmcfg.NewPlan(snap, kubeadmcfg.Intent{PodSubnet: r.to.String()}, kubeadmcfg.PlanOptions{KeepNodeIPAM: true})
	if err != nil && !errors.Is(err, kubeadmcfg.ErrNothingToDo) {
		return fmt.Errorf("the kubeadm ConfigMaps cannot be set to podSubnet %s: %w", r.to, err)
	}
	return nil
}

func (r *runbook) kubeOptions() flannel.KubeOptions {
	return flannel.KubeOptions{Namespace: r.o.namespace, ConfigMap: r.o.configMap}
}

// suggest proposes a Network containing p: four times as large.
func suggest(p netip.Prefix) string {
	if p.Bits() < 2 {
		return "a shorter prefix"
	}
	w, _ := p.Addr().Prefix(p.Bits() - 2)
	return w.String()
}

func prefixOrNone(p netip.Prefix) string {
	if !p.IsValid() {
		return "none"
	}
	return p.String()
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

func (r *runbook) progress(format string, args ...any) {
	if r.o.output == "" {
		fmt.Fprintf(r.stderr, format+"\n", args...)
	}
}

// --- steps 1 and 4: node moves ---

// fixLayout is the layout the fix step allocates from: the current flannel
// Network (a subnet outside it would stop the node's flanneld), with the node
// mask and Service CIDR of the running kube-controller-manager when found.
func (r *runbook) fixLayout(sr *StepReport) cidr.NodeIPAMLayout {
	layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{r.from}, NodeMasks: []int{r.o.nodeMask}}
	d, err := nodecidr.DiscoverControllerManagerFlags(r.ctx, r.kube)
	if err != nil {
		sr.Details = append(sr.Details, fmt.Sprintf("kube-controller-manager flags not found (%s): node mask /%d (--node-mask)", oneLine(err.Error()), r.o.nodeMask))
		return layout
	}
	l, _, err := cidr.ParseControllerManagerFlags(d.Flags)
	if err != nil || len(l.NodeMasks) == 0 {
		return layout
	}
	layout.NodeMasks = l.NodeMasks[:1]
	layout.ServiceCIDRs = l.ServiceCIDRs
	sr.Details = append(sr.Details, fmt.Sprintf("node mask /%d from %s", layout.NodeMasks[0], d.Source))
	return layout
}

func (r *runbook) fixPodCIDRs(sr *StepReport) error {
	if r.fixPlan == nil {
		p, err := nodecidr.MakePlan(r.ctx, r.kube, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: r.fixLayout(sr)})
		if err != nil {
			return err
		}
		r.fixPlan = p
		if r.mode == "apply" && len(p.Steps) > 0 {
			if err := r.j.Put(keyFixPlan, p); err != nil {
				return err
			}
		}
	}
	return r.moveNodes(sr, r.fixPlan, "fix")
}

func (r *runbook) rewriteNodes(sr *StepReport) error {
	if !r.o.rewrite {
		sr.Status = "skipped"
		sr.Details = append(sr.Details, fmt.Sprintf("Network %s contains %s, so every node's podCIDR stays valid for flanneld and kube-controller-manager; rewriting is only needed to renumber (--rewrite-nodes --node-range R)", r.to, r.from))
		return nil
	}
	if r.rebasePlan == nil {
		p, err := nodecidr.MakePlan(r.ctx, r.kube, nodecidr.PlanOptions{Mode: nodecidr.ModeRebase, Rebase: []nodecidr.RebasePair{{From: r.from, To: r.nodeRange}}})
		if err != nil {
			return err
		}
		r.rebasePlan = p
		if r.mode == "apply" && len(p.Steps) > 0 {
			if err := r.j.Put(keyRebasePlan, p); err != nil {
				return err
			}
		}
	}
	return r.moveNodes(sr, r.rebasePlan, "rebase")
}

// moveNodes shows and applies a nodecidr plan with the runbook's hooks.
func (r *runbook) moveNodes(sr *StepReport, p *nodecidr.Plan, sub string) error {
	if len(p.Steps) == 0 {
		sr.Details = append(sr.Details, "no node needs a change")
		return nil
	}
	for _, s := range p.Steps {
		sr.Details = append(sr.Details, fmt.Sprintf("%s %s: %s -> %s (%s)", s.Action, s.Node, listOrNone(s.OldPodCIDRs), strings.Join(s.NewPodCIDRs, ","), s.Reason))
	}
	for _, w := range p.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	if r.mode == "plan" {
		sr.Details = append(sr.Details, "each node then: restart its flannel pod, delete its controller-owned pods, wait until it is Ready and its pods run")
		return nil
	}
	opts := nodecidr.ApplyOptions{
		Concurrency: 1,
		Hooks:       r.hooks(),
		Note:        "migrate-flannel-podcidr " + sub,
		OnEvent: func(e nodecidr.Event) {
			r.progress("  %s %s", sub, e.String())
		},
	}
	if r.mode == "server-dry-run" {
		opts.DryRun = nodecidr.DryRunServer
	} else {
		opts.JournalDir = filepath.Join(r.o.journalDir, sub)
	}
	res, err := nodecidr.Apply(r.ctx, r.kube, p, opts)
	if res != nil {
		sr.Details = append(sr.Details, fmt.Sprintf("moved %d node(s), %d already done; delete->create gap p50 %s max %s",
			len(res.Changed), len(res.AlreadyDone), res.Gaps.P50, res.Gaps.Max))
	}
	r.mu.Lock()
	for _, m := range r.manual {
		sr.Details = append(sr.Details, "restart by hand (no controller would recreate it): "+m)
	}
	r.manual = nil
	r.mu.Unlock()
	return err
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ",")
}

// hooks run after each moved node: restart its flannel pod, restart its
// workload pods, then wait for it to be healthy before the next node.
func (r *runbook) hooks() []nodecidr.Hook {
	return []nodecidr.Hook{
		nodecidr.DeleteNodePods(r.kube, nodecidr.DeletePodsOptions{Namespace: r.o.namespace, LabelSelector: r.o.flannelSelector, IncludeHostNetwork: true}),
		{
			Name: "restart-pods",
			Permissions: []nodecidr.Permission{
				{Verb: "list", Resource: "pods"},
				{Verb: "delete", Resource: "pods"},
			},
			Run: r.restartPods,
		},
		{
			Name:        "health-check",
			Permissions: []nodecidr.Permission{{Verb: "get", Resource: "nodes"}, {Verb: "list", Resource: "pods"}},
			Run:         r.waitHealthy,
		},
	}
}

func nodePods(ctx context.Context, kube kubernetes.Interface, node string) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// restartable says whether a pod on a moved node is deleted so its
// controller recreates it with an address of the new subnet. Mirror (static),
// hostNetwork and DaemonSet pods are left alone (the flannel pod has its own
// hook); a pod without a controller would be lost, so it is reported instead.
func restartable(p *corev1.Pod) (ok, manual bool) {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false, false
	}
	if _, mirror := p.Annotations[nodecidr.MirrorPodAnnotation]; mirror || p.Spec.HostNetwork {
		return false, false
	}
	c := metav1.GetControllerOf(p)
	if c == nil {
		return false, true
	}
	return c.Kind != "DaemonSet", false
}

func (r *runbook) restartPods(ctx context.Context, node *corev1.Node) error {
	pods, err := nodePods(ctx, r.kube, node.Name)
	if err != nil {
		return err
	}
	var opts metav1.DeleteOptions
	if r.mode == "server-dry-run" {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for i := range pods {
		p := &pods[i]
		ok, manual := restartable(p)
		if manual {
			r.mu.Lock()
			r.manual = append(r.manual, p.Namespace+"/"+p.Name+" on "+node.Name)
			r.mu.Unlock()
		}
		if !ok {
			continue
		}
		uid := p.UID
		o := opts
		o.Preconditions = &metav1.Preconditions{UID: &uid}
		if err := r.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, o); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete pod %s/%s on node %s: %w", p.Namespace, p.Name, node.Name, err)
		}
	}
	return nil
}

// waitHealthy waits until the node is Ready and every pod bound to it runs,
// as the Calico migration controller does between nodes.
func (r *runbook) waitHealthy(ctx context.Context, node *corev1.Node) error {
	if r.mode != "apply" {
		return nil
	}
	deadline := time.Now().Add(r.o.healthTimeout)
	why := ""
	for {
		why = r.unhealthy(ctx, node.Name)
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not healthy after %s: %s (if its pods cannot start because cni0 still has the old subnet's address, run the node's host clean-up from step 5 now, e.g. `ip link delete cni0` on %s, then rerun)",
				node.Name, r.o.healthTimeout, why, node.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.o.poll):
		}
	}
}

func (r *runbook) unhealthy(ctx context.Context, name string) string {
	n, err := r.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !nodeReady(n) {
		return "node is not Ready"
	}
	pods, err := nodePods(ctx, r.kube, name)
	if err != nil {
		return err.Error()
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("pod %s/%s is %s", p.Namespace, p.Name, p.Status.Phase)
		}
	}
	return ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// --- step 2: net-conf.json ---

func (r *runbook) setNetwork(sr *StepReport) error {
	if r.nc.Config.Network == r.to {
		sr.Details = append(sr.Details, fmt.Sprintf("%s/%s net-conf.json already holds Network %s", r.nc.Namespace, r.nc.Name, r.to))
		return nil
	}
	nodes, err := flannel.ReadNodes(r.ctx, r.kube, r.kubeOptions())
	if err != nil {
		return err
	}
	p, err := flannel.PlanNetConf(r.nc, flannel.SetNetworkRequest{Network: r.to}, nodes)
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, fmt.Sprintf("%s/%s key %s:", p.Namespace, p.Name, p.Key), "before: "+p.OldRaw, "after:  "+p.NewRaw)
	for _, w := range p.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	if len(p.NodesOutside) > 0 {
		sr.Details = append(sr.Details, fmt.Sprintf("warning: %d node(s) outside the new Network: %s", len(p.NodesOutside), strings.Join(p.NodesOutside, ", ")))
	}
	if r.mode == "plan" {
		return nil
	}
	if r.mode == "apply" {
		if err := r.j.Put(keyNetConf, p.OldRaw); err != nil {
			return err
		}
	}
	dry := flannel.DryRunNone
	if r.mode == "server-dry-run" {
		dry = flannel.DryRunServer
	}
	res, err := flannel.ApplyNetConf(r.ctx, r.kube, p, flannel.KubeApplyOptions{DryRun: dry})
	if res != nil {
		sr.Details = append(sr.Details, "net-conf.json: "+string(res.Outcome))
	}
	return err
}

// --- step 3: kube-controller-manager ---

func (r *runbook) controllerManager(sr *StepReport) error {
	if err := r.kubeadmConfigMaps(sr); err != nil {
		return err
	}
	want := r.to.String()
	changes := []kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagClusterCIDR, Value: want}}
	target := filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.ControllerManagerManifest)
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
			if err := m.Apply(changes); err != nil {
				return err
			}
			if diff := kubeadmcfg.UnifiedDiff(target, target, before, m.Bytes()); diff != "" {
				sr.Details = append(sr.Details, "diff for "+target+":\n"+diff)
			} else {
				sr.Details = append(sr.Details, path+" already has --cluster-cidr="+want)
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
				instr = append(instr, fmt.Sprintf("copy %s to %s on every control-plane node (the kubelet restarts the static pod)", outPath, target))
			}
		}
	}
	if len(instr) == 0 {
		instr = append(instr, fmt.Sprintf("on every control-plane node, set --cluster-cidr=%s in %s (the kubelet restarts kube-controller-manager); keep --node-cidr-mask-size", want, target))
	}
	instr = append(instr, fmt.Sprintf("every node's podCIDR lies in %s, which %s contains, so kube-controller-manager starts with the new flag", r.from, want))
	if r.mode != "apply" {
		sr.Details = append(sr.Details, instr...)
		sr.Details = append(sr.Details, "the runbook stops here (exit 3) until it observes the new flag, or is rerun with --continue")
		sr.Status = "operator"
		return nil
	}
	observed, why, err := r.observeFlag()
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
	r.rep.Waiting = &Waiting{
		Step:         stepKCM,
		Instructions: instr,
		Observed:     why,
		Resume:       "rerun the same command: it goes on once the kube-controller-manager mirror pod in kube-system runs with --cluster-cidr=" + want + "; add --continue if it cannot see it",
	}
	return errWaiting
}

// kubeadmConfigMaps updates kubeadm-config podSubnet and kube-proxy's
// clusterCIDR when those ConfigMaps exist.
func (r *runbook) kubeadmConfigMaps(sr *StepReport) error {
	snap, err := kubeadmcfg.Read(r.ctx, r.kube, kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	if snap.Kubeadm == nil && snap.KubeProxy == nil {
		sr.Details = append(sr.Details, "no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API")
		return nil
	}
	kp := &kubeadmcfg.Plan{}
	found := false
	if r.mode == "apply" {
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
		sr.Details = append(sr.Details, fmt.Sprintf("%s/%s %s: %s", e.Ref.Namespace, e.Ref.Name, e.Ref.Key, strings.Join(e.Changes, "; ")))
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

// observeFlag decides from the API whether kube-controller-manager runs with
// the new --cluster-cidr: every kube-controller-manager mirror pod in
// kube-system (label component=kube-controller-manager) carries it.
func (r *runbook) observeFlag() (bool, string, error) {
	pods, err := r.kube.CoreV1().Pods(metav1.NamespaceSystem).List(r.ctx, metav1.ListOptions{LabelSelector: "component=" + cidr.KubeControllerManager})
	if err != nil {
		return false, "", fmt.Errorf("listing kube-controller-manager pods: %w", err)
	}
	var names, stale []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		names = append(names, p.Name)
		args, _, err := nodecidr.ParseControllerManagerArgs(podArgs(p))
		v := args.ClusterCIDR
		if err != nil || !sameCIDRs(v, r.to) {
			stale = append(stale, fmt.Sprintf("%s has --cluster-cidr=%s", p.Name, v))
		}
	}
	if len(names) == 0 {
		return false, "no kube-controller-manager mirror pod in kube-system (label component=kube-controller-manager)", nil
	}
	if len(stale) > 0 {
		return false, strings.Join(stale, "; "), nil
	}
	return true, fmt.Sprintf("every kube-controller-manager pod (%s) runs with --cluster-cidr=%s", strings.Join(names, ", "), r.to), nil
}

// sameCIDRs compares a flag value, read leniently as kube-controller-manager
// does, with the wanted network.
func sameCIDRs(v string, want netip.Prefix) bool {
	ps, _, err := cidr.ParseListLenient(v)
	return err == nil && len(ps) >= 1 && ps[0] == want
}

func podArgs(p *corev1.Pod) []string {
	for _, c := range p.Spec.Containers {
		if c.Name == cidr.KubeControllerManager || len(p.Spec.Containers) == 1 {
			return append(slices.Clone(c.Command), c.Args...)
		}
	}
	return nil
}

// --- step 5: host clean-up, flanneld restart, verify ---

type moved struct {
	node     string
	from, to netip.Prefix
}

func movesOf(p *nodecidr.Plan) []moved {
	if p == nil {
		return nil
	}
	var out []moved
	for _, s := range p.Steps {
		m := moved{node: s.Node}
		if len(s.OldPodCIDRs) > 0 {
			m.from, _, _ = cidr.ParseLenient(s.OldPodCIDRs[0])
		}
		if len(s.NewPodCIDRs) > 0 {
			m.to, _, _ = cidr.ParseLenient(s.NewPodCIDRs[0])
		}
		out = append(out, m)
	}
	return out
}

func (r *runbook) hostCleanup(sr *StepReport) error {
	moves := append(movesOf(r.fixPlan), movesOf(r.rebasePlan)...)
	last := map[string]moved{}
	for _, m := range moves {
		if prev, ok := last[m.node]; ok && prev.from.IsValid() {
			m.from = prev.from
		}
		last[m.node] = m
	}
	names := make([]string, 0, len(last))
	for n := range last {
		names = append(names, n)
	}
	sort.Strings(names)
	cfg := r.nc.Config
	for _, n := range names {
		m := last[n]
		if !m.from.IsValid() {
			sr.Details = append(sr.Details, fmt.Sprintf("node %s had no podCIDR (now %s): its flanneld only needed the restart done in its step", n, m.to))
			continue
		}
		sr.Details = append(sr.Details, fmt.Sprintf("node %s moved %s -> %s; on the node:", n, m.from, m.to))
		for _, h := range flannel.CleanupSteps(flannel.CleanupOptions{
			Node: n, From: flannel.SubnetKey{IPv4: m.from}, To: flannel.SubnetKey{IPv4: m.to},
			BackendType: cfg.BackendType, Backend: cfg.Backend, KubeSubnetManager: true, Namespace: r.o.namespace,
		}) {
			sr.Details = append(sr.Details, fmt.Sprintf("  [%s] %s   # %s", h.Where, h.Command, h.Why))
		}
	}
	if len(names) == 0 {
		sr.Details = append(sr.Details, "no node's subnet moved: no host clean-up")
	}
	if err := r.restartFlannel(sr); err != nil {
		return err
	}
	if r.mode != "apply" {
		return nil
	}
	return r.verify(sr)
}

// restartFlannel rolls the flannel DaemonSet(s) so every flanneld reads the
// new Network (it reads net-conf.json only at start).
func (r *runbook) restartFlannel(sr *StepReport) error {
	dss, err := r.kube.AppsV1().DaemonSets(r.o.namespace).List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing DaemonSets in %s: %w", r.o.namespace, err)
	}
	// Only flannel's DaemonSets: the namespace may be kube-system, where a
	// rolling restart of everything else would be an unasked-for change.
	sel, err := labels.Parse(r.o.flannelSelector)
	if err != nil {
		return badf("--flannel-selector %q: %v", r.o.flannelSelector, err)
	}
	var flannelDS []appsv1.DaemonSet
	for _, ds := range dss.Items {
		if sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
			flannelDS = append(flannelDS, ds)
		}
	}
	if len(flannelDS) == 0 {
		sr.Details = append(sr.Details, fmt.Sprintf("no DaemonSet in namespace %s runs pods matching --flannel-selector %s: restart every flanneld by hand so it reads Network %s", r.o.namespace, r.o.flannelSelector, r.to))
		return nil
	}
	for _, ds := range flannelDS {
		if r.mode == "plan" {
			sr.Details = append(sr.Details, fmt.Sprintf("kubectl -n %s rollout restart daemonset/%s (every flanneld reads Network %s at start)", ds.Namespace, ds.Name, r.to))
			continue
		}
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, restartedAtAnnotation, time.Now().UTC().Format(time.RFC3339))
		opts := metav1.PatchOptions{}
		if r.mode == "server-dry-run" {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := r.kube.AppsV1().DaemonSets(ds.Namespace).Patch(r.ctx, ds.Name, types.StrategicMergePatchType, []byte(patch), opts); err != nil {
			return fmt.Errorf("restarting DaemonSet %s/%s: %w", ds.Namespace, ds.Name, err)
		}
		sr.Details = append(sr.Details, fmt.Sprintf("rolling restart of DaemonSet %s/%s", ds.Namespace, ds.Name))
	}
	return nil
}

// verify checks the end state: no duplicate or missing podCIDR, every node
// inside the new Network, net-conf.json holding it.
func (r *runbook) verify(sr *StepReport) error {
	nc, err := flannel.ReadNetConf(r.ctx, r.kube, r.kubeOptions())
	if err != nil {
		return err
	}
	if nc.Config == nil || nc.Config.Network != r.to {
		return fmt.Errorf("verify: net-conf.json does not hold Network %s", r.to)
	}
	nodes, err := flannel.ReadNodes(r.ctx, r.kube, r.kubeOptions())
	if err != nil {
		return err
	}
	var problems []string
	for _, f := range flannel.AuditKube(nc, nodes).Findings {
		if f.Severity == cidr.SeverityError {
			problems = append(problems, f.String())
		}
	}
	rep, err := nodecidr.Audit(r.ctx, r.kube, nodecidr.AuditOptions{})
	if err != nil {
		return err
	}
	for _, f := range rep.Findings {
		if f.Severity == cidr.SeverityError {
			problems = append(problems, f.String())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("verify: %s", strings.Join(problems, "; "))
	}
	sr.Details = append(sr.Details, fmt.Sprintf("verified: %d nodes, every podCIDR unique and inside %s", len(nodes), r.to))
	return nil
}

// --- output ---

func (r *runbook) printText() {
	w := r.stdout
	switch r.mode {
	case "plan":
		fmt.Fprintf(w, "runbook: flannel Network %s -> %s (plan only; run with --journal DIR --apply)\n", r.from, r.to)
	case "server-dry-run":
		fmt.Fprintf(w, "runbook: flannel Network %s -> %s (server dry run: nothing stored)\n", r.from, r.to)
	default:
		fmt.Fprintf(w, "runbook: flannel Network %s -> %s (journal %s)\n", r.from, r.to, r.o.journalDir)
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
