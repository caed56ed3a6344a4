package migrate

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cidrshift/cidrshift/cidr"
)

// MaxPerGroup is how many findings of one code WriteDoctorText lists; -o
// yaml lists them all.
const MaxPerGroup = 30

// WriteDoctorText writes a report for a person: the summary, the
// kube-controller-manager preflight, the findings grouped by severity and
// code with the fix of each code, the layout conflicts, the crashes, the
// node fix plan and the repairs. header is the first line.
func WriteDoctorText(w io.Writer, r *DoctorReport, header string) {
	fmt.Fprintln(w, header)
	fmt.Fprintf(w, "kube-controller-manager: %s  (from %s)\n", strings.Join(r.Flags.Args(), " "), r.FlagsSource)
	if r.ServiceRange != "" {
		fmt.Fprintf(w, "Service range: %s  (from %s)\n", r.ServiceRange, r.ServiceRangeSource)
	}
	for _, lw := range r.LayoutWarnings {
		fmt.Fprintf(w, "  note: %s\n", lw)
	}
	for _, nr := range r.NotRead {
		fmt.Fprintf(w, "  not read: %s\n", nr)
	}
	a := r.Audit
	verdict := "HEALTHY"
	if !r.Healthy {
		verdict = "PROBLEMS FOUND"
	}
	fmt.Fprintf(w, "\nSUMMARY: %s. %d nodes", verdict, a.Nodes)
	if a.Pods > 0 {
		fmt.Fprintf(w, ", %d pods", a.Pods)
	}
	fmt.Fprintf(w, "; %d errors, %d warnings", r.Count(cidr.SeverityError), r.Count(cidr.SeverityWarning))
	if r.FixPlan != nil {
		fmt.Fprintf(w, "; %d nodes need a new podCIDR", len(r.FixPlan.Steps))
	}
	if len(r.Repairs) > 0 {
		fmt.Fprintf(w, "; %d flannel repairs", len(r.Repairs))
	}
	fmt.Fprintln(w)
	for _, c := range a.Capacity {
		fmt.Fprintf(w, "  %s %s in /%d subnets: %s total, %s used, %s reserved for Services, %s free",
			c.Family, c.ClusterCIDR, c.NodeMask, c.Subnets, c.Used, c.Reserved, c.Free)
		if c.NodesWithout > 0 {
			fmt.Fprintf(w, "; %d nodes without one", c.NodesWithout)
		}
		fmt.Fprintln(w)
	}
	writePreflight(w, "  kube-controller-manager with the current flags", r.ControllerManager)
	if r.Proposed != nil {
		writePreflight(w, "  kube-controller-manager with "+strings.Join(r.Proposed.Flags.Args()[1:], " "), r.Proposed.Result)
	}
	writeFindings(w, r.Findings)
	writeConflicts(w, r)
	writeCrashes(w, r)
	writeFixPlan(w, r)
}

func writeFindings(w io.Writer, findings []DoctorFinding) {
	for _, sev := range []cidr.Severity{cidr.SeverityError, cidr.SeverityWarning, cidr.SeverityInfo} {
		var codes []Code
		byCode := map[Code][]DoctorFinding{}
		for _, f := range findings {
			if f.Severity != sev {
				continue
			}
			if _, ok := byCode[f.Code]; !ok {
				codes = append(codes, f.Code)
			}
			byCode[f.Code] = append(byCode[f.Code], f)
		}
		if len(codes) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%sS\n", strings.ToUpper(string(sev)))
		for _, c := range codes {
			fs := byCode[c]
			fmt.Fprintf(w, "  %s (%d)\n", c, len(fs))
			for i, f := range fs {
				if i == MaxPerGroup {
					fmt.Fprintf(w, "    ... and %d more (-o yaml lists them all)\n", len(fs)-MaxPerGroup)
					break
				}
				fmt.Fprintf(w, "    - %s\n", f.Message)
			}
			if fs[0].Fix != "" {
				fmt.Fprintf(w, "    fix: %s\n", fs[0].Fix)
			}
		}
	}
}

