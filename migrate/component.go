package migrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// podFlag returns the value of a flag on the command line of a pod's
// container (--flag=value or --flag value; the last one wins, as in the
// component's own flag parsing).
func podFlag(p *corev1.Pod, container, flag string) (string, bool) {
	for _, c := range p.Spec.Containers {
		if c.Name != container && len(p.Spec.Containers) > 1 {
			continue
		}
		val, found := "", false
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				val, found = v, true
			} else if a == flag && i+1 < len(args) {
				val, found = args[i+1], true
			}
		}
		return val, found
	}
	return "", false
}

// checkManifestDirs checks --manifests (a directory, read only) and --out
// (where rewritten manifests go, never the same directory).
func checkManifestDirs(manifests, out string) error {
	if out != "" && manifests == "" {
		return inputf("--out %s needs --manifests DIR: the manifests to rewrite", out)
	}
	if manifests == "" {
		return nil
	}
	if st, err := os.Stat(manifests); err != nil || !st.IsDir() {
		return inputf("--manifests %s: not a directory", manifests)
	}
	if out != "" {
		a, _ := filepath.Abs(out)
		b, _ := filepath.Abs(manifests)
		if a == b {
			return inputf("--out must differ from --manifests: the runbook never rewrites manifests in place")
		}
	}
	return nil
}

