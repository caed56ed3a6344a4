// Command migrate-servicecidr is a runbook: it moves a cluster's Service
// range (story 3: 100.64.0.0/13, which collides with Tailscale, to
// 172.24.0.0/15) from start to finish, composing the servicecidr and
// kubeadmcfg packages, and can be stopped and rerun at any point.
//
//	migrate-servicecidr --to 172.24.0.0/15                          # print the whole runbook as a plan
//	migrate-servicecidr --to 172.24.0.0/15 --journal DIR --apply    # run it; rerun the same command to resume
//
// Steps, each recorded in one journal (--journal DIR) once done:
//
//  1. preflight: the new range is valid, large enough for kube-apiserver's
//     flag and free of conflicts (servicecidr.Validate); the caller may do
//     everything the runbook needs (SelfSubjectAccessReview).
//  2. add-servicecidr: create the ServiceCIDR for the new range, wait until Ready.
//  3. move-services: recreate every Service of the old range in the new
//     one, kube-dns first at the same offset (servicecidr Recover, Plan,
//     Apply, with its own crash-safe journal in DIR/servicecidr).
//     LoadBalancers stay unless --include-loadbalancers.
//  4. node-config: the kubelet clusterDNS and certificate steps; when the
//     kubeadm ConfigMaps exist, kubelet-config clusterDNS and kubeadm-config
//     serviceSubnet are updated through kubeadmcfg's plan and apply.
//  5. control-plane-flags: the --service-cluster-ip-range edits of
//     kube-apiserver and kube-controller-manager (rewritten manifests in
//     --out with --manifests; /etc is never touched). This step needs a
//     person: the runbook prints what to do and exits 3. The next run goes on
//     once it observes the change through the API (every kube-apiserver mirror
//     pod runs with the new flag, or kube-apiserver reported that the default
//     ServiceCIDR does not match its new flag), or when given --continue.
//  6. retire-old-range: mark the old ServiceCIDR for deletion, let
//     kube-apiserver recreate default/kubernetes in the new range, wait for
//     the old range to drain and verify the end state.
//
// Exit codes: 0 done (or plan printed), 1 failure, 2 bad input (one line),
// 3 waiting for an operator step.
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
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/internal/journal"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/servicecidr"
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
	stepAdd       = "add-servicecidr"
	stepMove      = "move-services"
	stepNodes     = "node-config"
	stepFlags     = "control-plane-flags"
	stepRetire    = "retire-old-range"
)

var stepNames = []string{stepPreflight, stepAdd, stepMove, stepNodes, stepFlags, stepRetire}

var stepTitles = map[string]string{
	stepPreflight: "check the new range and permissions",
	stepAdd:       "add the ServiceCIDR for the new range",
	stepMove:      "move the Services (DNS first)",
	stepNodes:     "kubelet clusterDNS, kubeadm ConfigMaps, certificates",
	stepFlags:     "kube-apiserver and kube-controller-manager --service-cluster-ip-range (operator)",
	stepRetire:    "retire the old range, recreate default/kubernetes, verify",
}

// Journal keys.
const (
	keyRunbook = "runbook"
	keyPlan    = "servicecidr-plan"
	// keyKubeadmPlan is the kubeadmcfg plan of step 4.
	keyKubeadmPlan = "kubeadmcfg-plan"
)

// reasonInconsistent is the Warning event kube-apiserver records on the
// default ServiceCIDR when its --service-cluster-ip-range differs from it.
const reasonInconsistent = "KubernetesDefaultServiceCIDRInconsistent"

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

// badf is bad input: exit code 2.
func badf(format string, args ...any) error { return cli.Usagef(format, args...) }

var errHelp = errors.New("help")

// errWaiting ends a run that stopped at an operator step (exit 3).
var errWaiting = errors.New("waiting for an operator step")

type options struct {
	kubeconfig, kubeContext, output  string
	from, to, journalDir, dryRun     string
	manifests, out                   string
	apply, includeLB, cont           bool
	drainTimeout, readyTimeout, poll time.Duration
}

// StepReport is what the runbook says about one step.
type StepReport struct {
	Number int    `json:"number"`
	Name   string `json:"name"`
	Title  string `json:"title"`
	// Status: done (by an earlier run), completed (now), planned, dry-run,
	// waiting (for an operator), failed, not-reached.
	Status  string   `json:"status"`
	Details []string `json:"details,omitempty"`
}

