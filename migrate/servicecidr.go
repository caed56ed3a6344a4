package migrate

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// The steps of the ServiceCIDR migration, in order. They are the journal
// keys (step/<name>).
const (
	ServiceCIDRStepPreflight = "preflight"
	ServiceCIDRStepAdd       = "add-servicecidr"
	ServiceCIDRStepMove      = "move-services"
	ServiceCIDRStepNodes     = "node-config"
	ServiceCIDRStepFlags     = "control-plane-flags"
	ServiceCIDRStepRetire    = "retire-old-range"
)

// ReasonServiceCIDRInconsistent is the Warning event kube-apiserver records
// on the default ServiceCIDR when its --service-cluster-ip-range differs
// from it; the control-plane-flags step takes it as proof of the restart.
const ReasonServiceCIDRInconsistent = "KubernetesDefaultServiceCIDRInconsistent"

// Journal keys of the ServiceCIDR migration.
const (
	keySCPlan      = "servicecidr-plan"
	keyKubeadmPlan = "kubeadmcfg-plan"
)

// ServiceCIDROptions asks for a move of the cluster's Service range (story
// 3: 100.64.0.0/13, which collides with Tailscale, to 172.24.0.0/15). Errors
// name the options by the flags of examples/migrate-servicecidr (--to,
// --from, ...).
type ServiceCIDROptions struct {
	// Client reaches the cluster; its Kube() serves the rest. Required.
	Client *servicecidr.Client
	// To is the new Service range, one prefix per family. Required.
	To []netip.Prefix
	// From is the range in use. Default: the journal's record, else the
	// default ServiceCIDR "kubernetes".
	From []netip.Prefix
	// IncludeLoadBalancers also moves type=LoadBalancer Services (their
	// external address may change).
	IncludeLoadBalancers bool
	// Manifests is a directory holding kube-apiserver.yaml and
	// kube-controller-manager.yaml to render the flag edits from (read only);
	// Out, with Manifests, is where the rewritten manifests are written.
	Manifests, Out string
	// Continue says the operator restarted the control plane with the new
	// flag: the control-plane-flags step goes on without observing it.
	Continue bool
	// DrainTimeout bounds the wait for the old ServiceCIDR to drain (default
	// 2m); ReadyTimeout the waits for a ServiceCIDR to become Ready and for
	// default/kubernetes to be recreated (default 2m); PollInterval is their
	// period (default 1s).
	DrainTimeout, ReadyTimeout, PollInterval time.Duration
	// Events, if set, receives the Service moves as they happen.
	Events func(servicecidr.Event)
}

// ServiceCIDRIntent is what a ServiceCIDR migration records in its journal:
// a rerun must ask for the same move.
type ServiceCIDRIntent struct {
	From      []netip.Prefix `json:"from"`
	To        []netip.Prefix `json:"to"`
	IncludeLB bool           `json:"includeLoadBalancers"`
}

// scPlanRecord keeps what later steps need of the Service move plan, which
// a rerun cannot recompute once the Services have moved.
type scPlanRecord struct {
	DNS           *servicecidr.AddressChange `json:"dns,omitempty"`
	Manual        []servicecidr.ManualStep   `json:"manual"`
	PodsToRestart []string                   `json:"podsToRestart,omitempty"`
	Kubernetes    *servicecidr.Move          `json:"kubernetes,omitempty"`
}