// renderManifest applies changes to the static-pod manifest name read from
// dir, adds the diff against its place on a control-plane node to sr and,
// with out, writes the result there. It returns the operator's instruction
// for a written manifest, "" otherwise (a missing manifest is skipped).
func renderManifest(dir, out, name string, changes []kubeadmcfg.FlagChange, sr *StepReport) (string, error) {
	path := filepath.Join(dir, name)
	mf, err := kubeadmcfg.ReadManifestFile(path)
	if errors.Is(err, os.ErrNotExist) {
		sr.Addf("%s: not found, skipped", path)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	before := slices.Clone(mf.Bytes())
	if err := mf.Apply(changes); err != nil {
		return "", err
	}
	target := filepath.Join(kubeadmcfg.DefaultManifestDir, name)
	if diff := kubeadmcfg.UnifiedDiff(target, target, before, mf.Bytes()); diff != "" {
		sr.Addf("diff for %s:\n%s", target, diff)
	} else {
		for _, c := range changes {
			sr.Addf("%s already has --%s=%s", path, strings.TrimPrefix(c.Flag, "--"), c.Value)
		}
	}
	if out == "" {
		return "", nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	outPath := filepath.Join(out, name)
	if err := kubeadmcfg.WriteFileAtomic(outPath, mf.Bytes()); err != nil {
		return "", err
	}
	sr.Addf("wrote %s", outPath)
	return fmt.Sprintf("copy %s to %s on every control-plane node (the kubelet restarts the static pod)", outPath, target), nil
}

// operatorGate is a step an operator carries out (a control-plane flag
// edit): described in ModePlan and ModeServerDryRun; in ModeApply it goes on
// once observe sees the change, or when the operator says so (cont), and
// otherwise pauses with the instructions.
type operatorGate struct {
	step    string
	instr   []string
	observe func(ctx context.Context) (bool, string, error)
	cont    bool
	resume  string
}

func (g operatorGate) run(ctx context.Context, mode Mode, sr *StepReport) error {
	if mode != ModeApply {
		sr.Details = append(sr.Details, g.instr...)
		sr.Addf("the runbook stops here (exit 3) until it observes the new flag, or is rerun with --continue")
		sr.Status = StatusOperator
		return nil
	}
	observed, why, err := g.observe(ctx)
	if err != nil {
		return err
	}
	switch {
	case observed:
		sr.Addf("observed: %s", why)
	case g.cont:
		sr.Addf("not observed (%s); --continue given: the operator confirmed the restart", why)
	default:
		sr.Addf("not observed yet: %s", why)
		return &Pause{Step: g.step, Instructions: g.instr, Observed: why, Resume: g.resume + "; add --continue if it cannot see it"}
	}
	sr.Note = sr.Details[len(sr.Details)-1]
	return nil
}

// kubeadmEdits is the part of a migration that rewrites kubeadm's
// ConfigMaps through the API.
type kubeadmEdits struct {
	// key is the journal key of the plan: it is journaled before Apply and
	// reused, so a run killed between two ConfigMap updates finishes them
	// (a fresh plan would see the first one done).
	key    string
	intent kubeadmcfg.Intent
	// ids are the kubeadmcfg edits to make (kubeadmcfg.EditKubeadmConfig, ...).
	ids []string
	// check, if set, looks at the plan before it is applied.
	check func(*kubeadmcfg.Plan, *StepReport)
}

func (k kubeadmEdits) run(ctx context.Context, kube kubernetes.Interface, snap *kubeadmcfg.Snapshot, env *Env, sr *StepReport) error {
	mode, j := env.Mode, env.Journal
	kp := &kubeadmcfg.Plan{}
	found := false
	var err error
	if j != nil && mode == ModeApply {
		if found, err = j.Get(k.key, kp); err != nil {
			return err
		}
	}
	if !found {
		kp, err = kubeadmcfg.NewPlan(snap, k.intent, kubeadmcfg.PlanOptions{KeepNodeIPAM: true})
		if errors.Is(err, kubeadmcfg.ErrNothingToDo) {
			sr.Addf("kubeadm ConfigMaps already hold %s", strings.Trim(k.intent.PodSubnet+" "+k.intent.ServiceSubnet, " "))
			return nil
		}
		if err != nil {
			return err
		}
		if j != nil && mode == ModeApply {
			if err := j.Put(k.key, kp); err != nil {
				return err
			}
		}
	}
	if k.check != nil {
		k.check(kp, sr)
	}
	var edits []string
	for _, e := range kp.ConfigMapEdits {
		if !slices.Contains(k.ids, e.ID) {
			continue
		}
		edits = append(edits, e.ID)
		sr.Addf("%s: %s", e.Ref, strings.Join(e.Changes, "; "))
	}
	if len(edits) == 0 {
		sr.Addf("kubeadm ConfigMaps: nothing to change")
		return nil
	}
	dry := map[Mode]kubeadmcfg.DryRun{ModePlan: kubeadmcfg.DryRunClient, ModeServerDryRun: kubeadmcfg.DryRunServer}[mode]
	res, err := kubeadmcfg.Apply(ctx, kube, kp, kubeadmcfg.ApplyOptions{DryRun: dry, Edits: edits, Lock: env.Lock})
	for _, e := range res.Events {
		sr.Addf("%s %s: %s", e.Edit, e.ConfigMap, e.Outcome)
	}
	return err
}

// preflight is run's check before the first write of the migration: the
// kubeadm ConfigMaps the cluster has can be planned for the intent, and the
// plan's target layout has no error, which kubeadmcfg.Apply refuses, but
// only once the steps before this one have written. A plan journaled by an
// earlier run of the same migration is the one run carries out: it passed
// this check when it was made.
func (k kubeadmEdits) preflight(ctx context.Context, kube kubernetes.Interface, env *Env) error {
	if env.Journal != nil && env.Mode == ModeApply {
		if ok, err := env.Journal.Get(k.key, &kubeadmcfg.Plan{}); err != nil || ok {
			return err
		}
	}
	snap, err := kubeadmcfg.Read(ctx, kube, kubeadmcfg.ReadOptions{})
	if err != nil {
		return err
	}
	present := map[string]bool{kubeadmcfg.EditKubeadmConfig: snap.Kubeadm != nil, kubeadmcfg.EditKubeProxy: snap.KubeProxy != nil, kubeadmcfg.EditKubeletConfig: snap.Kubelet != nil}
	if !slices.ContainsFunc(k.ids, func(id string) bool { return present[id] }) {
		return nil // the step has nothing to update either
	}
	want := intentString(k.intent)
	kp, err := kubeadmcfg.NewPlan(snap, k.intent, kubeadmcfg.PlanOptions{KeepNodeIPAM: true})
	if errors.Is(err, kubeadmcfg.ErrNothingToDo) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the kubeadm ConfigMaps cannot be set to %s: %w", want, err)
	}
	var errs []string
	for _, f := range kp.Findings {
		if f.Severity == cidr.SeverityError {
			errs = append(errs, f.String())
		}
	}
	if len(errs) > 0 {
		return inputf("the kubeadm ConfigMaps set to %s would hold a layout the components refuse: %s", want, strings.Join(errs, "; "))
	}
	return nil
}

// intentString names the subnets an intent sets ("podSubnet 10.240.0.0/12").
func intentString(i kubeadmcfg.Intent) string {
	var parts []string
	if i.PodSubnet != "" {
		parts = append(parts, "podSubnet "+i.PodSubnet)
	}
	if i.ServiceSubnet != "" {
		parts = append(parts, "serviceSubnet "+i.ServiceSubnet)
	}
	return strings.Join(parts, " ")
}

// nodeClusterJournal is where a node rewrite of the run keeps the copy of
// its journal (part is its subdirectory), or nil.
func nodeClusterJournal(env *Env, part string) *nodecidr.ClusterJournal {
	cs := env.ClusterJournal(part)
	if cs == nil {
		return nil
	}
	return &nodecidr.ClusterJournal{Namespace: cs.Namespace, Name: cs.Name, Keep: cs.Keep}
}