// Report is the runbook's output.
type Report struct {
	Mode    string         `json:"mode"`
	From    []netip.Prefix `json:"from"`
	To      []netip.Prefix `json:"to"`
	Journal string         `json:"journal,omitempty"`
	Steps   []StepReport   `json:"steps"`
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

// state is the runbook's own journal record.
type state struct {
	From      []netip.Prefix `json:"from"`
	To        []netip.Prefix `json:"to"`
	IncludeLB bool           `json:"includeLoadBalancers"`
	Started   time.Time      `json:"started"`
}

// stepRecord marks a step done.
type stepRecord struct {
	Done time.Time `json:"done"`
	Note string    `json:"note,omitempty"`
}

// planRecord keeps what later steps need of the Service move plan, which a
// rerun cannot recompute once the Services have moved.
type planRecord struct {
	DNS           *servicecidr.AddressChange `json:"dns,omitempty"`
	Manual        []servicecidr.ManualStep   `json:"manual"`
	PodsToRestart []string                   `json:"podsToRestart,omitempty"`
	Kubernetes    *servicecidr.Move          `json:"kubernetes,omitempty"`
}

type runbook struct {
	o      options
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	c      *servicecidr.Client
	kube   kubernetes.Interface
	j      *journal.Journal
	from   []netip.Prefix
	to     []netip.Prefix
	mode   string // plan, apply, server-dry-run
	rep    Report
	plan   *planRecord
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, connect connector) int {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "migrate-servicecidr: "+oneLine(err.Error()))
		return exitBad
	}
	r := &runbook{o: o, ctx: ctx, stdout: stdout, stderr: stderr}
	code := r.run(connect)
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
	fs.StringVar(&o.dryRun, "dry-run", "", "client (print the plan) or server (the API server checks every write of steps 1-4, stores nothing)")
	fs.BoolVar(&o.includeLB, "include-loadbalancers", false, "also move type=LoadBalancer Services (their external address may change)")
	fs.StringVar(&o.manifests, "manifests", "", "directory holding kube-apiserver.yaml and kube-controller-manager.yaml to render the flag edits from (read only)")
	fs.StringVar(&o.out, "out", "", "with --manifests: directory to write the rewritten manifests to")
	fs.BoolVar(&o.cont, "continue", false, "the operator step (control-plane flags) is done: go on without observing it")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 2*time.Minute, "how long to wait for the old ServiceCIDR to drain in the last step")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 2*time.Minute, "how long to wait for a ServiceCIDR to become Ready and for default/kubernetes to be recreated")
	fs.DurationVar(&o.poll, "poll-interval", time.Second, "poll period of the waits")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: migrate-servicecidr --to CIDR [--from CIDR] [--journal DIR --apply] [flags]")
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
	if o.to == "" {
		return o, badf("--to is required: the new Service range, e.g. --to 172.24.0.0/15")
	}
	if o.apply && o.dryRun == "client" {
		return o, badf("--apply and --dry-run client conflict: --apply changes the cluster, --dry-run client only prints the runbook; give one (--dry-run server asks the API server to check every write)")
	}
	if o.apply && o.dryRun == "" && o.journalDir == "" {
		return o, badf("--journal DIR is required with --apply: it records the finished steps and every Service before its delete, so a rerun resumes")
	}
	if o.out != "" && o.manifests == "" {
		return o, badf("--out %s needs --manifests DIR: the manifests to rewrite", o.out)
	}
	if o.manifests != "" {
		if st, err := os.Stat(o.manifests); err != nil || !st.IsDir() {
			return o, badf("--manifests %s: not a directory", o.manifests)
		}
	}
	if o.out != "" && o.manifests != "" {
		a, _ := filepath.Abs(o.out)
		b, _ := filepath.Abs(o.manifests)
		if a == b {
			return o, badf("--out must differ from --manifests: the runbook never rewrites manifests in place")
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"drain-timeout", o.drainTimeout}, {"ready-timeout", o.readyTimeout}, {"poll-interval", o.poll}} {
		if err := cli.NonNegative(d.name, d.v); err != nil {
			return o, err
		}
		if d.v == 0 {
			return o, badf("--%s %s: must be positive", d.name, d.v)
		}
	}
	if o.journalDir != "" {
		if st, err := os.Stat(o.journalDir); err == nil && !st.IsDir() {
			return o, badf("--journal %s: not a directory", o.journalDir)
		}
	}
	return o, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// badInput are the errors that mean the input was refused before anything
// was written: exit code 2.
var badInput = []error{servicecidr.ErrInvalid, servicecidr.ErrConflict, servicecidr.ErrRangeFull, servicecidr.ErrPlanFormat}

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
	default:
		code = cli.ExitCode(err, badInput...)
	}
	if err != nil && !errors.Is(err, errWaiting) {
		r.rep.Error = oneLine(err.Error())
	}
	if r.j != nil {
		_ = r.j.Close()
	}
	// A refused run (bad input, or nothing reached) prints no report: it
	// would list steps as if they were to be carried out.
	refused := code == exitBad || (code == cli.ExitUnreachable || code == cli.ExitInterrupted) && len(r.rep.Steps) == 0
	if r.o.output != "" && !refused {
		if werr := cli.Write(r.stdout, r.o.output, r.rep); werr != nil && code == exitOK {
			code = exitFailed
		}
	} else if !refused {
		r.printText()
	}
	if err != nil && !errors.Is(err, errWaiting) {
		return cli.Fail(r.stderr, "migrate-servicecidr", err, badInput...)
	}
	return code
}

