package kubeadmcfg

import (
	"context"
	"fmt"
	"slices"

	"github.com/cidrshift/cidrshift/internal/lease"
	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DryRun selects how Apply writes.
type DryRun string

// The dry-run modes.
const (
	// DryRunNone writes for real.
	DryRunNone DryRun = ""
	// DryRunClient reads and checks everything but writes nothing.
	DryRunClient DryRun = "client"
	// DryRunServer sends every write with metav1.DryRunAll: the API server
	// validates and admits it but does not persist it.
	DryRunServer DryRun = "server"
)

// ParseDryRun parses a --dry-run value: "", "none", "client" or "server".
func ParseDryRun(s string) (DryRun, error) {
	switch s {
	case "", "none":
		return DryRunNone, nil
	case "client", "server":
		return DryRun(s), nil
	}
	return "", invalid("", "--dry-run", s, "must be none, client or server")
}

// Outcome is what Apply did with one edit.
type Outcome string

// The outcomes of an edit.
const (
	// OutcomeUpdated: the ConfigMap was updated (or, with DryRunServer, the server accepted the update).
	OutcomeUpdated Outcome = "updated"
	// OutcomeUnchanged: the ConfigMap already held the new content (the plan was applied before).
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeWouldUpdate: DryRunClient; the update was checked but not sent.
	OutcomeWouldUpdate Outcome = "would-update"
)

// Event reports one edit Apply handled.
type Event struct {
	Edit      string  `json:"edit"`
	ConfigMap string  `json:"configMap"`
	Outcome   Outcome `json:"outcome"`
	DryRun    DryRun  `json:"dryRun,omitempty"`
	// ResourceVersion is the ConfigMap's resourceVersion after the update.
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// DryRun selects client or server dry-run.
	DryRun DryRun
	// Progress, when set, is called after each edit (from the calling goroutine).
	Progress func(Event)
	// Edits limits Apply to the ConfigMapEdits with these IDs; empty means all.
	Edits []string
	// SkipAccessCheck skips the SelfSubjectAccessReviews made before the first write.
	SkipAccessCheck bool
	// Lock, when set, is taken before the first write and held until Apply
	// returns (dry runs do not take it); Apply checks it is still held
	// before each edit and stops when it is not. Use the Lease of
	// LockScope.
	Lock Locker
}

// LockScope names the Lease that serialises kubeadm configuration rewrites
// across operators.
const LockScope = lease.ScopeKubeadmConfig

// Locker is a cluster-wide lock such as a coordination.k8s.io Lease.
type Locker interface {
	// Lock takes the lock, or fails at once when another run holds it, and
	// returns the function that releases it. The holder may call it again.
	Lock(ctx context.Context) (release func(), err error)
	// Check returns nil while the lock is still held; Apply calls it
	// before each write.
	Check() error
}

// ApplyResult lists what Apply did.
type ApplyResult struct {
	Events []Event `json:"events"`
}

// Apply makes the plan's ConfigMap edits, the ones that live in the API
// (the manifest edits are made on each control-plane node with
// ApplyManifestChanges, in the order of the plan's steps). Before the first
// write it checks with SelfSubjectAccessReviews that the caller may get and
// update every ConfigMap concerned. Each edit is an update carrying the
// resourceVersion the plan was made from, so a ConfigMap edited since is
// refused (ErrStalePlan) rather than overwritten, by Apply's own check or by
// the API server's conflict. Apply is idempotent: an edit whose ConfigMap
// already holds the new content is reported unchanged. A plan whose target
// has error findings is refused.
func Apply(ctx context.Context, client kubernetes.Interface, p *Plan, opts ApplyOptions) (ApplyResult, error) {
	log := logr.FromContextOrDiscard(ctx)
	var res ApplyResult
	if p == nil {
		return res, fmt.Errorf("%w: nil plan", ErrInvalid)
	}
	if _, err := ParseDryRun(string(opts.DryRun)); err != nil {
		return res, err
	}
	if p.Blocked() {
		return res, fmt.Errorf("%w: the plan's target layout has errors (see its findings); refusing to apply it", ErrInvalid)
	}
	var edits []ConfigMapEdit
	for _, e := range p.ConfigMapEdits {
		if len(opts.Edits) == 0 || slices.Contains(opts.Edits, e.ID) {
			edits = append(edits, e)
		}
	}
	for _, id := range opts.Edits {
		if !slices.ContainsFunc(p.ConfigMapEdits, func(e ConfigMapEdit) bool { return e.ID == id }) {
			return res, &FieldError{Field: "edits", Value: id, Reason: "the plan has no ConfigMap edit with this ID", Err: ErrNotFound}
		}
	}
	if !opts.SkipAccessCheck && opts.DryRun != DryRunClient {
		if err := checkAccess(ctx, client, edits); err != nil {
			return res, err
		}
	}
	if opts.DryRun == DryRunNone {
		release, err := lease.Hold(ctx, opts.Lock)
		if err != nil {
			return res, err
		}
		defer release()
	}
	for _, e := range edits {
		if opts.DryRun == DryRunNone {
			if err := lease.CheckHeld(opts.Lock, "not editing ConfigMap "+e.Ref.String()); err != nil {
				return res, err
			}
		}
		ev, err := applyEdit(ctx, client, e, opts.DryRun)
		if err != nil {
			return res, err
		}
		log.Info("ConfigMap edit", "edit", e.ID, "configMap", e.Ref.String(), "outcome", ev.Outcome, "dryRun", string(opts.DryRun))
		res.Events = append(res.Events, ev)
		if opts.Progress != nil {
			opts.Progress(ev)
		}
	}
	return res, nil
}

func checkAccess(ctx context.Context, client kubernetes.Interface, edits []ConfigMapEdit) error {
	for _, e := range edits {
		for _, verb := range []string{"get", "update"} {
			r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: e.Ref.Namespace, Verb: verb, Resource: "configmaps", Name: e.Ref.Name},
			}}
			out, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, r, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("checking permission to %s ConfigMap %s/%s: %w", verb, e.Ref.Namespace, e.Ref.Name, err)
			}
			if !out.Status.Allowed {
				why := out.Status.Reason
				if why == "" {
					why = "not allowed"
				}
				return fmt.Errorf("%w: cannot %s ConfigMap %s/%s (%s); nothing was changed", ErrForbidden, verb, e.Ref.Namespace, e.Ref.Name, why)
			}
		}
	}
	return nil
}

