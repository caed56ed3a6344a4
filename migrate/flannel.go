package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	"github.com/cidrshift/cidrshift/internal/access"
	"github.com/cidrshift/cidrshift/internal/lease"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/nodenet"
)

// The steps of the FlannelPodCIDR migration, in order. They are the journal
// keys (step/<name>).
const (
	FlannelStepFix               = "fix-podcidrs"
	FlannelStepNetwork           = "set-network"
	FlannelStepControllerManager = "controller-manager"
	FlannelStepRewrite           = "rewrite-nodes"
	FlannelStepCleanup           = "host-cleanup"
)

// Journal keys of the FlannelPodCIDR migration besides IntentKey and the
// steps: the nodecidr plans of the fix-podcidrs and rewrite-nodes steps,
// stored before their first write so a rerun carries out the same moves
// (and host-cleanup knows which nodes moved). A rerun checks them again:
// the journal is untrusted input.
const (
	FlannelFixPlanKey    = "fix-plan"
	FlannelRebasePlanKey = "rebase-plan"
)

// FlannelRestartedAtAnnotation is the pod-template annotation the
// host-cleanup step sets on flannel's DaemonSets to roll them, as `kubectl
// rollout restart` does.
const FlannelRestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// flKeyNetConf keeps net-conf.json as it was before set-network rewrote it.
const flKeyNetConf = "netconf-before"

// FlannelPodCIDROptions asks for a wider flannel Network in a cluster whose
// flanneld runs in kube subnet manager mode (story 2 of FACTS.md: e.g.
// 10.244.0.0/16 to 10.240.0.0/12). Errors name the options by the flags of
// examples/migrate-flannel-podcidr (--network, --from, ...).
type FlannelPodCIDROptions struct {
	// Kube reaches the cluster. Required.
	Kube kubernetes.Interface
	// Network is the new flannel Network and kube-controller-manager
	// --cluster-cidr. IPv4; it must strictly contain the Network in use, so
	// no node's podCIDR is outside it at any time. Required. In a
	// dual-stack cluster (flannel's IPv6Network, nodes with an IPv6
	// podCIDR) the IPv6 family stays: --cluster-cidr and kubeadm's
	// podSubnet keep kube-controller-manager's IPv6 range in its place, and
	// every node keeps its IPv6 podCIDR.
	Network netip.Prefix
	// From is the Network in use. Default: the journal's record, else
	// net-conf.json's Network. When given, it must be what net-conf.json
	// holds (or Network, once set-network has run).
	From netip.Prefix
	// RewriteNodes also renumbers every node's podCIDR from the old Network
	// into NodeRange, keeping each subnet's offset. NodeRange is required
	// with it and refused without it: it lies inside Network, is disjoint
	// from the old Network and at least as large.
	RewriteNodes bool
	NodeRange    netip.Prefix
	// Namespace and ConfigMap name the ConfigMap holding net-conf.json
	// (flannel.DefaultNetConfNamespace and flannel.DefaultNetConfName in
	// kube-flannel.yml); flannel's pods and DaemonSets live in Namespace.
	// Required.
	Namespace, ConfigMap string
	// FlannelSelector is the label selector of flannel's pods ("app=flannel"
	// in kube-flannel.yml): the node moves restart the selected pods on each
	// moved node, and host-cleanup rolls the DaemonSets whose pods it
	// selects. Required; a selector that selects every pod is refused.
	FlannelSelector string
	// Manifests is a directory holding kube-controller-manager.yaml to render
	// the --cluster-cidr edit from (read only); Out, with Manifests, is where
	// the rewritten manifest is written.
	Manifests, Out string
	// Continue says the operator restarted kube-controller-manager with the
	// new --cluster-cidr: the controller-manager step goes on without
	// observing it.
	Continue bool
	// NodeMask is the node subnet size the fix step allocates when
	// kube-controller-manager's flags cannot be discovered (default
	// cidr.DefaultNodeMaskIPv4).
	NodeMask int
	// HealthTimeout bounds the wait for a moved node to be Ready with its
	// pods running (default 2m), and in MakeBeforeBreak the wait for one old
	// pod's eviction and its end; PollInterval is the period of the waits
	// (default 1s).
	HealthTimeout, PollInterval time.Duration
	// MakeBeforeBreak moves each node without cutting off its pods: after
	// the node has its new podCIDR, every node's host agent sets up the
	// transition (the moved node keeps answering for its old subnet, every
	// other node routes it through the moved node's new VTEP or address),
	// the pods holding old addresses are replaced one at a time through
	// the Eviction API (PodDisruptionBudgets respected), and once none is
	// left the transition is torn down. It needs host agents on every node
	// (Runner.Agents); see the doc of FlannelPodCIDRMigration.
	MakeBeforeBreak bool
	// FixOnly repairs without widening (seed 001 of FACTS.md): the nodes
	// with a duplicate or missing podCIDR get a free subnet of the Network
	// in use, and their hosts follow (host agents, or the printed steps);
	// net-conf.json, --cluster-cidr and kubeadm's podSubnet stay. Network
	// may be left zero (the Network in use); when given it must be that
	// Network. From and RewriteNodes are refused with it.
	FixOnly bool
}

// FlannelPodCIDRIntent is what a FlannelPodCIDR migration records in its
// journal: a rerun must ask for the same move.
type FlannelPodCIDRIntent struct {
	From         netip.Prefix `json:"from"`
	To           netip.Prefix `json:"to"`
	RewriteNodes bool         `json:"rewriteNodes"`
	NodeRange    netip.Prefix `json:"nodeRange,omitzero"`
	// MakeBeforeBreak is the mode the nodes move in.
	MakeBeforeBreak bool `json:"makeBeforeBreak,omitempty"`
	// FixOnly: the run repairs nodes and keeps the Network (From == To).
	FixOnly bool `json:"fixOnly,omitempty"`
	// KeepIPv6, in a dual-stack cluster, is kube-controller-manager's IPv6
	// --cluster-cidr range as the first run found it (KeepIPv6First: listed
	// first; KeepIPv6Mask: its node mask): a rerun keeps it, whatever the
	// flags say by then.
	KeepIPv6      netip.Prefix `json:"keepIPv6,omitzero"`
	KeepIPv6First bool         `json:"keepIPv6First,omitempty"`
	KeepIPv6Mask  int          `json:"keepIPv6Mask,omitempty"`
}

// FlannelPodCIDRMigration widens a kube-subnet-manager flannel cluster's
// Network in five steps:
//
//  1. fix-podcidrs: nodes with a duplicate (every holder but the oldest) or
//     missing podCIDR get a free subnet of the current Network (nodecidr
//     ModeFix plan and Apply, with its crash-safe journal below the run's);
//     node by node, hooks then restart the node's flannel pod, delete its
//     controller-owned pods so they get addresses of the new subnet, and
//     wait until the node is Ready and its pods run.
//  2. set-network: rewrite only the "Network" value of net-conf.json (flannel
//     PlanNetConf and ApplyNetConf). The step is found done when
//     net-conf.json already holds the new Network.
//  3. controller-manager: the kubeadm ConfigMaps (when they exist) and the
//     --cluster-cidr edit of kube-controller-manager (rendered from Manifests
//     into Out), done by an operator: the step pauses until it observes the
//     new flag on the kube-system kube-controller-manager mirror pods, or
//     Continue.
//  4. rewrite-nodes: optional (RewriteNodes). The containing Network keeps
//     every podCIDR valid; renumbering moves the nodes into NodeRange
//     (nodecidr ModeRebase) with the same hooks.
//  5. host-cleanup: the host work of every moved node (HostPlans, printed
//     for a person), a rolling restart of flannel's DaemonSets so every
//     flanneld reads the new Network, and a final verification.
//
// With FixOnly only steps 1 and 5 act (seed 001: a duplicate podCIDR fixed
// in the Network in use); steps 2 to 4 have nothing to do.
//
// With MakeBeforeBreak the node moves of steps 1 and 4 keep each node's
// pods reachable instead of deleting them: the host agents hold the old
// subnet through a transition on every node (set up before the node's
// flannel pod restarts, and again after), the old pods are evicted one
// at a time under their PodDisruptionBudgets, and the transition is torn
// down once no pod holds an old address; a pod that cannot be evicted
// pauses the run.
//
// Prepare checks, before the first write, every input and what later steps
// need: the journal's intent and node plans, From against net-conf.json,
// every node's podCIDR inside the Network in use, the net-conf.json
// rewrite, the kubeadm ConfigMaps and the Manifests edit.
type FlannelPodCIDRMigration struct {
	o FlannelPodCIDROptions

	mode                Mode
	env                 *Env
	j                   Journal
	agents              *HostAgents
	from, to, nodeRange netip.Prefix
	nc                  *flannel.NetConf
	fixPlan, rebasePlan *nodecidr.Plan
	// keep is the IPv6 family of a dual-stack cluster, which the move of
	// the IPv4 Network keeps (zero cidr in a single-stack cluster).
	keep keptFamily

	mu     sync.Mutex
	manual []string // bare pods left for a person
	notes  []string // what the make-before-break hooks did, for the step report
	// standby maps a node about to be deleted for its move to the IPv4
	// podCIDR it moves to (mbbStandby): HostWants lists it as the node's
	// NextPodCIDR in the other nodes' wants until the node holds it.
	standby map[string]netip.Prefix

	// pubMu orders the publications to the agents: wants are computed
	// and published under it, so a want computed from an earlier reading
	// of the cluster never replaces a later one (nodes moving at once).
	pubMu sync.Mutex

	// now and after are time.Now and time.After, but in tests: the clock
	// of the eviction backoff (evict).
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}