func (r *runbook) execute(connect connector) error {
	var err error
	if r.to, err = servicecidr.ParseCIDRs("--to", r.o.to); err != nil {
		return err
	}
	var from []netip.Prefix
	if r.o.from != "" {
		if from, err = servicecidr.ParseCIDRs("--from", r.o.from); err != nil {
			return err
		}
	}
	if r.mode == "apply" {
		r.j, err = journal.Open(r.o.journalDir)
		if err != nil {
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
	if r.j != nil {
		found, err := r.j.Get(keyRunbook, &st)
		if err != nil {
			return err
		}
		if found {
			if !slices.Equal(st.To, r.to) || (from != nil && !slices.Equal(st.From, from)) {
				return badf("--journal %s records a move from %s to %s; rerun with those ranges or use another journal", r.o.journalDir, prefixes(st.From), prefixes(st.To))
			}
			from = st.From
		}
		var pr planRecord
		if ok, err := r.j.Get(keyPlan, &pr); err != nil {
			return err
		} else if ok {
			r.plan = &pr
		}
	}
	r.c, err = connect(r.ctx, r.o.kubeconfig, r.o.kubeContext)
	if err != nil {
		return err
	}
	r.kube = r.c.Kube()
	if from == nil {
		sc, err := r.c.Get(r.ctx, servicecidr.DefaultServiceCIDRName)
		if apierrors.IsNotFound(err) {
			return badf("--from not given and there is no default ServiceCIDR %q to take it from; give --from, the Service range in use", servicecidr.DefaultServiceCIDRName)
		}
		if err != nil {
			return fmt.Errorf("--from not given and the default ServiceCIDR %q cannot be read (%w); give --from", servicecidr.DefaultServiceCIDRName, err)
		}
		from = sc.CIDRs
	}
	r.from = from
	r.rep.From, r.rep.To = r.from, r.to
	for _, f := range r.from {
		for _, t := range r.to {
			if f.Overlaps(t) {
				return badf("--to %s overlaps --from %s: the new range must be disjoint from the old one", t, f)
			}
		}
	}

	steps := map[string]func(*StepReport) error{
		stepPreflight: r.preflight,
		stepAdd:       r.addServiceCIDR,
		stepMove:      r.moveServices,
		stepNodes:     r.nodeConfig,
		stepFlags:     r.controlPlaneFlags,
		stepRetire:    r.retire,
	}
	var failed error
	for i, name := range stepNames {
		sr := StepReport{Number: i + 1, Name: name, Title: stepTitles[name]}
		if failed != nil {
			sr.Status = "not-reached"
			r.rep.Steps = append(r.rep.Steps, sr)
			continue
		}
		if r.j != nil && name != stepPreflight {
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
		if err == nil && name == stepPreflight && r.j != nil && r.mode == "apply" {
			// The move is recorded once preflight accepted it: a refused
			// run leaves no record that would pin a rerun to its ranges.
			if ok, gerr := r.j.Get(keyRunbook, &state{}); gerr != nil {
				return gerr
			} else if !ok {
				if perr := r.j.Put(keyRunbook, state{From: r.from, To: r.to, IncludeLB: r.o.includeLB, Started: time.Now().UTC()}); perr != nil {
					return perr
				}
			}
		}
		switch {
		case err == nil:
			if sr.Status == "" {
				sr.Status = map[string]string{"apply": "completed", "plan": "planned", "server-dry-run": "dry-run"}[r.mode]
			}
			if r.mode == "apply" && sr.Status == "completed" {
				note := ""
				if name == stepFlags && r.o.cont && len(sr.Details) > 0 {
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

// --- step 1: preflight ---

func (r *runbook) preflight(sr *StepReport) error {
	// The whole move is planned now, before step 2 writes anything: Plan
	// refuses a --from that is not the range in use, a target name taken by
	// another range, a range too small, ...
	po := r.planOptions()
	if r.mode == "apply" {
		// A Service that an interrupted run deleted and did not recreate is
		// brought back first, at its journaled address: it is absent now,
		// and Plan refuses to plan around it.
		ao := r.applyOptions(servicecidr.DryRunNone)
		if _, err := r.c.Recover(r.ctx, ao); err != nil {
			return err
		}
		po.JournalDir = ao.JournalDir
	}
	if _, err := r.c.Plan(r.ctx, po); err != nil {
		return err
	}
	existing, err := r.c.List(r.ctx)
	if err != nil {
		return err
	}
	vo := servicecidr.ValidateOptions{Field: "--to", KubernetesMinor: r.c.Server().Minor, ForFlag: true, Avoid: r.from}
	for _, sc := range existing {
		// The new range's own ServiceCIDR (added by an earlier run) is no conflict.
		if !slices.Equal(sc.CIDRs, r.to) {
			vo.Existing = append(vo.Existing, sc)
		}
	}
	nodes, err := r.kube.CoreV1().Nodes().List(r.ctx, metav1.ListOptions{})
	if err != nil {
		sr.Details = append(sr.Details, "nodes not read, their networks are not checked: "+oneLine(err.Error()))
	} else {
		for _, n := range nodes.Items {
			for _, s := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
				if p, _, err := cidr.ParseLenient(s); err == nil && s != "" {
					vo.NodePodCIDRs = append(vo.NodePodCIDRs, cidr.Range{Name: "node " + n.Name + " podCIDR", Kind: cidr.KindNodePodCIDR, Prefix: p})
				}
			}
			for _, a := range n.Status.Addresses {
				if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
					continue
				}
				if ip, err := netip.ParseAddr(a.Address); err == nil {
					vo.NodeNetworks = append(vo.NodeNetworks, netip.PrefixFrom(ip, ip.BitLen()))
				}
			}
		}
	}
	val, err := servicecidr.Validate(r.to, vo)
	if err != nil {
		return err
	}
	for _, cp := range val.Capacity {
		sr.Details = append(sr.Details, fmt.Sprintf("%s: %s usable ClusterIPs, kubernetes Service %s, DNS %s", cp.CIDR, cp.UsableIPs, cp.KubernetesIP, cp.DNSIP))
	}
	for _, w := range val.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	sr.Details = append(sr.Details, fmt.Sprintf("ServiceCIDR API %s on Kubernetes %s; moving %s -> %s", r.c.APIVersion().GroupVersion(), r.c.Server().GitVersion, prefixes(r.from), prefixes(r.to)))
	if err := r.checkManifests(); err != nil {
		return err
	}
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

// checkManifests reads and rewrites (in memory) the manifests of --manifests
// before anything is written, so that step 5 cannot fail on them after the
// Services moved: a directory holding neither manifest, or one that does not
// parse, is bad input.
func (r *runbook) checkManifests() error {
	if r.o.manifests == "" {
		return nil
	}
	changes := []kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagServiceClusterIPRange, Value: prefixes(r.to)}}
	found := 0
	for _, name := range []string{kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest} {
		path := filepath.Join(r.o.manifests, name)
		m, err := kubeadmcfg.ReadManifestFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return badf("--manifests %s: %s: %s", r.o.manifests, name, oneLine(err.Error()))
		}
		if err := m.Apply(changes); err != nil {
			return badf("--manifests %s: %s: %s", r.o.manifests, name, oneLine(err.Error()))
		}
		found++
	}
	if found == 0 {
		return badf("--manifests %s: holds neither %s nor %s; give the directory of the static-pod manifests", r.o.manifests, kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest)
	}
	return nil
}

func (r *runbook) accessChecks() []access.Check {
	var out []access.Check
	for _, v := range []string{"get", "list", "create", "delete"} {
		out = append(out, access.Check{Verb: v, Group: servicecidr.Group, Resource: "servicecidrs"})
		out = append(out, access.Check{Verb: v, Resource: "services"})
	}
	out = append(out,
		access.Check{Verb: "list", Resource: "pods"},
		access.Check{Verb: "list", Resource: "events", Namespace: metav1.NamespaceDefault},
		access.Check{Verb: "get", Resource: "configmaps", Namespace: kubeadmcfg.Namespace},
		access.Check{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeadmConfigMap},
		access.Check{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeletConfigMap},
	)
	return out
}

// --- step 2: add the ServiceCIDR ---

func (r *runbook) addServiceCIDR(sr *StepReport) error {
	list, err := r.c.List(r.ctx)
	if err != nil {
		return err
	}
	for _, sc := range list {
		if slices.Equal(sc.CIDRs, r.to) && !sc.Terminating() {
			if r.mode != "apply" {
				sr.Details = append(sr.Details, fmt.Sprintf("ServiceCIDR %s already holds %s (%s)", sc.Name, prefixes(r.to), sc.State()))
				return nil
			}
			sc, err := r.c.WaitReady(r.ctx, sc.Name, servicecidr.WaitOptions{Timeout: r.o.readyTimeout, Interval: r.o.poll})
			if err != nil {
				return err
			}
			sr.Details = append(sr.Details, fmt.Sprintf("ServiceCIDR %s holds %s, %s", sc.Name, prefixes(r.to), sc.State()))
			return nil
		}
	}
	name := servicecidr.TargetName(r.to)
	switch r.mode {
	case "plan":
		sr.Details = append(sr.Details, fmt.Sprintf("would create ServiceCIDR %s %s and wait until it is Ready", name, prefixes(r.to)))
		return nil
	case "server-dry-run":
		if _, err := r.c.Create(r.ctx, name, r.to, servicecidr.WriteOptions{DryRun: true}); err != nil {
			return err
		}
		sr.Details = append(sr.Details, fmt.Sprintf("server accepted ServiceCIDR %s %s (dry run, not stored)", name, prefixes(r.to)))
		return nil
	}
	if _, err := r.c.Create(r.ctx, name, r.to, servicecidr.WriteOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	sc, err := r.c.WaitReady(r.ctx, name, servicecidr.WaitOptions{Timeout: r.o.readyTimeout, Interval: r.o.poll})
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, fmt.Sprintf("created ServiceCIDR %s %s, %s", sc.Name, prefixes(sc.CIDRs), sc.State()))
	return nil
}

// --- step 3: move the Services ---

func (r *runbook) applyOptions(dry servicecidr.DryRun) servicecidr.ApplyOptions {
	ao := servicecidr.ApplyOptions{DryRun: dry, ReadyTimeout: r.o.readyTimeout, PollInterval: r.o.poll}
	if r.j != nil && dry == servicecidr.DryRunNone {
		ao.JournalDir = filepath.Join(r.j.Dir(), "servicecidr")
	}
	if r.o.output == "" {
		ao.Progress = func(e servicecidr.Event) { fmt.Fprintln(r.stderr, "  "+eventLine(e)) }
	}
	return ao
}

func (r *runbook) planOptions() servicecidr.PlanOptions {
	return servicecidr.PlanOptions{From: r.from, To: r.to, IncludeLoadBalancers: r.o.includeLB}
}

func (r *runbook) moveServices(sr *StepReport) error {
	dry := map[string]servicecidr.DryRun{"plan": servicecidr.DryRunClient, "server-dry-run": servicecidr.DryRunServer}[r.mode]
	ao := r.applyOptions(dry)
	if r.mode == "apply" {
		// A Service an interrupted run left deleted must be back, at its
		// journaled address, before planning again.
		if _, err := r.c.Recover(r.ctx, ao); err != nil {
			return err
		}
	}
	po := r.planOptions()
	if r.mode == "apply" {
		po.JournalDir = ao.JournalDir // keeps a default/kubernetes the run deleted in the plan until it is back
	}
	p, err := r.c.Plan(r.ctx, po)
	if err != nil {
		return err
	}
	if r.plan == nil {
		r.plan = &planRecord{DNS: p.DNS, Manual: p.Manual, PodsToRestart: p.PodsToRestart, Kubernetes: p.Kubernetes}
		if r.mode == "apply" {
			if err := r.j.Put(keyPlan, r.plan); err != nil {
				return err
			}
		}
	}
	for _, m := range p.Moves {
		note := m.Note
		if m.Role == "dns" {
			note = strings.Trim("cluster DNS; "+note, "; ")
		}
		sr.Details = append(sr.Details, fmt.Sprintf("%s %s -> %s%s", m.Key(), addrList(m.OldIPs), addrList(m.NewIPs), noteSuffix(note)))
	}
	for _, s := range p.Skipped {
		sr.Details = append(sr.Details, fmt.Sprintf("left alone %s/%s: %s", s.Namespace, s.Name, s.Reason))
	}
	for _, w := range p.Warnings {
		sr.Details = append(sr.Details, "warning: "+w)
	}
	if r.mode == "plan" {
		sr.Details = append(sr.Details, fmt.Sprintf("would move %d Service(s); the old ServiceCIDR stays until step 6", len(p.Moves)))
		return nil
	}
	if r.mode == "server-dry-run" && len(p.Moves) > 0 && !p.Target.Exists {
		// Step 2 was a dry run: the API server would refuse every new
		// address, so only the deletes can be checked.
		sr.Details = append(sr.Details, "the new ServiceCIDR does not exist yet (step 2 was a dry run): Service creates cannot be checked by the server")
	}
	res, err := r.c.Apply(r.ctx, p, ao)
	if res != nil {
		verb := "moved"
		if res.DryRun != servicecidr.DryRunNone {
			verb = "server accepted the move of"
		}
		sr.Details = append(sr.Details, fmt.Sprintf("%s %d Service(s), %d already moved by an earlier run", verb, len(res.Moved), len(res.AlreadyMoved)))
		if res.Gaps.Count > 0 {
			sr.Details = append(sr.Details, fmt.Sprintf("Services absent between delete and create: p50 %s, max %s", res.Gaps.P50.Round(time.Microsecond), res.Gaps.Max.Round(time.Microsecond)))
		}
		for _, w := range res.Warnings {
			sr.Details = append(sr.Details, "warning: "+w)
		}
	}
	return err
}

// --- step 4: node configuration ---

func (r *runbook) nodeConfig(sr *StepReport) error {
	if r.plan == nil {
		// Planning (no journal) after the Services moved: nothing recorded.
		p, err := r.c.Plan(r.ctx, r.planOptions())
		if err != nil {
			return err
		}
		r.plan = &planRecord{DNS: p.DNS, Manual: p.Manual, PodsToRestart: p.PodsToRestart, Kubernetes: p.Kubernetes}
	}
	var dnsNew []string
	if d := r.plan.DNS; d != nil {
		for _, a := range d.NewIPs {
			dnsNew = append(dnsNew, a.String())
		}
	}
	snap, err := kubeadmcfg.Read(r.ctx, r.kube, kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	for _, m := range r.plan.Manual {
		switch {
		case m.Component == "kube-apiserver" || m.Component == "kube-controller-manager":
			continue // step 5
		case m.Component == "default/kubernetes":
			continue // step 6 does it
		case m.Component == "kubeadm-config" && snap.Kubeadm != nil:
			continue // done below through the API
		}
		sr.Details = append(sr.Details, "by hand: "+manualLine(m))
	}
	if n := len(r.plan.PodsToRestart); n > 0 {
		show := r.plan.PodsToRestart[:min(n, 10)]
		more := ""
		if n > 10 {
			more = fmt.Sprintf(" and %d more", n-10)
		}
		sr.Details = append(sr.Details, fmt.Sprintf("after the kubelets: restart the %d pod(s) that use cluster DNS: %s%s", n, strings.Join(show, ", "), more))
	}

	if snap.Kubeadm == nil && snap.Kubelet == nil {
		sr.Details = append(sr.Details, "no kubeadm-config or kubelet-config ConfigMap: nothing to update in the API")
		return nil
	}
	// A run killed between the two ConfigMap updates leaves kubeadm-config
	// with the new range, and a fresh plan would then see nothing to do
	// for kubelet-config: the plan is journaled before Apply and reused.
	kp := &kubeadmcfg.Plan{}
	found := false
	if r.j != nil && r.mode == "apply" {
		if found, err = r.j.Get(keyKubeadmPlan, kp); err != nil {
			return err
		}
	}
	if !found {
		kp, err = kubeadmcfg.NewPlan(snap, kubeadmcfg.Intent{ServiceSubnet: prefixes(r.to)}, kubeadmcfg.PlanOptions{KeepNodeIPAM: true})
		if errors.Is(err, kubeadmcfg.ErrNothingToDo) {
			sr.Details = append(sr.Details, "kubeadm ConfigMaps already hold "+prefixes(r.to))
			return nil
		}
		if err != nil {
			return err
		}
		if r.j != nil && r.mode == "apply" {
			if err := r.j.Put(keyKubeadmPlan, kp); err != nil {
				return err
			}
		}
	}
	if dnsNew != nil && kp.Target.ClusterDNS != nil && !slices.Equal(dnsNew, kp.Target.ClusterDNS) {
		sr.Details = append(sr.Details, fmt.Sprintf("warning: kubelet-config clusterDNS would become %v but the DNS Service moved to %v", kp.Target.ClusterDNS, dnsNew))
	}
	var edits []string
	for _, e := range kp.ConfigMapEdits {
		if e.ID != kubeadmcfg.EditKubeadmConfig && e.ID != kubeadmcfg.EditKubeletConfig {
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

func manualLine(m servicecidr.ManualStep) string {
	change := ""
	if m.Old != "" || m.New != "" {
		change = fmt.Sprintf(" (%s -> %s)", m.Old, m.New)
	}
	return fmt.Sprintf("%s: %s%s", m.Component, m.Action, change)
}

// --- step 5: control-plane flags (operator) ---

func (r *runbook) controlPlaneFlags(sr *StepReport) error {
	flagValue := prefixes(r.to)
	changes := []kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagServiceClusterIPRange, Value: flagValue}}
	var instr []string
	if r.o.manifests != "" {
		for _, name := range []string{kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest} {
			path := filepath.Join(r.o.manifests, name)
			m, err := kubeadmcfg.ReadManifestFile(path)
			if errors.Is(err, os.ErrNotExist) {
				sr.Details = append(sr.Details, path+": not found, skipped")
				continue
			}
			if err != nil {
				return err
			}
			before := slices.Clone(m.Bytes())
			if err := m.Apply(changes); err != nil {
				return err
			}
			target := filepath.Join(kubeadmcfg.DefaultManifestDir, name)
			if diff := kubeadmcfg.UnifiedDiff(target, target, before, m.Bytes()); diff != "" {
				sr.Details = append(sr.Details, "diff for "+target+":\n"+diff)
			} else {
				sr.Details = append(sr.Details, path+" already has --service-cluster-ip-range="+flagValue)
			}
			if r.o.out != "" {
				if err := os.MkdirAll(r.o.out, 0o755); err != nil {
					return err
				}
				outPath := filepath.Join(r.o.out, name)
				if err := kubeadmcfg.WriteFileAtomic(outPath, m.Bytes()); err != nil {
					return err
				}
				sr.Details = append(sr.Details, "wrote "+outPath)
				instr = append(instr, fmt.Sprintf("copy %s to %s on every control-plane node (the kubelet restarts the static pod)", outPath, target))
			}
		}
	}
	if len(instr) == 0 {
		instr = append(instr, fmt.Sprintf("on every control-plane node, set --service-cluster-ip-range=%s in %s and %s (the kubelet restarts both)",
			flagValue, filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.APIServerManifest), filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.ControllerManagerManifest)))
	}
	if r.plan != nil {
		for _, m := range r.plan.Manual {
			if m.Component == "kube-apiserver" || m.Component == "kube-controller-manager" {
				if !strings.Contains(m.Action, "service-cluster-ip-range") {
					instr = append(instr, manualLine(m))
				}
			}
		}
	}
	instr = append(instr, "restart kube-apiserver before kube-controller-manager; every kube-apiserver must run with the new range before step 6")
	if r.mode != "apply" {
		sr.Details = append(sr.Details, instr...)
		sr.Details = append(sr.Details, "the runbook stops here (exit 3) until it observes the new flag, or is rerun with --continue")
		sr.Status = map[string]string{"plan": "operator", "server-dry-run": "operator"}[r.mode]
		return nil
	}
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
	r.rep.Waiting = &Waiting{
		Step:         stepFlags,
		Instructions: instr,
		Observed:     why,
		Resume:       "rerun the same command: it goes on once it sees the new flag (kube-apiserver mirror pods, or kube-apiserver's " + reasonInconsistent + " event); add --continue if it cannot see it",
	}
	return errWaiting
}

// observeFlags decides from the API whether kube-apiserver runs with the new
// --service-cluster-ip-range:
//   - the "kubernetes" ServiceCIDR already holds the new range (kube-apiserver
//     recreated it from its flag), or
//   - kubeadm-style mirror pods of kube-apiserver and kube-controller-manager
//     exist in kube-system and every one carries the new flag, or
//   - (no mirror pods) kube-apiserver recorded the Warning event
//     KubernetesDefaultServiceCIDRInconsistent naming the new range, which it
//     does at start-up when its flag differs from the default ServiceCIDR.
func (r *runbook) observeFlags() (bool, string, error) {
	want := prefixes(r.to)
	if sc, err := r.c.Get(r.ctx, servicecidr.DefaultServiceCIDRName); err == nil && slices.Equal(sc.CIDRs, r.to) {
		return true, fmt.Sprintf("ServiceCIDR %s holds %s", sc.Name, want), nil
	} else if err != nil && !apierrors.IsNotFound(err) {
		return false, "", err
	}
	var mirrors, stale []string
	for _, comp := range []string{"kube-apiserver", "kube-controller-manager"} {
		pods, err := r.kube.CoreV1().Pods(metav1.NamespaceSystem).List(r.ctx, metav1.ListOptions{LabelSelector: "component=" + comp})
		if err != nil {
			return false, "", fmt.Errorf("listing %s pods: %w", comp, err)
		}
		for _, p := range pods.Items {
			mirrors = append(mirrors, p.Name)
			if v, ok := podFlag(&p, comp, "--service-cluster-ip-range"); !ok || v != want {
				stale = append(stale, fmt.Sprintf("%s has --service-cluster-ip-range=%s", p.Name, v))
			}
		}
	}
	if len(mirrors) > 0 {
		if len(stale) == 0 {
			return true, fmt.Sprintf("every control-plane pod (%s) runs with --service-cluster-ip-range=%s", strings.Join(mirrors, ", "), want), nil
		}
		return false, strings.Join(stale, "; "), nil
	}
	events, err := r.kube.CoreV1().Events(metav1.NamespaceDefault).List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return false, "", fmt.Errorf("listing events: %w", err)
	}
	wantMsg := "configurations " + fmt.Sprint(prefixStrings(r.to))
	for _, e := range events.Items {
		if e.Reason == reasonInconsistent && e.InvolvedObject.Name == servicecidr.DefaultServiceCIDRName && strings.HasSuffix(strings.TrimSpace(e.Message), wantMsg) {
			return true, "kube-apiserver reports: " + e.Message, nil
		}
	}
	return false, fmt.Sprintf("no kube-apiserver is seen running with --service-cluster-ip-range=%s (no mirror pods in kube-system, no %s event on ServiceCIDR %s)", want, reasonInconsistent, servicecidr.DefaultServiceCIDRName), nil
}

// podFlag returns the value of a flag on the command line of a pod's container.
func podFlag(p *corev1.Pod, container, flag string) (string, bool) {
	for _, c := range p.Spec.Containers {
		if c.Name != container && len(p.Spec.Containers) > 1 {
			continue
		}
		val, found := "", false
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				val, found = v, true
			}
		}
		return val, found
	}
	return "", false
}

// --- step 6: retire the old range ---

func (r *runbook) retire(sr *StepReport) error {
	if r.mode != "apply" {
		sr.Details = append(sr.Details,
			fmt.Sprintf("mark the ServiceCIDR(s) inside %s for deletion; move any Service created there since step 3", prefixes(r.from)),
			"delete default/kubernetes: kube-apiserver recreates it at the first address of "+prefixes(r.to),
			fmt.Sprintf("wait up to %s for the old range to drain, then verify every ClusterIP lies in %s", r.o.drainTimeout, prefixes(r.to)))
		if !r.o.includeLB {
			sr.Details = append(sr.Details, "LoadBalancer Services left in the old range keep it Terminating: rerun with --include-loadbalancers once recreating them is acceptable")
		}
		if r.mode == "server-dry-run" {
			sr.Status = "not-run"
			sr.Details = append(sr.Details, "not dry-run: it needs the operator step first")
		}
		return nil
	}
	ao := r.applyOptions(servicecidr.DryRunNone)
	ao.DeleteOld, ao.DeleteKubernetesService, ao.DrainTimeout = true, true, r.o.drainTimeout
	if _, err := r.c.Recover(r.ctx, ao); err != nil {
		return err
	}
	p, err := r.c.Plan(r.ctx, r.planOptions())
	if err != nil {
		return err
	}
	res, err := r.c.Apply(r.ctx, p, ao)
	if res != nil {
		if len(res.Moved) > 0 {
			sr.Details = append(sr.Details, fmt.Sprintf("moved %d Service(s) created in the old range since step 3", len(res.Moved)))
		}
		if res.Kubernetes != "" {
			sr.Details = append(sr.Details, "default/kubernetes: "+res.Kubernetes)
		}
		for _, o := range res.Old {
			sr.Details = append(sr.Details, o.Summary)
		}
		for _, w := range res.Warnings {
			sr.Details = append(sr.Details, "warning: "+w)
		}
	}
	if err != nil {
		return err
	}
	// A run killed right after deleting default/kubernetes finds it absent
	// on the rerun: the new plan has no Kubernetes entry and Apply does not
	// wait for it, so wait here until kube-apiserver has recreated it.
	kube, err := r.waitKubernetesService()
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, kube)
	vo := servicecidr.VerifyOptions{To: r.to, From: r.from, IncludeLoadBalancers: r.o.includeLB}
	if r.plan != nil && r.plan.DNS != nil {
		vo.DNSIPs = r.plan.DNS.NewIPs
	}
	v, err := r.c.Verify(r.ctx, vo)
	if err != nil {
		return err
	}
	var errs []string
	for _, f := range v.Findings {
		if f.Severity == servicecidr.SeverityError {
			errs = append(errs, f.Object+": "+f.Message)
		} else if f.Severity == servicecidr.SeverityWarning {
			sr.Details = append(sr.Details, "warning: "+f.Object+": "+f.Message)
		}
	}
	if !v.OK {
		return fmt.Errorf("verification failed: %s", strings.Join(errs, "; "))
	}
	list, err := r.c.List(r.ctx)
	if err != nil {
		return err
	}
	var left []string
	for _, sc := range list {
		for _, p := range sc.CIDRs {
			for _, f := range r.from {
				if f.Overlaps(p) {
					left = append(left, fmt.Sprintf("%s %s (%s)", sc.Name, prefixes(sc.CIDRs), sc.State()))
				}
			}
		}
	}
	if len(left) > 0 {
		hint := "rerun to wait longer"
		if !r.o.includeLB {
			hint += ", or with --include-loadbalancers if LoadBalancer Services hold it"
		}
		return fmt.Errorf("the old range is still held: %s; %s", strings.Join(left, ", "), hint)
	}
	sr.Details = append(sr.Details, fmt.Sprintf("verified: %d Service(s) with a ClusterIP, all in %s; no ServiceCIDR left in %s", v.Services, prefixes(r.to), prefixes(r.from)))
	return nil
}

