package nodecidr

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
)

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// PageSize is the list page size; zero means DefaultPageSize.
	PageSize int64
	// JournalDir, when set, is the journal of the run; the metadata of every
	// recreated node is then compared with its backup.
	JournalDir string
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	// OK is true when no finding has severity error.
	OK bool `json:"ok"`
	// Checked is how many planned nodes were checked.
	Checked int `json:"checked"`
	// Findings are sorted like an audit's.
	Findings []Finding `json:"findings"`
}

// Verify proves a plan's end state without writing anything: the plan is
// valid (every new podCIDR inside the plan's own target, see Validate); every planned
// node exists with its planned podCIDRs; with a journal, its labels,
// annotations, taints (except those controllers manage), unschedulable and
// providerID equal its backup's; and no podCIDR is shared or overlapping
// anywhere in the cluster.
func Verify(ctx context.Context, client kubernetes.Interface, plan *Plan, opts VerifyOptions) (*VerifyReport, error) {
	if plan == nil {
		return nil, fmt.Errorf("%w: no plan", ErrInvalidPlan)
	}
	// A plan whose steps leave its own target proves nothing when applied.
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	var st *JournalState
	if opts.JournalDir != "" {
		var err error
		if st, err = ReadJournal(opts.JournalDir); err != nil {
			return nil, err
		}
		if st != nil && st.PlanID != plan.ID() {
			return nil, fmt.Errorf("%w: journal %s holds plan %s, not %s", ErrJournalConflict, opts.JournalDir, st.PlanID, plan.ID())
		}
	}
	nodes, err := ListNodes(ctx, client, ListOptions{PageSize: opts.PageSize})
	if err != nil {
		return nil, fmt.Errorf("verifying plan %s: %w", plan.ID(), err)
	}
	return verifyNodes(nodes, plan, st), nil
}

func verifyNodes(nodes []corev1.Node, plan *Plan, st *JournalState) *VerifyReport {
	byName := make(map[string]*corev1.Node, len(nodes))
	ptrs := make([]*corev1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
		ptrs[i] = &nodes[i]
	}
	rep := &VerifyReport{Findings: []Finding{}}
	add := func(kind FindingKind, sev cidr.Severity, node string, cidrs []string, msg string) {
		rep.Findings = append(rep.Findings, Finding{Kind: kind, Severity: sev, Nodes: []string{node}, CIDRs: cidrs, Message: msg})
	}
	for _, s := range plan.Steps {
		rep.Checked++
		n := byName[s.Node]
		if n == nil {
			add(FindingNodeMissing, cidr.SeverityError, s.Node, nil, fmt.Sprintf("node %s is missing", s.Node))
			continue
		}
		if got := PodCIDRsOf(n); !sameCIDRs(got, s.NewPodCIDRs) {
			add(FindingNotApplied, cidr.SeverityError, s.Node, got,
				fmt.Sprintf("node %s has podCIDRs %s, planned %s", s.Node, cidrList(got), cidrList(s.NewPodCIDRs)))
		}
		if st == nil {
			continue
		}
		rec := st.backups[s.Node]
		if rec == nil || rec.Backup == nil {
			continue
		}
		lost, changed := metadataDiff(rec.Backup, n)
		if len(lost) > 0 {
			add(FindingMetadataChanged, cidr.SeverityError, s.Node, nil, fmt.Sprintf("node %s: %s", s.Node, strings.Join(lost, "; ")))
		}
		if len(changed) > 0 {
			add(FindingMetadataChanged, cidr.SeverityWarning, s.Node, nil, fmt.Sprintf("node %s: %s", s.Node, strings.Join(changed, "; ")))
		}
		want := rec.Backup.Spec.Unschedulable
		if rec.Cordoned {
			want = rec.WasUnschedulable
		}
		if n.Spec.Unschedulable != want {
			add(FindingMetadataChanged, cidr.SeverityError, s.Node, nil,
				fmt.Sprintf("node %s: unschedulable is %t, was %t before the run", s.Node, n.Spec.Unschedulable, want))
		}
	}
	for _, f := range analyze(ptrs, cidr.NodeIPAMLayout{}).findings {
		if f.Kind == FindingDuplicate || f.Kind == FindingOverlap {
			rep.Findings = append(rep.Findings, f)
		}
	}
	sortFindings(rep.Findings)
	rep.OK = true
	for _, f := range rep.Findings {
		if f.Severity == cidr.SeverityError {
			rep.OK = false
		}
	}
	return rep
}