// FlannelPodCIDR returns the migration for o, checking the options that
// need no cluster.
func FlannelPodCIDR(o FlannelPodCIDROptions) (*FlannelPodCIDRMigration, error) {
	if o.Kube == nil {
		return nil, inputf("FlannelPodCIDROptions.Kube is required")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.NodeMask == 0 {
		o.NodeMask = cidr.DefaultNodeMaskIPv4
	}
	if o.HealthTimeout == 0 {
		o.HealthTimeout = 2 * time.Minute
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	return &FlannelPodCIDRMigration{o: o, now: time.Now, after: time.After}, nil
}

// Validate checks the options that need no cluster (all but Kube). Zero
// NodeMask, HealthTimeout and PollInterval mean their defaults.
func (o FlannelPodCIDROptions) Validate() error {
	switch {
	case o.FixOnly && o.RewriteNodes:
		return inputf("--fix-only keeps every healthy node's podCIDR; --rewrite-nodes renumbers them: give one")
	case o.FixOnly && o.From.IsValid():
		return inputf("--from %s: --fix-only keeps the Network in use; leave --from out", o.From)
	case !o.FixOnly && !o.Network.IsValid():
		return inputf("--network is required: the new flannel Network, which must contain the current one, e.g. --network 10.240.0.0/12 (or --fix-only to repair duplicate and missing podCIDRs in the Network in use)")
	}
	for _, p := range []struct {
		flag string
		v    netip.Prefix
	}{{"--network", o.Network}, {"--from", o.From}, {"--node-range", o.NodeRange}} {
		if p.v.IsValid() && p.v != p.v.Masked() {
			return inputf("%s %s: host bits set; did you mean %s?", p.flag, p.v, p.v.Masked())
		}
	}
	if o.NodeRange.IsValid() && !o.RewriteNodes {
		return inputf("--node-range %s needs --rewrite-nodes", o.NodeRange)
	}
	if o.RewriteNodes && !o.NodeRange.IsValid() {
		return inputf("--rewrite-nodes needs --node-range: the range inside --network %s the nodes' subnets move to", o.Network)
	}
	if err := checkManifestDirs(o.Manifests, o.Out); err != nil {
		return err
	}
	if o.NodeMask < 0 || o.NodeMask > 32 {
		return inputf("--node-mask %d: want 1..32", o.NodeMask)
	}
	if o.HealthTimeout < 0 {
		return inputf("--health-timeout %s: must be positive, e.g. 2m", o.HealthTimeout)
	}
	if o.PollInterval < 0 {
		return inputf("--poll-interval %s: must be positive, e.g. 1s", o.PollInterval)
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return inputf("--namespace %q is not a namespace name: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(o.ConfigMap); len(errs) > 0 {
		return inputf("--configmap %q is not a ConfigMap name: %s", o.ConfigMap, strings.Join(errs, "; "))
	}
	// The selector picks the pods the node moves delete on each moved node
	// (host-network ones included): it must parse, and must not select
	// every pod of the namespace.
	sel, err := labels.Parse(o.FlannelSelector)
	if err != nil {
		return inputf("--flannel-selector %q: %v", o.FlannelSelector, err)
	}
	if sel.Empty() {
		return inputf("--flannel-selector %q selects every pod in namespace %s; give flannel's pod labels, e.g. app=flannel", o.FlannelSelector, o.Namespace)
	}
	if o.Out != "" {
		if st, err := os.Stat(o.Out); err == nil && !st.IsDir() {
			return inputf("--out %s: exists and is not a directory", o.Out)
		}
	}
	if o.Network.IsValid() && cidr.FamilyOf(o.Network) != cidr.IPv4 {
		return inputf("--network %s: only an IPv4 Network is supported", o.Network)
	}
	if o.RewriteNodes && !cidr.ContainsPrefix(o.Network, o.NodeRange) {
		return inputf("--node-range %s must lie inside --network %s", o.NodeRange, o.Network)
	}
	return nil
}

// Kind implements Composition.
func (m *FlannelPodCIDRMigration) Kind() string { return "flannel-podcidr" }

// LockScopes are the Leases a run holds: flannel's, the node rewrite's and
// kubeadm's.
func (m *FlannelPodCIDRMigration) LockScopes() []string {
	return []string{flannel.LockScope, nodecidr.LockScope, kubeadmcfg.LockScope}
}

// From is the Network in use, as the last Prepare resolved it.
func (m *FlannelPodCIDRMigration) From() netip.Prefix { return m.from }

// To is the new Network (with FixOnly, the one kept), as the last Prepare
// resolved it; Network before the first Prepare.
func (m *FlannelPodCIDRMigration) To() netip.Prefix {
	if m.to.IsValid() {
		return m.to
	}
	return m.o.Network
}

func (m *FlannelPodCIDRMigration) kubeOptions() flannel.KubeOptions {
	return flannel.KubeOptions{Namespace: m.o.Namespace, ConfigMap: m.o.ConfigMap}
}

// Prepare implements Composition: it checks the options against the
// journal's intent, reads net-conf.json, resolves From, checks the move and
// everything the later steps need (preflight), and reads back and checks
// the node plans an earlier run journaled. It writes nothing.
func (m *FlannelPodCIDRMigration) Prepare(ctx context.Context, env *Env) (*Prepared, error) {
	m.mode, m.j, m.agents, m.env = env.Mode, env.Journal, env.Agents, env
	m.from, m.to, m.nodeRange, m.nc, m.fixPlan, m.rebasePlan = netip.Prefix{}, m.o.Network, netip.Prefix{}, nil, nil, nil
	if m.o.RewriteNodes {
		m.nodeRange = m.o.NodeRange
	}
	from := m.o.From
	haveIntent := false
	m.keep = keptFamily{}
	if m.j != nil {
		var st FlannelPodCIDRIntent
		var err error
		if haveIntent, err = m.j.Get(IntentKey, &st); err != nil {
			return nil, err
		}
		if haveIntent {
			if m.o.FixOnly && st.FixOnly && !m.to.IsValid() {
				m.to = st.To // --network left out: the Network the run kept
			}
			if st.To != m.to || (from.IsValid() && st.From != from) || st.RewriteNodes != m.o.RewriteNodes || st.NodeRange != m.nodeRange || st.MakeBeforeBreak != m.o.MakeBeforeBreak || st.FixOnly != m.o.FixOnly {
				return nil, inputf("--journal %s records a move %s -> %s (rewrite-nodes %t, node-range %s, make-before-break %t, fix-only %t); rerun with those flags or use another journal",
					m.j.Dir(), st.From, st.To, st.RewriteNodes, flPrefixOrNone(st.NodeRange), st.MakeBeforeBreak, st.FixOnly)
			}
			from = st.From
			m.keep = keptFamily{cidr: st.KeepIPv6, first: st.KeepIPv6First, mask: st.KeepIPv6Mask}
		}
	}
	nc, err := flannel.ReadNetConf(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		if errors.Is(err, flannel.ErrNotFound) {
			return nil, inputf("--namespace %s --configmap %s: no such ConfigMap; give the namespace and name of flannel's net-conf.json", m.o.Namespace, m.o.ConfigMap)
		}
		return nil, fmt.Errorf("reading net-conf.json: %w", err)
	}
	if nc.Config == nil {
		return nil, fmt.Errorf("net-conf.json in ConfigMap %s/%s does not parse (%s): fix it first", nc.Namespace, nc.Name, nc.Error)
	}
	m.nc = nc
	if m.o.FixOnly {
		if err := m.fixOnlyNetwork(nc, haveIntent); err != nil {
			return nil, err
		}
		from = m.to
	}
	if !from.IsValid() {
		from = nc.Config.Network
		if from == m.to {
			return nil, inputf("--network %s: net-conf.json already holds that Network; nothing to widen (a run that already changed it resumes from its --journal, or with --from OLD)", m.to)
		}
	}
	if !from.IsValid() {
		return nil, inputf("net-conf.json has no IPv4 Network; nothing to widen")
	}
	// From (or the journal's move) must be what the cluster has: the Network
	// net-conf.json holds, or the new one once set-network has run.
	if cur := nc.Config.Network; cur != from && cur != m.to {
		what := "--from " + from.String()
		if haveIntent {
			what = fmt.Sprintf("--journal %s records a move from %s", m.j.Dir(), from)
		}
		return nil, inputf("%s: net-conf.json in ConfigMap %s/%s holds Network %s; --from must be the Network in use (or the new one, after step 2)",
			what, nc.Namespace, nc.Name, flPrefixOrNone(cur))
	}
	m.from = from
	if !m.o.FixOnly && (m.from == m.to || !cidr.ContainsPrefix(m.to, m.from)) {
		return nil, inputf("--network %s must strictly contain the current Network %s, so no node's podCIDR is outside it during the move (e.g. %s)",
			m.to, m.from, flSuggest(m.from))
	}
	if m.o.RewriteNodes {
		if m.nodeRange.Bits() > m.from.Bits() {
			return nil, inputf("--node-range %s is smaller than the old Network %s: every subnet keeps its offset, so it must be at least /%d", m.nodeRange, m.from, m.from.Bits())
		}
		if m.nodeRange.Overlaps(m.from) {
			return nil, inputf("--node-range %s overlaps the old Network %s: renumbering needs a disjoint range", m.nodeRange, m.from)
		}
	}
	if err := m.preflight(ctx, env); err != nil {
		return nil, err
	}
	if err := m.mbbPreflight(ctx); err != nil {
		return nil, err
	}
	if m.j != nil {
		for _, c := range []struct {
			key string
			dst **nodecidr.Plan
		}{{FlannelFixPlanKey, &m.fixPlan}, {FlannelRebasePlanKey, &m.rebasePlan}} {
			p := &nodecidr.Plan{}
			if ok, err := m.j.Get(c.key, p); err != nil {
				return nil, fmt.Errorf("%w: --journal %s %s: %w", nodecidr.ErrInvalidPlan, m.j.Dir(), c.key, err)
			} else if ok {
				*c.dst = p
			}
		}
		if err := m.checkJournalPlans(); err != nil {
			return nil, err
		}
	}
	return &Prepared{
		Intent: FlannelPodCIDRIntent{From: m.from, To: m.to, RewriteNodes: m.o.RewriteNodes, NodeRange: m.nodeRange, MakeBeforeBreak: m.o.MakeBeforeBreak,
			FixOnly: m.o.FixOnly, KeepIPv6: m.keep.cidr, KeepIPv6First: m.keep.first, KeepIPv6Mask: m.keep.mask},
		Steps: []Step{
			StepFunc{StepName: FlannelStepFix, StepTitle: "give nodes with duplicate or missing podCIDRs a free subnet", DoFunc: m.fixPodCIDRs},
			StepFunc{StepName: FlannelStepNetwork, StepTitle: "widen net-conf.json Network", DoFunc: m.setNetwork, DoneFunc: m.networkSet},
			StepFunc{StepName: FlannelStepControllerManager, StepTitle: "kube-controller-manager --cluster-cidr (operator)", DoFunc: m.controllerManager},
			StepFunc{StepName: FlannelStepRewrite, StepTitle: "renumber node podCIDRs (optional)", DoFunc: m.rewriteNodes},
			StepFunc{StepName: FlannelStepCleanup, StepTitle: "host clean-up per moved node, restart flanneld, verify", DoFunc: m.hostCleanup, VerifyFunc: m.verify},
		},
	}, nil
}

// fixOnlyNetwork resolves the Network a FixOnly run keeps: --network (or
// the journal's) when given, else net-conf.json's; it must be the one
// net-conf.json holds.
func (m *FlannelPodCIDRMigration) fixOnlyNetwork(nc *flannel.NetConf, haveIntent bool) error {
	cur := nc.Config.Network
	if !cur.IsValid() {
		return inputf("net-conf.json in ConfigMap %s/%s has no IPv4 Network; nothing to fix in", nc.Namespace, nc.Name)
	}
	if !m.to.IsValid() {
		m.to = cur
	}
	if m.to != cur {
		what := "--network " + m.to.String()
		if haveIntent {
			what = fmt.Sprintf("--journal %s records Network %s", m.j.Dir(), m.to)
		}
		return inputf("%s: --fix-only keeps the Network in use, and net-conf.json in ConfigMap %s/%s holds %s", what, nc.Namespace, nc.Name, cur)
	}
	return nil
}

// accessChecks are the permissions of the migration's own writes, checked
// before the first write of a run: kubeadm's ConfigMaps (step 3) and the
// final roll of flannel's DaemonSets (step 5). The node steps
// (nodecidr.Apply) and net-conf.json (flannel.ApplyNetConf) check theirs
// before they write.
func (m *FlannelPodCIDRMigration) accessChecks() []access.Check {
	return []access.Check{
		{Verb: "get", Resource: "configmaps", Namespace: kubeadmcfg.Namespace},
		{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeadmConfigMap},
		{Verb: "update", Resource: "configmaps", Namespace: kubeadmcfg.Namespace, Name: kubeadmcfg.KubeProxyConfigMap},
		{Verb: "list", Group: "apps", Resource: "daemonsets", Namespace: m.o.Namespace},
		{Verb: "patch", Group: "apps", Resource: "daemonsets", Namespace: m.o.Namespace},
	}
}

// checkJournalPlans checks the node plans read back from the journal, which
// is untrusted input: each must be a valid nodecidr plan (a step with no
// new podCIDR would otherwise reach the host plans unchecked once the
// step that applies it is done), the fix plan may only give nodes subnets
// of the old Network, the rebase plan only subnets of NodeRange, each node
// once.
func (m *FlannelPodCIDRMigration) checkJournalPlans() error {
	for _, c := range []struct {
		key    string
		p      *nodecidr.Plan
		within netip.Prefix
	}{{FlannelFixPlanKey, m.fixPlan, m.from}, {FlannelRebasePlanKey, m.rebasePlan, m.nodeRange}} {
		if c.p == nil {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: --journal %s %s: %s", nodecidr.ErrInvalidPlan, m.j.Dir(), c.key, fmt.Sprintf(format, args...))
		}
		if !c.within.IsValid() {
			return bad("the journal holds a plan for a step this run does not make")
		}
		if err := c.p.Validate(); err != nil {
			return fmt.Errorf("--journal %s %s: %w", m.j.Dir(), c.key, err)
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

// preflight checks, before the first write, everything the later steps
// would otherwise find only after earlier steps changed the cluster: a run
// that writes may do what accessChecks lists, every node's podCIDR lies in
// the Network flanneld uses now, the node mask fits
// the Network, net-conf.json can be rewritten, the kubeadm ConfigMaps can be
// planned and the kube-controller-manager manifest can be edited.
func (m *FlannelPodCIDRMigration) preflight(ctx context.Context, env *Env) error {
	if m.mode != ModePlan {
		if err := access.Preflight(ctx, m.o.Kube, m.accessChecks()); err != nil {
			return err
		}
	}
	nodes, err := flannel.ReadNodes(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		return err
	}
	cur := m.nc.Config.Network
	if !m.keep.cidr.IsValid() {
		// Not recorded by an earlier run: kube-controller-manager's flags
		// as they are now (before this run asks for the new one).
		if d, err := nodecidr.DiscoverControllerManagerFlags(ctx, m.o.Kube); err == nil {
			m.keep = keptFamilyOf(d.Flags, m.to)
		} else if !errors.Is(err, nodecidr.ErrNotDiscovered) {
			return err
		}
	}
	var outside []string
	for _, n := range nodes {
		for _, p := range n.PodCIDRs {
			if p.Addr().Is4() && !cidr.ContainsPrefix(cur, p) {
				outside = append(outside, fmt.Sprintf("%s (%s)", n.Name, p))
			}
			if p.Addr().Is6() && (!m.keep.cidr.IsValid() || !cidr.ContainsPrefix(m.keep.cidr, p)) {
				return inputf("node %s holds the IPv6 podCIDR %s, but kube-controller-manager's --cluster-cidr has no IPv6 range holding it (%s): the runbook would ask for --cluster-cidr=%s and kube-controller-manager would crash-loop on every dual-stack node; run it where the kube-controller-manager mirror pod or kubeadm-config shows the flags",
					n.Name, p, flKeepSource(m.keep), m.keep.clusterCIDR(m.to))
			}
		}
	}
	if len(outside) > 0 {
		return fmt.Errorf("node podCIDR outside the current flannel Network %s: %s; flanneld refuses such a node and kube-controller-manager would not start with --cluster-cidr=%s; move those nodes into %s first (examples/noderecreate)",
			cur, strings.Join(outside, ", "), m.to, cur)
	}
	if m.o.NodeMask < m.from.Bits() {
		return inputf("--node-mask %d: a node subnet /%d is larger than the Network %s", m.o.NodeMask, m.o.NodeMask, m.from)
	}
	if m.o.FixOnly {
		return nil // the Network, --cluster-cidr and kubeadm's podSubnet stay
	}
	if done, err := StepDone(env, FlannelStepNetwork); err != nil {
		return err
	} else if !done && cur != m.to {
		if _, err := flannel.PlanNetConf(m.nc, flannel.SetNetworkRequest{Network: m.to}, nodes); err != nil {
			return fmt.Errorf("net-conf.json in ConfigMap %s/%s cannot be set to Network %s: %w", m.nc.Namespace, m.nc.Name, m.to, err)
		}
	}
	done, err := StepDone(env, FlannelStepControllerManager)
	if err != nil || done {
		return err
	}
	if m.o.Manifests != "" {
		path := filepath.Join(m.o.Manifests, kubeadmcfg.ControllerManagerManifest)
		mf, err := kubeadmcfg.ReadManifestFile(path)
		if err != nil {
			return inputf("--manifests %s: %s: %s", m.o.Manifests, kubeadmcfg.ControllerManagerManifest, oneLine(err.Error()))
		}
		if err := mf.Apply([]kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagClusterCIDR, Value: m.clusterCIDR()}}); err != nil {
			return inputf("--manifests %s: %s: cannot set --cluster-cidr=%s: %s", m.o.Manifests, kubeadmcfg.ControllerManagerManifest, m.clusterCIDR(), oneLine(err.Error()))
		}
	}
	return m.kubeadmEdits().preflight(ctx, m.o.Kube, env)
}

// flSuggest proposes a Network containing p: four times as large.
func flSuggest(p netip.Prefix) string {
	if p.Bits() < 2 {
		return "a shorter prefix"
	}
	w, _ := p.Addr().Prefix(p.Bits() - 2)
	return w.String()
}

func flPrefixOrNone(p netip.Prefix) string {
	if !p.IsValid() {
		return "none"
	}
	return p.String()
}

// --- steps 1 and 4: node moves ---

// fixLayout is the layout the fix step allocates from: the current flannel
// Network (a subnet outside it would stop the node's flanneld), with the
// node mask and Service CIDR of the running kube-controller-manager when
// found.
func (m *FlannelPodCIDRMigration) fixLayout(ctx context.Context, sr *StepReport) cidr.NodeIPAMLayout {
	layout := cidr.NodeIPAMLayout{ClusterCIDRs: []netip.Prefix{m.from}, NodeMasks: []int{m.o.NodeMask}}
	d, err := nodecidr.DiscoverControllerManagerFlags(ctx, m.o.Kube)
	if err != nil {
		sr.Addf("kube-controller-manager flags not found (%s): node mask /%d (--node-mask)", oneLine(err.Error()), m.o.NodeMask)
		return layout
	}
	l, _, err := cidr.ParseControllerManagerFlags(d.Flags)
	if err != nil || len(l.NodeMasks) == 0 {
		return layout
	}
	layout.NodeMasks = l.NodeMasks[:1]
	layout.ServiceCIDRs = l.ServiceCIDRs
	sr.Addf("node mask /%d from %s", layout.NodeMasks[0], d.Source)
	if k := m.keep; k.cidr.IsValid() {
		// Dual-stack: the fix allocates in both families, so a node keeps
		// (or gets) an IPv6 subnet beside its IPv4 one.
		for i, c := range l.ClusterCIDRs {
			if c.Addr().Is4() {
				layout.NodeMasks[0] = l.NodeMasks[i]
			}
		}
		if k.first {
			layout.ClusterCIDRs, layout.NodeMasks = []netip.Prefix{k.cidr, m.from}, []int{k.mask, layout.NodeMasks[0]}
		} else {
			layout.ClusterCIDRs, layout.NodeMasks = []netip.Prefix{m.from, k.cidr}, []int{layout.NodeMasks[0], k.mask}
		}
		sr.Addf("dual-stack: the IPv6 range %s (/%d) is kept", k.cidr, k.mask)
	}
	return layout
}

func (m *FlannelPodCIDRMigration) fixPodCIDRs(ctx context.Context, env *Env, sr *StepReport) error {
	err := m.nodePlan(ctx, &m.fixPlan, FlannelFixPlanKey, func() nodecidr.PlanOptions {
		return nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: m.fixLayout(ctx, sr)}
	})
	if err != nil {
		return err
	}
	return m.moveNodes(ctx, env, sr, m.fixPlan, "fix")
}

func (m *FlannelPodCIDRMigration) rewriteNodes(ctx context.Context, env *Env, sr *StepReport) error {
	if m.o.FixOnly {
		sr.Status = StatusSkipped
		sr.Addf("--fix-only: every other node keeps its podCIDR")
		return nil
	}
	if !m.o.RewriteNodes {
		sr.Status = StatusSkipped
		sr.Addf("Network %s contains %s, so every node's podCIDR stays valid for flanneld and kube-controller-manager; rewriting is only needed to renumber (--rewrite-nodes --node-range R)", m.to, m.from)
		return nil
	}
	err := m.nodePlan(ctx, &m.rebasePlan, FlannelRebasePlanKey, func() nodecidr.PlanOptions {
		return nodecidr.PlanOptions{Mode: nodecidr.ModeRebase, Rebase: []nodecidr.RebasePair{{From: m.from, To: m.nodeRange}}}
	})
	if err != nil {
		return err
	}
	return m.moveNodes(ctx, env, sr, m.rebasePlan, "rebase")
}

// nodePlan makes a node-moving step's nodecidr plan into *dst, unless an
// earlier run journaled one (Prepare read it back), and in ModeApply
// journals it under key before the step's first write.
func (m *FlannelPodCIDRMigration) nodePlan(ctx context.Context, dst **nodecidr.Plan, key string, opts func() nodecidr.PlanOptions) error {
	if *dst != nil {
		return nil
	}
	p, err := nodecidr.MakePlan(ctx, m.o.Kube, opts())
	if err != nil {
		return err
	}
	sharedTogether(p)
	*dst = p
	if m.mode == ModeApply && len(p.Steps) > 0 {
		return m.j.Put(key, p)
	}
	return nil
}

// moveNodes shows and applies a nodecidr plan with the migration's hooks;
// sub names the plan's nodecidr journal below the run's.
func (m *FlannelPodCIDRMigration) moveNodes(ctx context.Context, env *Env, sr *StepReport, p *nodecidr.Plan, sub string) error {
	if len(p.Steps) == 0 {
		sr.Addf("no node needs a change")
		return nil
	}
	for _, s := range p.Steps {
		sr.Addf("%s %s: %s -> %s (%s)", s.Action, s.Node, flListOrNone(s.OldPodCIDRs), strings.Join(s.NewPodCIDRs, ","), s.Reason)
	}
	for _, w := range p.Warnings {
		sr.Addf("warning: %s", w)
	}
	conc := 1
	for _, g := range sharedGroups(p) {
		sr.Addf("%s leave podCIDR %s, which they share: they move together", strings.Join(g.nodes, ", "), g.subnet)
		conc = max(conc, len(g.nodes))
	}
	if m.mode == ModePlan {
		if m.o.MakeBeforeBreak {
			sr.Addf("each node then (make-before-break): restart its flannel pod, have every node's host agent keep its old subnet reachable, evict its pods holding old addresses one at a time (PodDisruptionBudgets respected), wait until it is Ready and its pods run, then have the agents tear the transition down")
			return nil
		}
		sr.Addf("each node then: restart its flannel pod, delete its controller-owned pods, wait until it is Ready and its pods run")
		return nil
	}
	opts := nodecidr.ApplyOptions{
		Concurrency:  conc,
		Hooks:        m.hooks(),
		BeforeDelete: m.beforeDelete(p),
		Note:         "migrate-flannel-podcidr " + sub,
		OnEvent: func(e nodecidr.Event) {
			env.Progressf("  %s %s", sub, e.String())
		},
	}
	if m.mode == ModeServerDryRun {
		opts.DryRun = nodecidr.DryRunServer
	} else {
		opts.JournalDir = filepath.Join(m.j.Dir(), sub)
		opts.Lock, opts.ClusterJournal = m.env.Lock, nodeClusterJournal(m.env, sub)
	}
	res, err := nodecidr.Apply(ctx, m.o.Kube, p, opts)
	if res != nil {
		sr.Addf("moved %d node(s), %d already done; delete->create gap p50 %s max %s",
			len(res.Changed), len(res.AlreadyDone), res.Gaps.P50, res.Gaps.Max)
	}
	m.mu.Lock()
	for _, b := range m.manual {
		sr.Addf("restart by hand (no controller would recreate it): %s", b)
	}
	for _, n := range m.notes {
		sr.Addf("%s", n)
	}
	m.manual, m.notes = nil, nil
	m.mu.Unlock()
	return err
}

// sharedGroup is the nodes of a plan that leave one IPv4 podCIDR they
// share (duplicates the fix plan moves).
type sharedGroup struct {
	subnet netip.Prefix
	nodes  []string
}

// sharedGroups returns p's groups of two or more worker steps leaving one
// IPv4 podCIDR, in the order of their first step.
func sharedGroups(p *nodecidr.Plan) []sharedGroup {
	var out []sharedGroup
	for _, st := range p.Steps {
		old, ok := stepOldIPv4(st)
		if !ok || st.ControlPlane {
			continue
		}
		i := slices.IndexFunc(out, func(g sharedGroup) bool { return g.subnet == old })
		if i < 0 {
			out = append(out, sharedGroup{subnet: old})
			i = len(out) - 1
		}
		out[i].nodes = append(out[i].nodes, st.Node)
	}
	return slices.DeleteFunc(out, func(g sharedGroup) bool { return len(g.nodes) < 2 })
}

func stepOldIPv4(st nodecidr.Step) (netip.Prefix, bool) {
	for _, c := range st.OldPodCIDRs {
		if o, _, err := cidr.ParseLenient(c); err == nil && o.Addr().Is4() {
			return o, true
		}
	}
	return netip.Prefix{}, false
}

// sharedTogether orders p's worker steps so that the nodes leaving one
// shared IPv4 podCIDR are next to each other, at the place of the first of
// them; moveNodes then moves as many nodes at once as the largest group
// holds. The duplicates of a subnet move together because until the last of
// them has moved, its pods answer few nodes: every other node routes the
// subnet to one holder only (whichever its flanneld learned last, then the
// node the fix plan keeps), and the first duplicate's delete takes that
// route away. Control-plane steps go last, in their order (nodecidr moves
// them one at a time), wherever the plan lists them.
func sharedTogether(p *nodecidr.Plan) {
	groups := sharedGroups(p)
	if len(groups) == 0 {
		return
	}
	rank := map[string]int{} // a step's position: its group's first member's
	for i, st := range p.Steps {
		rank[st.Node] = i
		if old, ok := stepOldIPv4(st); ok && !st.ControlPlane {
			for _, g := range groups {
				if g.subnet == old {
					rank[st.Node] = slices.IndexFunc(p.Steps, func(s nodecidr.Step) bool { return s.Node == g.nodes[0] })
				}
			}
		}
	}
	slices.SortStableFunc(p.Steps, func(a, b nodecidr.Step) int {
		if a.ControlPlane != b.ControlPlane {
			if a.ControlPlane {
				return 1
			}
			return -1
		}
		return rank[a.Node] - rank[b.Node]
	})
}

func flListOrNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ",")
}

// hooks run after each moved node: restart its flannel pod, restart its
// workload pods, then wait for it to be healthy before the next node (in
// MakeBeforeBreak, mbbHooks).
func (m *FlannelPodCIDRMigration) hooks() []nodecidr.Hook {
	restartFlannelPod := nodecidr.DeleteNodePods(m.o.Kube, nodecidr.DeletePodsOptions{Namespace: m.o.Namespace, LabelSelector: m.o.FlannelSelector, IncludeHostNetwork: true})
	if m.o.MakeBeforeBreak {
		return m.mbbHooks(restartFlannelPod)
	}
	hooks := []nodecidr.Hook{
		restartFlannelPod,
		{
			Name: "restart-pods",
			Permissions: []nodecidr.Permission{
				{Verb: "list", Resource: "pods"},
				{Verb: "delete", Resource: "pods"},
			},
			Run: m.restartPods,
		},
	}
	if m.agents != nil {
		hooks = append(hooks, nodecidr.Hook{
			Name:        "host-agent",
			Permissions: m.agentPermissions(),
			Run:         m.agentOnMovedNode,
		})
	}
	return append(hooks, m.healthHook())
}

// healthHook waits until the moved node is Ready and its pods run.
func (m *FlannelPodCIDRMigration) healthHook() nodecidr.Hook {
	return nodecidr.Hook{
		Name:        "health-check",
		Permissions: []nodecidr.Permission{{Verb: "get", Resource: "nodes"}, {Verb: "list", Resource: "pods"}},
		Run:         m.waitHealthy,
	}
}

func flNodePods(ctx context.Context, kube kubernetes.Interface, node string) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the pods on node %s: %w", node, err)
	}
	return list.Items, nil
}