func applyEdit(ctx context.Context, client kubernetes.Interface, e ConfigMapEdit, dry DryRun) (Event, error) {
	ev := Event{Edit: e.ID, ConfigMap: e.Ref.String(), DryRun: dry}
	cms := client.CoreV1().ConfigMaps(e.Ref.Namespace)
	cm, err := cms.Get(ctx, e.Ref.Name, metav1.GetOptions{})
	if err != nil {
		return ev, fmt.Errorf("reading %s: %w", e.Ref, err)
	}
	stale := func(why string) error {
		return fmt.Errorf("%w: %s %s; make a new plan", ErrStalePlan, e.Ref, why)
	}
	cur, ok := cm.Data[e.Ref.Key]
	switch {
	case !ok:
		return ev, stale("has no key " + e.Ref.Key + " any more")
	case cur == e.After:
		ev.Outcome, ev.ResourceVersion = OutcomeUnchanged, cm.ResourceVersion
		return ev, nil
	case e.Ref.UID != "" && string(cm.UID) != e.Ref.UID:
		return ev, stale(fmt.Sprintf("was recreated (uid %s, the plan read %s)", cm.UID, e.Ref.UID))
	case e.Ref.ResourceVersion != "" && cm.ResourceVersion != e.Ref.ResourceVersion:
		return ev, stale(fmt.Sprintf("changed since the plan was made (resourceVersion %s, the plan read %s)", cm.ResourceVersion, e.Ref.ResourceVersion))
	case cur != e.Before:
		return ev, stale("does not hold what the plan read")
	}
	if dry == DryRunClient {
		ev.Outcome = OutcomeWouldUpdate
		return ev, nil
	}
	upd := cm.DeepCopy()
	upd.Data[e.Ref.Key] = e.After
	if e.Ref.ResourceVersion != "" {
		upd.ResourceVersion = e.Ref.ResourceVersion
	}
	var uo metav1.UpdateOptions
	if dry == DryRunServer {
		uo.DryRun = []string{metav1.DryRunAll}
	}
	out, err := cms.Update(ctx, upd, uo)
	if apierrors.IsConflict(err) {
		return ev, fmt.Errorf("%w: %s was changed by someone else during the update: %w", ErrStalePlan, e.Ref, err)
	}
	if err != nil {
		return ev, fmt.Errorf("updating %s: %w", e.Ref, err)
	}
	ev.Outcome, ev.ResourceVersion = OutcomeUpdated, out.ResourceVersion
	return ev, nil
}