// ServiceCIDRMigration moves the Service range in six steps:
//
//  1. preflight: the new range is valid, large enough for kube-apiserver's
//     flag and free of conflicts; the caller may do everything (checked in
//     Prepare, before the first write, and reported here).
//  2. add-servicecidr: create the ServiceCIDR for the new range, wait until Ready.
//  3. move-services: recreate every Service of the old range in the new one,
//     kube-dns first at the same offset (servicecidr Recover, Plan, Apply,
//     with its own crash-safe journal below the run's).
//  4. node-config: kubelet-config clusterDNS and kubeadm-config
//     serviceSubnet through kubeadmcfg; the kubelet steps left to a person.
//  5. control-plane-flags: the --service-cluster-ip-range edits of
//     kube-apiserver and kube-controller-manager, done by an operator: the
//     step pauses until it observes them through the API (mirror pods, or
//     kube-apiserver's ReasonServiceCIDRInconsistent event), or Continue.
//  6. retire-old-range: delete the old ServiceCIDR, let kube-apiserver
//     recreate default/kubernetes in the new range, verify the end state.
type ServiceCIDRMigration struct {
	o ServiceCIDROptions

	mode     Mode
	env      *Env
	j        Journal
	from, to []netip.Prefix
	plan     *scPlanRecord
}

// ServiceCIDR returns the migration for o, checking the options that need
// no cluster.
func ServiceCIDR(o ServiceCIDROptions) (*ServiceCIDRMigration, error) {
	if o.Client == nil {
		return nil, inputf("ServiceCIDROptions.Client is required")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.DrainTimeout, 2 * time.Minute}, {&o.ReadyTimeout, 2 * time.Minute}, {&o.PollInterval, time.Second}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return &ServiceCIDRMigration{o: o}, nil
}

// Validate checks the options that need no cluster (all but Client).
func (o ServiceCIDROptions) Validate() error {
	if len(o.To) == 0 {
		return inputf("--to is required: the new Service range, e.g. --to 172.24.0.0/15")
	}
	if err := checkManifestDirs(o.Manifests, o.Out); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"drain-timeout", o.DrainTimeout}, {"ready-timeout", o.ReadyTimeout}, {"poll-interval", o.PollInterval}} {
		if d.v < 0 {
			return inputf("--%s %s: must not be negative", d.name, d.v)
		}
	}
	return nil
}

// Kind implements Composition.
func (m *ServiceCIDRMigration) Kind() string { return "servicecidr" }

// LockScopes are the Leases a run holds: the Service CIDR move's and
// kubeadm's.
func (m *ServiceCIDRMigration) LockScopes() []string {
	return []string{servicecidr.LockScope, kubeadmcfg.LockScope}
}

// From is the range in use, as the last Prepare resolved it.
func (m *ServiceCIDRMigration) From() []netip.Prefix { return m.from }

// To is the new range.
func (m *ServiceCIDRMigration) To() []netip.Prefix { return m.to }

func (m *ServiceCIDRMigration) kube() kubernetes.Interface { return m.o.Client.Kube() }