func writeConflicts(w io.Writer, r *DoctorReport) {
	var conflicts []string
	for _, c := range r.Conflicts {
		conflicts = append(conflicts, "current flags: "+c.String())
	}
	if r.Proposed != nil {
		for _, c := range r.Proposed.Conflicts {
			conflicts = append(conflicts, "proposed flags: "+c.String())
		}
	}
	if len(conflicts) > 0 {
		fmt.Fprintln(w, "\nLAYOUT CONFLICTS")
		for _, c := range conflicts {
			fmt.Fprintf(w, "  - %s\n", c)
		}
	}
}

func writeCrashes(w io.Writer, r *DoctorReport) {
	var crashes []string
	for _, c := range r.ControllerManager.Crashes {
		crashes = append(crashes, "current flags: "+c.Message)
	}
	if r.Proposed != nil {
		for _, c := range r.Proposed.Result.Crashes {
			crashes = append(crashes, "proposed flags: "+c.Message)
		}
	}
	if len(crashes) == 0 {
		return
	}
	fmt.Fprintln(w, "\nKUBE-CONTROLLER-MANAGER CRASHES")
	for i, c := range crashes {
		if i == MaxPerGroup {
			fmt.Fprintf(w, "  ... and %d more (-o yaml lists them all)\n", len(crashes)-MaxPerGroup)
			break
		}
		fmt.Fprintf(w, "  - %s\n", c)
	}
}

func writeFixPlan(w io.Writer, r *DoctorReport) {
	switch {
	case r.FixPlan != nil:
		p := r.FixPlan
		fmt.Fprintf(w, "\nFIX PLAN %s: %d nodes (workers by name, control plane last)\n", p.ID(), len(p.Steps))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tACTION\tOLD\tNEW\tWHY")
		for _, s := range p.Steps {
			old := strings.Join(s.OldPodCIDRs, ",")
			if old == "" {
				old = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", s.Node, s.Action, old, strings.Join(s.NewPodCIDRs, ","), s.Reason)
		}
		tw.Flush()
		for _, warn := range p.Warnings {
			fmt.Fprintln(w, "  warning:", warn)
		}
		cluster := r.Flags.ClusterCIDR
		if p.Layout != nil && len(p.Layout.ClusterCIDRs) > 0 {
			cluster = join(p.Layout.ClusterCIDRs)
		}
		fmt.Fprintf(w, "  Carry it out with: noderecreate --fix --cluster-cidr %s%s --apply --cordon --delete-pods\n", cluster, maskArg(r.Flags))
		fmt.Fprintln(w, "  (recreate = delete + create with the new podCIDR, journaled and resumable; patch = the allowed update of an empty podCIDR)")
	case r.FixPlanError != "":
		fmt.Fprintf(w, "\nNO FIX PLAN: %s\n", r.FixPlanError)
	}
	if len(r.Repairs) > 0 {
		fmt.Fprintf(w, "\nREPAIRS: %d\n", len(r.Repairs))
		for _, rp := range r.Repairs {
			fmt.Fprintf(w, "  %s: node %s %s %s -> %s\n", rp.Code, rp.Node, rp.Annotation, rp.From, rp.To)
			for _, c := range rp.Commands {
				fmt.Fprintf(w, "    $ %s\n", c)
			}
		}
	}
}

// maskArg is the --node-mask argument of the flags' mask, if one is set.
func maskArg(f cidr.ControllerManagerFlags) string {
	switch {
	case f.NodeCIDRMaskSize != 0:
		return " --node-mask " + strconv.Itoa(f.NodeCIDRMaskSize)
	case f.NodeCIDRMaskSizeIPv4 != 0 && f.NodeCIDRMaskSizeIPv6 != 0:
		return fmt.Sprintf(" --node-mask %d,%d", f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6)
	}
	return ""
}

func writePreflight(w io.Writer, what string, res cidr.PreflightResult) {
	switch {
	case res.IPAMDisabled:
		fmt.Fprintf(w, "%s: node IPAM disabled (--allocate-node-cidrs=false)\n", what)
	case res.WouldStart:
		fmt.Fprintf(w, "%s: starts\n", what)
	case len(res.FlagErrors) > 0:
		fmt.Fprintf(w, "%s: REFUSES the flags: %s\n", what, strings.Join(res.FlagErrors, "; "))
	default:
		fmt.Fprintf(w, "%s: CRASH-LOOPS on %d node(s), listed below\n", what, len(res.Crashes))
	}
}