// flRestartable says whether a pod on a moved node is deleted so its
// controller recreates it with an address of the new subnet. Mirror
// (static), hostNetwork and DaemonSet pods are left alone (the flannel pod
// has its own hook); a pod without a controller would be lost, so it is
// reported instead.
func flRestartable(p *corev1.Pod) (ok, manual bool) {
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

// checkLock returns nil while the run holds its lock, or holds none (a plan
// or a dry run); what says which call is not made ("not deleting pod
// default/web-1 on node w1"). The hooks call it before each pod they delete
// or evict: nodecidr checks the lock before each hook, not within one.
func (m *FlannelPodCIDRMigration) checkLock(what string) error {
	if m.env == nil {
		return nil
	}
	return lease.CheckHeld(m.env.Lock, what)
}

func (m *FlannelPodCIDRMigration) restartPods(ctx context.Context, node *corev1.Node) error {
	pods, err := flNodePods(ctx, m.o.Kube, node.Name)
	if err != nil {
		return err
	}
	var opts metav1.DeleteOptions
	if m.mode == ModeServerDryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for i := range pods {
		p := &pods[i]
		ok, manual := flRestartable(p)
		if manual {
			m.mu.Lock()
			m.manual = append(m.manual, p.Namespace+"/"+p.Name+" on "+node.Name)
			m.mu.Unlock()
		}
		if !ok {
			continue
		}
		if err := m.checkLock(fmt.Sprintf("not deleting pod %s/%s on node %s", p.Namespace, p.Name, node.Name)); err != nil {
			return err
		}
		uid := p.UID
		o := opts
		o.Preconditions = &metav1.Preconditions{UID: &uid}
		if err := m.o.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, o); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete pod %s/%s on node %s: %w", p.Namespace, p.Name, node.Name, err)
		}
	}
	return nil
}