// Prepare implements Composition: it resolves From (the journal, the
// option or the default ServiceCIDR) and checks it against To. The
// read-only preflight step then plans the whole Service move, validates the
// new range against the cluster, checks the manifests and the caller's
// permissions; in ModeApply it first brings back, at its journaled address,
// a Service an interrupted run of the same journal deleted and did not
// recreate (Plan refuses to plan around an absent Service).
func (m *ServiceCIDRMigration) Prepare(ctx context.Context, env *Env) (*Prepared, error) {
	m.mode, m.j, m.plan, m.env = env.Mode, env.Journal, nil, env
	m.to = m.o.To
	from := m.o.From
	if m.j != nil {
		var st ServiceCIDRIntent
		found, err := m.j.Get(IntentKey, &st)
		if err != nil {
			return nil, err
		}
		if found {
			if !slices.Equal(st.To, m.to) || (from != nil && !slices.Equal(st.From, from)) {
				return nil, inputf("--journal %s records a move from %s to %s; rerun with those ranges or use another journal", m.j.Dir(), prefixes(st.From), prefixes(st.To))
			}
			from = st.From
		}
		var pr scPlanRecord
		if ok, err := m.j.Get(keySCPlan, &pr); err != nil {
			return nil, err
		} else if ok {
			m.plan = &pr
		}
	}
	if from == nil {
		sc, err := m.o.Client.Get(ctx, servicecidr.DefaultServiceCIDRName)
		if apierrors.IsNotFound(err) {
			return nil, inputf("--from not given and there is no default ServiceCIDR %q to take it from; give --from, the Service range in use", servicecidr.DefaultServiceCIDRName)
		}
		if err != nil {
			return nil, fmt.Errorf("--from not given and the default ServiceCIDR %q cannot be read (%w); give --from", servicecidr.DefaultServiceCIDRName, err)
		}
		from = sc.CIDRs
	}
	m.from = from
	for _, f := range m.from {
		for _, t := range m.to {
			if f.Overlaps(t) {
				return nil, inputf("--to %s overlaps --from %s: the new range must be disjoint from the old one", t, f)
			}
		}
	}
	step := func(name, title string, do func(context.Context, *Env, *StepReport) error) Step {
		return StepFunc{StepName: name, StepTitle: title, DoFunc: do}
	}
	return &Prepared{
		Intent: ServiceCIDRIntent{From: m.from, To: m.to, IncludeLB: m.o.IncludeLoadBalancers},
		Steps: []Step{
			StepFunc{StepName: ServiceCIDRStepPreflight, StepTitle: "check the new range and permissions", DoFunc: m.preflight, Check: true},
			StepFunc{StepName: ServiceCIDRStepAdd, StepTitle: "add the ServiceCIDR for the new range", DoFunc: m.addServiceCIDR, DoneFunc: m.serviceCIDRReady},
			step(ServiceCIDRStepMove, "move the Services (DNS first)", m.moveServices),
			step(ServiceCIDRStepNodes, "kubelet clusterDNS, kubeadm ConfigMaps, certificates", m.nodeConfig),
			step(ServiceCIDRStepFlags, "kube-apiserver and kube-controller-manager --service-cluster-ip-range (operator)", m.controlPlaneFlags),
			step(ServiceCIDRStepRetire, "retire the old range, recreate default/kubernetes, verify", m.retire),
		},
	}, nil
}

// serviceCIDRReady is the add step's read-only check: a ServiceCIDR holding
// exactly the new range is Ready.
func (m *ServiceCIDRMigration) serviceCIDRReady(ctx context.Context, _ *Env) (bool, string, error) {
	list, err := m.o.Client.List(ctx)
	if err != nil {
		return false, "", err
	}
	for _, sc := range list {
		if slices.Equal(sc.CIDRs, m.to) && sc.IsReady() {
			return true, fmt.Sprintf("ServiceCIDR %s holds %s, %s", sc.Name, prefixes(m.to), sc.State()), nil
		}
	}
	return false, "", nil
}

// --- step 1: preflight ---