// waitKubernetesService waits until default/kubernetes exists at the first
// address of each new range.
func (r *runbook) waitKubernetesService() (string, error) {
	var want []netip.Addr
	for _, p := range r.to {
		a, err := cidr.NthAddr(p, 1)
		if err != nil {
			return "", err
		}
		want = append(want, a)
	}
	ns, name, _ := strings.Cut(servicecidr.KubernetesService, "/")
	deadline := time.Now().Add(r.o.readyTimeout)
	last := "absent"
	for {
		s, err := r.kube.CoreV1().Services(ns).Get(r.ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			got := servicecidr.ClusterIPs(s)
			if slices.Equal(got, want) {
				return fmt.Sprintf("%s is at %s", servicecidr.KubernetesService, addrList(want)), nil
			}
			last = "at " + addrList(got)
		case !apierrors.IsNotFound(err):
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s is %s, not at %s, after %s: every kube-apiserver must run with --service-cluster-ip-range=%s; rerun to check again",
				servicecidr.KubernetesService, last, addrList(want), r.o.readyTimeout, prefixes(r.to))
		}
		select {
		case <-r.ctx.Done():
			return "", r.ctx.Err()
		case <-time.After(r.o.poll):
		}
	}
}

// --- output ---

func (r *runbook) printText() {
	w := r.stdout
	switch r.mode {
	case "plan":
		fmt.Fprintf(w, "runbook: move the Service range %s -> %s (plan only; run with --journal DIR --apply)\n", prefixes(r.from), prefixes(r.to))
	case "server-dry-run":
		fmt.Fprintf(w, "runbook: move the Service range %s -> %s (server dry run: nothing stored)\n", prefixes(r.from), prefixes(r.to))
	default:
		fmt.Fprintf(w, "runbook: move the Service range %s -> %s (journal %s)\n", prefixes(r.from), prefixes(r.to), r.o.journalDir)
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
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

func prefixStrings(ps []netip.Prefix) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}

func prefixes(ps []netip.Prefix) string { return strings.Join(prefixStrings(ps), ",") }

func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