// waitHealthy waits until the node is Ready and every pod bound to it runs,
// as the Calico migration controller does between nodes.
func (m *FlannelPodCIDRMigration) waitHealthy(ctx context.Context, node *corev1.Node) error {
	if m.mode != ModeApply {
		return nil
	}
	deadline := time.Now().Add(m.o.HealthTimeout)
	for {
		why := m.unhealthy(ctx, node.Name)
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not healthy after %s: %s (if its pods cannot start because cni0 still has the old subnet's address, run the node's host clean-up from step 5 now, e.g. `ip link delete cni0` on %s, then rerun)",
				node.Name, m.o.HealthTimeout, why, node.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(m.o.PollInterval):
		}
	}
}

// unhealthy says why the node is not healthy yet, or "".
func (m *FlannelPodCIDRMigration) unhealthy(ctx context.Context, name string) string {
	n, err := m.o.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !flNodeReady(n) {
		return "node is not Ready"
	}
	list, err := m.o.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return err.Error()
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("pod %s/%s is %s", p.Namespace, p.Name, p.Status.Phase)
		}
	}
	return ""
}

func flNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// --- step 2: net-conf.json ---

// networkSet is set-network's read-only check: net-conf.json already holds
// the new Network.
func (m *FlannelPodCIDRMigration) networkSet(ctx context.Context, _ *Env) (bool, string, error) {
	nc, err := flannel.ReadNetConf(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		return false, "", fmt.Errorf("reading net-conf.json: %w", err)
	}
	if nc.Config == nil || nc.Config.Network != m.to {
		return false, "", nil
	}
	return true, fmt.Sprintf("%s/%s net-conf.json holds Network %s", nc.Namespace, nc.Name, m.to), nil
}