func (m *ServiceCIDRMigration) preflight(ctx context.Context, env *Env, sr *StepReport) error {
	// The whole move is planned now, before step 2 writes anything: Plan
	// refuses a --from that is not the range in use, a target name taken by
	// another range, a range too small, ...
	po := m.planOptions()
	if m.mode == ModeApply {
		// A Service that an interrupted run deleted and did not recreate is
		// brought back first, at its journaled address: it is absent now,
		// and Plan refuses to plan around it.
		ao := m.applyOptions(servicecidr.DryRunNone)
		if _, err := m.o.Client.Recover(ctx, ao); err != nil {
			return err
		}
		po.JournalDir = ao.JournalDir
	}
	// Plan validates the new range against the cluster: the range in use,
	// the other ServiceCIDRs, every node's podCIDRs and addresses.
	p, err := m.o.Client.Plan(ctx, po)
	if err != nil {
		return err
	}
	for _, cp := range p.Capacity {
		sr.Details = append(sr.Details, fmt.Sprintf("%s: %s usable ClusterIPs, kubernetes Service %s, DNS %s", cp.CIDR, cp.UsableIPs, cp.KubernetesIP, cp.DNSIP))
	}
	sr.Details = append(sr.Details, fmt.Sprintf("ServiceCIDR API %s on Kubernetes %s; moving %s -> %s", m.o.Client.APIVersion().GroupVersion(), m.o.Client.Server().GitVersion, prefixes(m.from), prefixes(m.to)))
	if err := m.checkManifests(); err != nil {
		return err
	}
	if err := m.kubeadmEdits().preflight(ctx, m.kube(), env); err != nil {
		return err
	}
	checks := m.accessChecks()
	if err := access.Preflight(ctx, m.kube(), checks); err != nil {
		if m.mode == ModePlan {
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
func (m *ServiceCIDRMigration) checkManifests() error {
	if m.o.Manifests == "" {
		return nil
	}
	changes := []kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagServiceClusterIPRange, Value: prefixes(m.to)}}
	found := 0
	for _, name := range []string{kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest} {
		path := filepath.Join(m.o.Manifests, name)
		mf, err := kubeadmcfg.ReadManifestFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return inputf("--manifests %s: %s: %s", m.o.Manifests, name, oneLine(err.Error()))
		}
		if err := mf.Apply(changes); err != nil {
			return inputf("--manifests %s: %s: %s", m.o.Manifests, name, oneLine(err.Error()))
		}
		found++
	}
	if found == 0 {
		return inputf("--manifests %s: holds neither %s nor %s; give the directory of the static-pod manifests", m.o.Manifests, kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest)
	}
	return nil
}