func (m *FlannelPodCIDRMigration) setNetwork(ctx context.Context, _ *Env, sr *StepReport) error {
	if m.nc.Config.Network == m.to {
		sr.Addf("%s/%s net-conf.json already holds Network %s", m.nc.Namespace, m.nc.Name, m.to)
		return nil
	}
	nodes, err := flannel.ReadNodes(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		return err
	}
	p, err := flannel.PlanNetConf(m.nc, flannel.SetNetworkRequest{Network: m.to}, nodes)
	if err != nil {
		return err
	}
	sr.Details = append(sr.Details, fmt.Sprintf("%s/%s key %s:", p.Namespace, p.Name, p.Key), "before: "+p.OldRaw, "after:  "+p.NewRaw)
	for _, w := range p.Warnings {
		sr.Addf("warning: %s", w)
	}
	if len(p.NodesOutside) > 0 {
		sr.Addf("warning: %d node(s) outside the new Network: %s", len(p.NodesOutside), strings.Join(p.NodesOutside, ", "))
	}
	if m.mode == ModePlan {
		return nil
	}
	if m.mode == ModeApply {
		if err := m.j.Put(flKeyNetConf, p.OldRaw); err != nil {
			return err
		}
	}
	dry := flannel.DryRunNone
	if m.mode == ModeServerDryRun {
		dry = flannel.DryRunServer
	}
	res, err := flannel.ApplyNetConf(ctx, m.o.Kube, p, flannel.KubeApplyOptions{DryRun: dry, Lock: m.env.Lock})
	if res != nil {
		sr.Addf("net-conf.json: %s", res.Outcome)
	}
	return err
}

// --- step 3: kube-controller-manager ---

func (m *FlannelPodCIDRMigration) controllerManager(ctx context.Context, _ *Env, sr *StepReport) error {
	if m.o.FixOnly {
		sr.Status = StatusSkipped
		sr.Addf("--fix-only: --cluster-cidr and kubeadm's podSubnet stay %s", m.clusterCIDR())
		return nil
	}
	if err := m.kubeadmConfigMaps(ctx, sr); err != nil {
		return err
	}
	want := m.clusterCIDR()
	target := filepath.Join(kubeadmcfg.DefaultManifestDir, kubeadmcfg.ControllerManagerManifest)
	var instr []string
	if m.o.Manifests != "" {
		in, err := renderManifest(m.o.Manifests, m.o.Out, kubeadmcfg.ControllerManagerManifest, []kubeadmcfg.FlagChange{{Flag: kubeadmcfg.FlagClusterCIDR, Value: want}}, sr)
		if err != nil {
			return err
		}
		if in != "" {
			instr = append(instr, in)
		}
	}
	if len(instr) == 0 {
		instr = append(instr, fmt.Sprintf("on every control-plane node, set --cluster-cidr=%s in %s (the kubelet restarts kube-controller-manager); keep the --node-cidr-mask-size flags", want, target))
	}
	instr = append(instr, fmt.Sprintf("every node's podCIDR lies in %s, which %s contains, so kube-controller-manager starts with the new flag", m.from, m.to))
	return operatorGate{step: FlannelStepControllerManager, instr: instr, observe: m.observeFlag, cont: m.o.Continue,
		resume: "rerun the same command: it goes on once the kube-controller-manager mirror pod in kube-system runs with --cluster-cidr=" + want,
	}.run(ctx, m.mode, sr)
}

// kubeadmConfigMaps updates kubeadm-config podSubnet and kube-proxy's
// clusterCIDR when those ConfigMaps exist. The plan is journaled before
// Apply and reused, so a run killed between the two updates finishes them.
func (m *FlannelPodCIDRMigration) kubeadmConfigMaps(ctx context.Context, sr *StepReport) error {
	snap, err := kubeadmcfg.Read(ctx, m.o.Kube, kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	if snap.Kubeadm == nil && snap.KubeProxy == nil {
		sr.Addf("no kubeadm-config or kube-proxy ConfigMap: nothing to update in the API")
		return nil
	}
	return m.kubeadmEdits().run(ctx, m.o.Kube, snap, m.env, sr)
}

// kubeadmEdits are the kubeadm ConfigMap edits of step kubeadm, and of its
// check in Prepare.
func (m *FlannelPodCIDRMigration) kubeadmEdits() kubeadmEdits {
	return kubeadmEdits{key: keyKubeadmPlan, intent: kubeadmcfg.Intent{PodSubnet: m.clusterCIDR()},
		ids: []string{kubeadmcfg.EditKubeadmConfig, kubeadmcfg.EditKubeProxy}}
}

// observeFlag decides from the API whether kube-controller-manager runs
// with the new --cluster-cidr: every kube-controller-manager mirror pod in
// kube-system (label component=kube-controller-manager) carries it.
func (m *FlannelPodCIDRMigration) observeFlag(ctx context.Context) (bool, string, error) {
	pods, err := m.o.Kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=" + cidr.KubeControllerManager})
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
		args, _, err := nodecidr.ParseControllerManagerArgs(flPodArgs(p))
		v := args.ClusterCIDR
		if err != nil || !flSameCIDR(v, m.to, m.keep) {
			stale = append(stale, fmt.Sprintf("%s has --cluster-cidr=%s", p.Name, v))
		}
	}
	if len(names) == 0 {
		return false, "no kube-controller-manager mirror pod in kube-system (label component=kube-controller-manager)", nil
	}
	if len(stale) > 0 {
		return false, strings.Join(stale, "; "), nil
	}
	return true, fmt.Sprintf("every kube-controller-manager pod (%s) runs with --cluster-cidr=%s", strings.Join(names, ", "), m.clusterCIDR()), nil
}

// clusterCIDR is --cluster-cidr (and kubeadm's podSubnet) after the move:
// the new Network, and in a dual-stack cluster the IPv6 range kept in its
// place.
func (m *FlannelPodCIDRMigration) clusterCIDR() string { return m.keep.clusterCIDR(m.to) }

// flKeepSource says what kube-controller-manager's flags hold of IPv6.
func flKeepSource(k keptFamily) string {
	if !k.cidr.IsValid() {
		return "no IPv6 range found"
	}
	return "it has " + k.cidr.String()
}

// flSameCIDR compares a flag value, read leniently as
// kube-controller-manager does, with the wanted IPv4 network and, in a
// dual-stack cluster, the IPv6 range kept in its place.
func flSameCIDR(v string, want netip.Prefix, keep keptFamily) bool {
	ps, _, err := cidr.ParseListLenient(v)
	if err != nil || len(ps) == 0 {
		return false
	}
	if !keep.cidr.IsValid() {
		return ps[0] == want
	}
	return len(ps) == 2 && (keep.first && ps[0] == keep.cidr && ps[1] == want || !keep.first && ps[0] == want && ps[1] == keep.cidr)
}