func (m *ServiceCIDRMigration) accessChecks() []access.Check {
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

func (m *ServiceCIDRMigration) addServiceCIDR(ctx context.Context, _ *Env, sr *StepReport) error {
	list, err := m.o.Client.List(ctx)
	if err != nil {
		return err
	}
	for _, sc := range list {
		if slices.Equal(sc.CIDRs, m.to) && !sc.Terminating() {
			if m.mode != ModeApply {
				sr.Details = append(sr.Details, fmt.Sprintf("ServiceCIDR %s already holds %s (%s)", sc.Name, prefixes(m.to), sc.State()))
				return nil
			}
			sc, err := m.o.Client.WaitReady(ctx, sc.Name, servicecidr.WaitOptions{Timeout: m.o.ReadyTimeout, Interval: m.o.PollInterval})
			if err != nil {
				return err
			}
			sr.Details = append(sr.Details, fmt.Sprintf("ServiceCIDR %s holds %s, %s", sc.Name, prefixes(m.to), sc.State()))
			return nil
		}
	}
	name := servicecidr.TargetName(m.to)
	switch m.mode {
	case "plan":
		sr.Details = append(sr.Details, fmt.Sprintf("would create ServiceCIDR %s %s and wait until it is Ready", name, prefixes(m.to)))
		return nil
	case "server-dry-run":
		if _, err := m.o.Client.Create(ctx, name, m.to, servicecidr.WriteOptions{DryRun: true}); err != nil {
			return err
		}
		sr.Details = append(sr.Details, fmt.Sprintf("server accepted ServiceCIDR %s %s (dry run, not stored)", name, prefixes(m.to)))
		return nil
	}
	if _, err := m.o.Client.Create(ctx, name, m.to, servicecidr.WriteOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	sc, err := m.o.Client.WaitReady(ctx, name, servicecidr.WaitOptions{Timeout: m.o.ReadyTimeout, Interval: m.o.PollInterval})
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, fmt.Sprintf("created ServiceCIDR %s %s, %s", sc.Name, prefixes(sc.CIDRs), sc.State()))
	return nil
}

// --- step 3: move the Services ---

func (m *ServiceCIDRMigration) applyOptions(dry servicecidr.DryRun) servicecidr.ApplyOptions {
	ao := servicecidr.ApplyOptions{DryRun: dry, ReadyTimeout: m.o.ReadyTimeout, PollInterval: m.o.PollInterval}
	if m.j != nil && dry == servicecidr.DryRunNone {
		ao.JournalDir = filepath.Join(m.j.Dir(), "servicecidr")
		ao.Lock = m.env.Lock
		if cs := m.env.ClusterJournal("servicecidr"); cs != nil {
			ao.ClusterJournal = &servicecidr.ClusterJournal{Namespace: cs.Namespace, Name: cs.Name, Keep: cs.Keep}
		}
	}
	ao.Progress = m.o.Events
	return ao
}

func (m *ServiceCIDRMigration) planOptions() servicecidr.PlanOptions {
	return servicecidr.PlanOptions{From: m.from, To: m.to, IncludeLoadBalancers: m.o.IncludeLoadBalancers}
}

func (m *ServiceCIDRMigration) moveServices(ctx context.Context, _ *Env, sr *StepReport) error {
	dry := map[Mode]servicecidr.DryRun{ModePlan: servicecidr.DryRunClient, ModeServerDryRun: servicecidr.DryRunServer}[m.mode]
	ao := m.applyOptions(dry)
	if m.mode == ModeApply {
		// A Service an interrupted run left deleted must be back, at its
		// journaled address, before planning again.
		if _, err := m.o.Client.Recover(ctx, ao); err != nil {
			return err
		}
	}
	po := m.planOptions()
	if m.mode == ModeApply {
		po.JournalDir = ao.JournalDir // keeps a default/kubernetes the run deleted in the plan until it is back
	}
	p, err := m.o.Client.Plan(ctx, po)
	if err != nil {
		return err
	}
	if m.plan == nil {
		m.plan = &scPlanRecord{DNS: p.DNS, Manual: p.Manual, PodsToRestart: p.PodsToRestart, Kubernetes: p.Kubernetes}
		if m.mode == ModeApply {
			if err := m.j.Put(keySCPlan, m.plan); err != nil {
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
	if m.mode == ModePlan {
		sr.Details = append(sr.Details, fmt.Sprintf("would move %d Service(s); the old ServiceCIDR stays until step 6", len(p.Moves)))
		return nil
	}
	if m.mode == ModeServerDryRun && len(p.Moves) > 0 && !p.Target.Exists {
		// Step 2 was a dry run: the API server would refuse every new
		// address, so only the deletes can be checked.
		sr.Details = append(sr.Details, "the new ServiceCIDR does not exist yet (step 2 was a dry run): Service creates cannot be checked by the server")
	}
	res, err := m.o.Client.Apply(ctx, p, ao)
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

func (m *ServiceCIDRMigration) nodeConfig(ctx context.Context, _ *Env, sr *StepReport) error {
	if m.plan == nil {
		// Planning (no journal) after the Services moved: nothing recorded.
		p, err := m.o.Client.Plan(ctx, m.planOptions())
		if err != nil {
			return err
		}
		m.plan = &scPlanRecord{DNS: p.DNS, Manual: p.Manual, PodsToRestart: p.PodsToRestart, Kubernetes: p.Kubernetes}
	}
	var dnsNew []string
	if d := m.plan.DNS; d != nil {
		for _, a := range d.NewIPs {
			dnsNew = append(dnsNew, a.String())
		}
	}
	snap, err := kubeadmcfg.Read(ctx, m.kube(), kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	for _, m := range m.plan.Manual {
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
	if n := len(m.plan.PodsToRestart); n > 0 {
		show := m.plan.PodsToRestart[:min(n, 10)]
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
	edits := m.kubeadmEdits()
	edits.check = func(kp *kubeadmcfg.Plan, sr *StepReport) {
		if dnsNew != nil && kp.Target.ClusterDNS != nil && !slices.Equal(dnsNew, kp.Target.ClusterDNS) {
			sr.Addf("warning: kubelet-config clusterDNS would become %v but the DNS Service moved to %v", kp.Target.ClusterDNS, dnsNew)
		}
	}
	return edits.run(ctx, m.kube(), snap, m.env, sr)
}

// kubeadmEdits are the kubeadm ConfigMap edits of the node step, and of its
// check in the preflight.
func (m *ServiceCIDRMigration) kubeadmEdits() kubeadmEdits {
	return kubeadmEdits{key: keyKubeadmPlan, intent: kubeadmcfg.Intent{ServiceSubnet: prefixes(m.to)},
		ids: []string{kubeadmcfg.EditKubeadmConfig, kubeadmcfg.EditKubeletConfig}}
}

func manualLine(m servicecidr.ManualStep) string {
	change := ""
	if m.Old != "" || m.New != "" {
		change = fmt.Sprintf(" (%s -> %s)", m.Old, m.New)
	}
	return fmt.Sprintf("%s: %s%s", m.Component, m.Action, change)
}

// --- step 5: control-plane flags (operator) ---

func (m *ServiceCIDRMigration) controlPlaneFlags(ctx context.Context, _ *Env, sr *StepReport) error {
	flagValue := prefixes(m.to)
	changes := []kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagServiceClusterIPRange, Value: flagValue}}
	var instr []string
	if m.o.Manifests != "" {
		for _, name := range []string{kubeadmcfg.APIServerManifest, kubeadmcfg.ControllerManagerManifest} {
			in, err := renderManifest(m.o.Manifests, m.o.Out, name, changes, sr)
			if err != nil {
				return err
			}
			if in != "" {
				instr = append(instr, in)
			}
		}
	}
	if len(instr) == 0 {
		instr = append(instr, fmt.Sprintf("on every control-plane node, set --service-cluster-ip-range=%s in %s and %s (the kubelet restarts both)",
			flagValue, filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.APIServerManifest), filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.ControllerManagerManifest)))
	}
	if m.plan != nil {
		for _, ms := range m.plan.Manual {
			if ms.Component == "kube-apiserver" || ms.Component == "kube-controller-manager" {
				if !strings.Contains(ms.Action, "service-cluster-ip-range") {
					instr = append(instr, manualLine(ms))
				}
			}
		}
	}
	instr = append(instr, "restart kube-apiserver before kube-controller-manager; every kube-apiserver must run with the new range before step 6")
	return operatorGate{step: ServiceCIDRStepFlags, instr: instr, observe: m.observeFlags, cont: m.o.Continue,
		resume: "rerun the same command: it goes on once it sees the new flag (kube-apiserver mirror pods, or kube-apiserver's " + ReasonServiceCIDRInconsistent + " event)",
	}.run(ctx, m.mode, sr)
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
func (m *ServiceCIDRMigration) observeFlags(ctx context.Context) (bool, string, error) {
	want := prefixes(m.to)
	if sc, err := m.o.Client.Get(ctx, servicecidr.DefaultServiceCIDRName); err == nil && slices.Equal(sc.CIDRs, m.to) {
		return true, fmt.Sprintf("ServiceCIDR %s holds %s", sc.Name, want), nil
	} else if err != nil && !apierrors.IsNotFound(err) {
		return false, "", err
	}
	var mirrors, stale []string
	for _, comp := range []string{"kube-apiserver", "kube-controller-manager"} {
		pods, err := m.kube().CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=" + comp})
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
	events, err := m.kube().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "", fmt.Errorf("listing events: %w", err)
	}
	wantMsg := "configurations " + fmt.Sprint(prefixStrings(m.to))
	for _, e := range events.Items {
		if e.Reason == ReasonServiceCIDRInconsistent && e.InvolvedObject.Name == servicecidr.DefaultServiceCIDRName && strings.HasSuffix(strings.TrimSpace(e.Message), wantMsg) {
			return true, "kube-apiserver reports: " + e.Message, nil
		}
	}
	return false, fmt.Sprintf("no kube-apiserver is seen running with --service-cluster-ip-range=%s (no mirror pods in kube-system, no %s event on ServiceCIDR %s)", want, ReasonServiceCIDRInconsistent, servicecidr.DefaultServiceCIDRName), nil
}

// --- step 6: retire the old range ---

func (m *ServiceCIDRMigration) retire(ctx context.Context, _ *Env, sr *StepReport) error {
	if m.mode != ModeApply {
		sr.Details = append(sr.Details,
			fmt.Sprintf("mark the ServiceCIDR(s) inside %s for deletion; move any Service created there since step 3", prefixes(m.from)),
			"delete default/kubernetes: kube-apiserver recreates it at the first address of "+prefixes(m.to),
			fmt.Sprintf("wait up to %s for the old range to drain, then verify every ClusterIP lies in %s", m.o.DrainTimeout, prefixes(m.to)))
		if !m.o.IncludeLoadBalancers {
			sr.Details = append(sr.Details, "LoadBalancer Services left in the old range keep it Terminating: rerun with --include-loadbalancers once recreating them is acceptable")
		}
		if m.mode == ModeServerDryRun {
			sr.Status = StatusNotRun
			sr.Details = append(sr.Details, "not dry-run: it needs the operator step first")
		}
		return nil
	}
	ao := m.applyOptions(servicecidr.DryRunNone)
	ao.DeleteOld, ao.DeleteKubernetesService, ao.DrainTimeout = true, true, m.o.DrainTimeout
	if _, err := m.o.Client.Recover(ctx, ao); err != nil {
		return err
	}
	p, err := m.o.Client.Plan(ctx, m.planOptions())
	if err != nil {
		return err
	}
	res, err := m.o.Client.Apply(ctx, p, ao)
	if res != nil {
		if len(res.Moved) > 0 {
			sr.Details = append(sr.Details, fmt.Sprintf("moved %d Service(s) still in the old range", len(res.Moved)))
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
	kube, err := m.waitKubernetesService(ctx)
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, kube)
	vo := servicecidr.VerifyOptions{To: m.to, From: m.from, IncludeLoadBalancers: m.o.IncludeLoadBalancers}
	if m.plan != nil && m.plan.DNS != nil {
		vo.DNSIPs = m.plan.DNS.NewIPs
	}
	v, err := m.o.Client.Verify(ctx, vo)
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
	list, err := m.o.Client.List(ctx)
	if err != nil {
		return err
	}
	var left []string
	for _, sc := range list {
		if slices.ContainsFunc(sc.CIDRs, func(p netip.Prefix) bool { return slices.ContainsFunc(m.from, p.Overlaps) }) {
			left = append(left, fmt.Sprintf("%s %s (%s)", sc.Name, prefixes(sc.CIDRs), sc.State()))
		}
	}
	if len(left) > 0 {
		hint := "rerun to wait longer"
		if !m.o.IncludeLoadBalancers {
			hint += ", or with --include-loadbalancers if LoadBalancer Services hold it"
		}
		return fmt.Errorf("the old range is still held: %s; %s", strings.Join(left, ", "), hint)
	}
	sr.Details = append(sr.Details, fmt.Sprintf("verified: %d Service(s) with a ClusterIP, all in %s; no ServiceCIDR left in %s", v.Services, prefixes(m.to), prefixes(m.from)))
	return nil
}

// waitKubernetesService waits until default/kubernetes exists at the first
// address of each new range.
func (m *ServiceCIDRMigration) waitKubernetesService(ctx context.Context) (string, error) {
	var want []netip.Addr
	for _, p := range m.to {
		a, err := cidr.NthAddr(p, 1)
		if err != nil {
			return "", err
		}
		want = append(want, a)
	}
	ns, name, _ := strings.Cut(servicecidr.KubernetesService, "/")
	deadline := time.Now().Add(m.o.ReadyTimeout)
	last := "absent"
	for {
		s, err := m.kube().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
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
				servicecidr.KubernetesService, last, addrList(want), m.o.ReadyTimeout, prefixes(m.to))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(m.o.PollInterval):
		}
	}
}

// EventLine renders a servicecidr progress event as one line.
func EventLine(e servicecidr.Event) string {
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