// flPodArgs is the command line of a kube-controller-manager pod.
func flPodArgs(p *corev1.Pod) []string {
	for _, c := range p.Spec.Containers {
		if c.Name == cidr.KubeControllerManager || len(p.Spec.Containers) == 1 {
			return append(slices.Clone(c.Command), c.Args...)
		}
	}
	return nil
}

// --- step 5: host clean-up, flanneld restart, verify ---

// FlannelHostPlan is the host work one node needs because the migration
// moved its subnet: flannel.CleanupSteps for the move. The host-cleanup
// step prints it for a person; a node agent can carry out the same data.
type FlannelHostPlan struct {
	// Node is the node's name.
	Node string `json:"node"`
	// From is the subnet the node had; it is invalid when the node had no
	// podCIDR, and then Steps is empty: its flanneld only needed the restart
	// done when the node got one.
	From netip.Prefix `json:"from,omitzero"`
	// To is the node's subnet now.
	To netip.Prefix `json:"to"`
	// Steps are the host steps, in order.
	Steps []flannel.HostStep `json:"steps,omitempty"`
}

// HostPlans returns the host plan of every node the fix-podcidrs and
// rewrite-nodes steps moved (or, before they run, would move), sorted by
// node name; a node both steps moved appears once, from its first subnet
// to its last. It is complete once both steps have run in this run or an
// earlier run of the same journal.
func (m *FlannelPodCIDRMigration) HostPlans() []FlannelHostPlan {
	var cfg flannel.Config
	if m.nc != nil && m.nc.Config != nil {
		cfg = *m.nc.Config
	}
	return flHostPlans(cfg, m.o.Namespace, m.o.FlannelSelector, m.fixPlan, m.rebasePlan)
}

// flHostPlans turns the node moves of plans, in the order they were
// carried out, into per-node host plans for a flannel with config cfg
// whose pods live in namespace.
func flHostPlans(cfg flannel.Config, namespace, selector string, plans ...*nodecidr.Plan) []FlannelHostPlan {
	last := map[string]FlannelHostPlan{}
	for _, p := range plans {
		if p == nil {
			continue
		}
		for _, s := range p.Steps {
			h := FlannelHostPlan{Node: s.Node}
			if len(s.OldPodCIDRs) > 0 {
				h.From, _, _ = cidr.ParseLenient(s.OldPodCIDRs[0])
			}
			if len(s.NewPodCIDRs) > 0 {
				h.To, _, _ = cidr.ParseLenient(s.NewPodCIDRs[0])
			}
			if prev, ok := last[s.Node]; ok && prev.From.IsValid() {
				h.From = prev.From
			}
			last[s.Node] = h
		}
	}
	out := make([]FlannelHostPlan, 0, len(last))
	for _, h := range last {
		if h.From.IsValid() {
			h.Steps = flannel.CleanupSteps(flannel.CleanupOptions{
				Node: h.Node, From: flannel.SubnetKey{IPv4: h.From}, To: flannel.SubnetKey{IPv4: h.To},
				BackendType: cfg.BackendType, Backend: cfg.Backend, KubeSubnetManager: true, Namespace: namespace, PodSelector: selector,
			})
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// HostWants returns the pod network every node's host must hold, as the
// node agents get it: its podCIDR in the new Network, every other node as
// a peer (its podCIDR and flannel public IP), the old Network, and, for a
// moved node, the subnet it left. While live pods on a moved node still
// hold addresses in a subnet it left, that subnet is listed in the node's
// Peer.OldPodCIDRs in every other node's want (so each keeps a route to
// it), and is the moved node's OldPodCIDR (so it keeps the transition);
// once no live pod holds one, it is listed nowhere and the agents tear the
// transition down. A subnet another node holds now (a duplicate podCIDR
// being fixed) is never listed for the node that left it. While several
// nodes hold one podCIDR, it is the node's the fix plan keeps: the others,
// until they move, get no want and are no peer (their pods are unreachable
// from the other nodes anyway, and a want can list a subnet once).
func (m *FlannelPodCIDRMigration) HostWants(ctx context.Context) ([]nodenet.Want, error) {
	nodes, err := flannel.ReadNodes(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		return nil, err
	}
	pending, err := m.pendingDuplicates(nodes)
	if err != nil {
		return nil, err
	}
	all := slices.Clone(nodes)
	nodes = slices.DeleteFunc(nodes, func(n flannel.Node) bool { return pending[n.Name] })
	left := map[string]netip.Prefix{}
	for _, h := range m.HostPlans() {
		left[h.Node] = h.From
	}
	held, err := m.heldOldSubnets(ctx, nodes)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	standby := maps.Clone(m.standby)
	m.mu.Unlock()
	backend := nodenet.BackendVXLAN
	if m.nc != nil && m.nc.Config != nil && m.nc.Config.BackendType == nodenet.BackendHostGW {
		backend = nodenet.BackendHostGW
	}
	var out []nodenet.Want
	for _, n := range nodes {
		pc, ok := flIPv4(n.PodCIDRs)
		if !ok {
			continue
		}
		w := nodenet.Want{Node: n.Name, PodCIDR: pc, Network: m.to, Backend: backend, PeersComplete: true}
		if m.from != m.to {
			w.OldNetwork = m.from
		}
		if old, ok := left[n.Name]; ok && old.IsValid() && old != pc {
			w.OldPodCIDR = old
		}
		if h := held[n.Name]; len(h) > 0 && !slices.Contains(h, w.OldPodCIDR) {
			// Its live pods hold an address of a subnet it left in an
			// earlier step (fix, then rebase): that one keeps the transition.
			w.OldPodCIDR = h[len(h)-1]
		}
		if backend == nodenet.BackendVXLAN {
			w.VTEPMAC = flVTEPMAC(n)
			// Every other node's FDB entry, a duplicate's too: flanneld
			// deletes the wrong holder's at a shared subnet's removal and
			// then stalls on the failing delete (nodenet.Want.FDB).
			for _, o := range all {
				if mac := flVTEPMAC(o); o.Name != n.Name && mac != "" && o.PublicIP.Is4() {
					w.FDB = append(w.FDB, nodenet.FDBEntry{MAC: mac, Dst: o.PublicIP})
				}
			}
		}
		for _, p := range nodes {
			if ppc, ok := flIPv4(p.PodCIDRs); ok && p.Name != n.Name {
				peer := nodenet.Peer{Name: p.Name, PodCIDR: ppc, OldPodCIDRs: slices.Clone(held[p.Name]), PublicIP: p.PublicIP}
				if backend == nodenet.BackendVXLAN {
					peer.VTEPMAC = flVTEPMAC(p)
				}
				if next, ok := standby[p.Name]; ok && next != ppc {
					peer.NextPodCIDR = next
				}
				w.Peers = append(w.Peers, peer)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

// pendingDuplicates returns the nodes that share their IPv4 podCIDR with
// another node and are to leave it: the fix plan moves them (it keeps the
// oldest holder). Without a fix plan, which holder keeps the subnet is not
// known yet: an error.
func (m *FlannelPodCIDRMigration) pendingDuplicates(nodes []flannel.Node) (map[string]bool, error) {
	holders := map[netip.Prefix][]string{}
	for _, n := range nodes {
		if pc, ok := flIPv4(n.PodCIDRs); ok {
			holders[pc] = append(holders[pc], n.Name)
		}
	}
	pending := map[string]bool{}
	for pc, names := range holders {
		if len(names) < 2 {
			continue
		}
		if m.fixPlan == nil {
			return nil, fmt.Errorf("nodes %s share podCIDR %s, and no fix plan says which keeps it: the host agents get their wants once fix-podcidrs has planned", strings.Join(names, ", "), pc)
		}
		for _, name := range names {
			if slices.ContainsFunc(m.leftSubnets(name), func(o netip.Prefix) bool { return o == pc }) {
				pending[name] = true
			}
		}
	}
	return pending, nil
}

// heldOldSubnets returns, per node, the subnets the node-moving steps took
// from it (in the order they did) in which a live pod on it still holds an
// address, leaving out the node's podCIDR and any subnet a node holds now.
func (m *FlannelPodCIDRMigration) heldOldSubnets(ctx context.Context, nodes []flannel.Node) (map[string][]netip.Prefix, error) {
	var current []netip.Prefix
	for _, n := range nodes {
		if pc, ok := flIPv4(n.PodCIDRs); ok {
			current = append(current, pc)
		}
	}
	olds := map[string][]netip.Prefix{}
	for _, n := range nodes {
		for _, o := range m.leftSubnets(n.Name) {
			if !slices.ContainsFunc(current, func(c netip.Prefix) bool { return c.Overlaps(o) }) {
				olds[n.Name] = append(olds[n.Name], o)
			}
		}
	}
	if len(olds) == 0 {
		return nil, nil
	}
	pods, err := m.o.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the pods that may hold old subnets' addresses: %w", err)
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if _, moved := olds[p.Spec.NodeName]; moved {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	held := map[string][]netip.Prefix{}
	for node, subs := range olds {
		live := livePods(byNode[node])
		for _, o := range subs {
			if slices.ContainsFunc(live, func(p nodenet.Pod) bool { return o.Contains(p.IP) }) {
				held[node] = append(held[node], o)
			}
		}
	}
	return held, nil
}

// flVTEPMAC is the VtepMAC of a node's flannel backend-data annotation
// ("" when it has none).
func flVTEPMAC(n flannel.Node) string {
	var bd struct{ VtepMAC string }
	if json.Unmarshal([]byte(n.BackendData), &bd) != nil {
		return ""
	}
	return bd.VtepMAC
}

func flIPv4(ps []netip.Prefix) (netip.Prefix, bool) {
	for _, p := range ps {
		if p.Addr().Is4() {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// agentOnMovedNode is the hook that has the agents fix the hosts once a
// moved node's pods were restarted: every node's want is published (the
// moved node's host, and every other node's routes, neighbour and FDB
// entries for its new subnet); a node without an agent is left to the
// health check (and the printed host steps).
func (m *FlannelPodCIDRMigration) agentOnMovedNode(ctx context.Context, node *corev1.Node) error {
	if m.agents == nil || m.mode != ModeApply {
		return nil
	}
	return m.publishWants(ctx, "after node "+node.Name+" moved", m.HostWants)
}

// agentsCleanup hands every node's want to its agent, all at once, and
// waits for their reports. It returns the wants of the nodes that have no
// agent.
func (m *FlannelPodCIDRMigration) agentsCleanup(ctx context.Context, sr *StepReport) ([]nodenet.Want, error) {
	wants, gens, without, err := m.publish(ctx, m.HostWants, m.mode == ModeApply)
	if err != nil {
		return nil, err
	}
	if m.mode != ModeApply {
		for _, w := range wants {
			if !slices.ContainsFunc(without, func(o nodenet.Want) bool { return o.Node == w.Node }) {
				sr.Addf("node %s: its host agent will make the host hold podCIDR %s in Network %s", w.Node, w.PodCIDR, w.Network)
			}
		}
		return without, nil
	}
	got, err := m.agents.WaitAll(ctx, gens)
	if err != nil {
		return nil, err
	}
	for _, w := range wants {
		st := got[w.Node]
		if st == nil {
			continue
		}
		sr.Addf("node %s: host agent %s (generation %d, %d action(s))", w.Node, st.Phase, st.Generation, len(st.Actions))
		for _, d := range st.Deferred {
			sr.Addf("  deferred until the pods using the old range are gone: %s", d)
		}
	}
	return without, nil
}

func (m *FlannelPodCIDRMigration) hostCleanup(ctx context.Context, _ *Env, sr *StepReport) error {
	if m.agents != nil {
		without, err := m.agentsCleanup(ctx, sr)
		if err != nil {
			return err
		}
		for _, w := range without {
			steps, err := HostSteps(w)
			if err != nil {
				return err
			}
			sr.Addf("node %s has no host agent; run there:", w.Node)
			for _, s := range steps {
				sr.Addf("  %s", s)
			}
		}
		return m.restartFlannel(ctx, sr)
	}
	plans := m.HostPlans()
	for _, h := range plans {
		if !h.From.IsValid() {
			sr.Addf("node %s had no podCIDR (now %s): its flanneld only needed the restart done in its step", h.Node, h.To)
			continue
		}
		sr.Addf("node %s moved %s -> %s; on the node:", h.Node, h.From, h.To)
		for _, s := range h.Steps {
			sr.Addf("  [%s] %s   # %s", s.Where, s.Command, s.Why)
		}
	}
	if len(plans) == 0 {
		sr.Addf("no node's subnet moved: no host clean-up")
	}
	return m.restartFlannel(ctx, sr)
}

// flannelRestartWhy says why host-cleanup restarts every flanneld.
func (m *FlannelPodCIDRMigration) flannelRestartWhy() string {
	if m.o.FixOnly {
		// A flanneld drops its route to a subnet two nodes shared when one
		// of them leaves it (seed 001), and adds it back only at start.
		return "every flanneld lists the nodes again at start: one that dropped its route to a subnet two nodes shared gets it back"
	}
	return fmt.Sprintf("every flanneld reads Network %s at start", m.to)
}

// restartFlannel rolls the flannel DaemonSet(s) so every flanneld reads the
// new Network (it reads net-conf.json only at start).
func (m *FlannelPodCIDRMigration) restartFlannel(ctx context.Context, sr *StepReport) error {
	dss, err := m.o.Kube.AppsV1().DaemonSets(m.o.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing DaemonSets in %s: %w", m.o.Namespace, err)
	}
	// Only flannel's DaemonSets: the namespace may be kube-system, where a
	// rolling restart of everything else would be an unasked-for change.
	sel, err := labels.Parse(m.o.FlannelSelector)
	if err != nil {
		return inputf("--flannel-selector %q: %v", m.o.FlannelSelector, err)
	}
	var flannelDS []appsv1.DaemonSet
	for _, ds := range dss.Items {
		if sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
			flannelDS = append(flannelDS, ds)
		}
	}
	if len(flannelDS) == 0 {
		sr.Addf("no DaemonSet in namespace %s runs pods matching --flannel-selector %s: restart every flanneld by hand (%s)", m.o.Namespace, m.o.FlannelSelector, m.flannelRestartWhy())
		return nil
	}
	for _, ds := range flannelDS {
		if m.mode == ModePlan {
			sr.Addf("kubectl -n %s rollout restart daemonset/%s (%s)", ds.Namespace, ds.Name, m.flannelRestartWhy())
			continue
		}
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, FlannelRestartedAtAnnotation, time.Now().UTC().Format(time.RFC3339))
		opts := metav1.PatchOptions{}
		if m.mode == ModeServerDryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := m.o.Kube.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, types.StrategicMergePatchType, []byte(patch), opts); err != nil {
			return fmt.Errorf("restarting DaemonSet %s/%s: %w", ds.Namespace, ds.Name, err)
		}
		sr.Addf("rolling restart of DaemonSet %s/%s", ds.Namespace, ds.Name)
	}
	return nil
}

// verify is host-cleanup's proof of the end state: no duplicate or missing
// podCIDR, every node inside the new Network, net-conf.json holding it. The
// Runner reports its error as "verify: ...".
func (m *FlannelPodCIDRMigration) verify(ctx context.Context, _ *Env, sr *StepReport) error {
	nc, err := flannel.ReadNetConf(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		return err
	}
	if nc.Config == nil || nc.Config.Network != m.to {
		return fmt.Errorf("net-conf.json does not hold Network %s", m.to)
	}
	nodes, err := flannel.ReadNodes(ctx, m.o.Kube, m.kubeOptions())
	if err != nil {
		return err
	}
	var problems []string
	for _, f := range flannel.AuditKube(nc, nodes).Findings {
		if f.Severity == cidr.SeverityError {
			problems = append(problems, f.String())
		}
	}
	rep, err := nodecidr.Audit(ctx, m.o.Kube, nodecidr.AuditOptions{})
	if err != nil {
		return err
	}
	for _, f := range rep.Findings {
		if f.Severity == cidr.SeverityError {
			problems = append(problems, f.String())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	sr.Addf("verified: %d nodes, every podCIDR unique and inside %s", len(nodes), m.to)
	return nil
}
