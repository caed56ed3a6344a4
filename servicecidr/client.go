package servicecidr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/lease"
)

// Options configures New.
type Options struct {
	// Kube is required: Services, typed v1/v1beta1 ServiceCIDRs, access reviews.
	Kube kubernetes.Interface
	// Dynamic is needed only when the cluster serves v1alpha1 (Kubernetes
	// 1.29-1.30), whose types left k8s.io/api; it is also used for a v1alpha1
	// IPAddress API.
	Dynamic dynamic.Interface
	// Discovery defaults to Kube.Discovery().
	Discovery discovery.DiscoveryInterface
	// APIVersion forces a version instead of discovering the newest served one.
	APIVersion APIVersion
}

// Client reads and writes ServiceCIDRs in whichever API version the cluster
// serves, and the Services whose ClusterIPs they hold. It is safe for
// concurrent use.
type Client struct {
	kube      kubernetes.Interface
	dyn       dynamic.Interface
	version   APIVersion
	ipVersion APIVersion
	server    ServerInfo
	sc        backend
	ips       ipBackend
}

// New discovers the newest served ServiceCIDR version (v1, then v1beta1, then
// v1alpha1) and the IPAddress version, and returns a Client for them. When
// none is served it returns a *NotServedError (errors.Is ErrNotServed) that
// says what to enable for the cluster's Kubernetes version.
func New(ctx context.Context, opts Options) (*Client, error) {
	if opts.Kube == nil {
		return nil, &FieldError{Field: "Options.Kube", Reason: "a kubernetes.Interface is required", Err: ErrInvalid}
	}
	if opts.APIVersion != "" && !opts.APIVersion.valid() {
		return nil, &FieldError{Field: "Options.APIVersion", Value: string(opts.APIVersion), Reason: "valid versions are v1, v1beta1 and v1alpha1", Err: ErrInvalid}
	}
	disc := opts.Discovery
	if disc == nil {
		disc = opts.Kube.Discovery()
	}
	log := logr.FromContextOrDiscard(ctx)
	c := &Client{kube: opts.Kube, dyn: opts.Dynamic}
	if info, err := disc.ServerVersion(); err == nil {
		c.server = ParseServerVersion(info)
	} else {
		log.V(1).Info("server version unknown", "err", err)
	}

	served := func(v APIVersion, resource string) (bool, error) {
		l, err := disc.ServerResourcesForGroupVersion(v.GroupVersion())
		if err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, fmt.Errorf("discovering %s: %w", v.GroupVersion(), err)
		}
		for _, r := range l.APIResources {
			if r.Name == resource {
				return true, nil
			}
		}
		return false, nil
	}

	if opts.APIVersion != "" {
		c.version = opts.APIVersion
	} else {
		for _, v := range Versions() {
			ok, err := served(v, "servicecidrs")
			if err != nil {
				return nil, err
			}
			if ok {
				c.version = v
				break
			}
		}
		if c.version == "" {
			return nil, &NotServedError{ServerVersion: c.server.GitVersion, Minor: c.server.Minor, Advice: Advice(c.server.Minor)}
		}
	}
	for _, v := range Versions() {
		ok, err := served(v, "ipaddresses")
		if err != nil {
			log.V(1).Info("IPAddress discovery failed; using range math", "err", err)
			break
		}
		if ok && (v != V1alpha1 || opts.Dynamic != nil) {
			c.ipVersion = v
			break
		}
	}

	switch c.version {
	case V1:
		c.sc = v1Backend(opts.Kube)
	case V1beta1:
		c.sc = v1beta1Backend(opts.Kube)
	case V1alpha1:
		if opts.Dynamic == nil {
			return nil, &FieldError{Field: "Options.Dynamic", Reason: "the cluster serves ServiceCIDR only as networking.k8s.io/v1alpha1, which needs a dynamic client (k8s.io/api has no v1alpha1 types)", Err: ErrInvalid}
		}
		c.sc = dynamicBackend{opts.Dynamic, V1alpha1}
	}
	switch c.ipVersion {
	case V1:
		c.ips = v1IPBackend(opts.Kube)
	case V1beta1:
		c.ips = v1beta1IPBackend(opts.Kube)
	case V1alpha1:
		c.ips = dynamicIPBackend{opts.Dynamic, V1alpha1}
	}
	log.V(1).Info("ServiceCIDR API", "version", c.version, "ipAddressVersion", c.ipVersion, "server", c.server.GitVersion)
	return c, nil
}

// APIVersion is the ServiceCIDR version the client uses.
func (c *Client) APIVersion() APIVersion { return c.version }

// IPAddressVersion is the IPAddress version used to map ClusterIPs to their
// owners, or "" when none is served and range math is used instead.
func (c *Client) IPAddressVersion() APIVersion { return c.ipVersion }

// Server is what discovery said about the API server.
func (c *Client) Server() ServerInfo { return c.server }

// Kube returns the clientset the client was built with.
func (c *Client) Kube() kubernetes.Interface { return c.kube }

func sortServiceCIDRs(s []ServiceCIDR) {
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
}

// List returns every ServiceCIDR, sorted by name.
func (c *Client) List(ctx context.Context) ([]ServiceCIDR, error) {
	out, err := c.sc.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing ServiceCIDRs (%s): %w", c.version.GroupVersion(), err)
	}
	sortServiceCIDRs(out)
	return out, nil
}

// Get returns one ServiceCIDR. A missing one is an error matching
// apierrors.IsNotFound.
func (c *Client) Get(ctx context.Context, name string) (ServiceCIDR, error) {
	sc, err := c.sc.get(ctx, name)
	if err != nil {
		return ServiceCIDR{}, fmt.Errorf("getting ServiceCIDR %s: %w", name, err)
	}
	return sc, nil
}

// WriteOptions tunes a write.
type WriteOptions struct {
	// DryRun sends the request with dryRun=All: the API server validates and
	// admits it but stores nothing.
	DryRun bool
	// Lock, when set, is taken before the write and held until the call
	// returns (a dry run takes none). A run may pass the lock it holds: one
	// it no longer holds is refused before the write. Use the Lease of
	// LockScope.
	Lock Locker
}

func dryRunOpt(dry bool) []string {
	if dry {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// Create creates a ServiceCIDR named name with the given CIDRs after checking
// them with ValidateCIDRs (canonical, at most one per family).
func (c *Client) Create(ctx context.Context, name string, cidrs []netip.Prefix, opts WriteOptions) (ServiceCIDR, error) {
	if name == "" {
		return ServiceCIDR{}, &FieldError{Field: "ServiceCIDR name", Reason: "a name is required", Err: ErrInvalid}
	}
	if err := ValidateCIDRs("spec.cidrs", cidrs); err != nil {
		return ServiceCIDR{}, err
	}
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, "not creating ServiceCIDR "+name)
	if err != nil {
		return ServiceCIDR{}, err
	}
	defer release()
	out, err := c.sc.create(ctx, ServiceCIDR{Name: name, CIDRs: cidrs}, dryRunOpt(opts.DryRun))
	if err != nil {
		return ServiceCIDR{}, fmt.Errorf("creating ServiceCIDR %s %v: %w", name, cidrs, err)
	}
	logr.FromContextOrDiscard(ctx).Info("created ServiceCIDR", "name", name, "cidrs", cidrs, "dryRun", opts.DryRun)
	return out, nil
}

// AddFamily turns a single-stack ServiceCIDR dual-stack by appending a prefix
// of the other family: the only change the API server allows to spec.cidrs.
func (c *Client) AddFamily(ctx context.Context, name string, p netip.Prefix, opts WriteOptions) (ServiceCIDR, error) {
	live, err := c.Get(ctx, name)
	if err != nil {
		return ServiceCIDR{}, err
	}
	next := live
	next.CIDRs = append(slices.Clone(live.CIDRs), p)
	if err := ValidateUpdate(live, next); err != nil {
		return ServiceCIDR{}, err
	}
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, fmt.Sprintf("not adding %s to ServiceCIDR %s", p, name))
	if err != nil {
		return ServiceCIDR{}, err
	}
	defer release()
	out, err := c.sc.update(ctx, next, dryRunOpt(opts.DryRun))
	if err != nil {
		return ServiceCIDR{}, fmt.Errorf("adding %s to ServiceCIDR %s: %w", p, name, err)
	}
	return out, nil
}

// DeleteOptions tunes Delete.
type DeleteOptions struct {
	DryRun bool
	// UID and ResourceVersion, when set, are sent as preconditions: the API
	// server refuses the delete if the object changed.
	UID             string
	ResourceVersion string
	// Lock, when set, is taken before the delete and held until Delete
	// returns (a dry run takes none). A run may pass the lock it holds: one
	// it no longer holds is refused before the delete. Use the Lease of
	// LockScope.
	Lock Locker
}

// Delete requests deletion of a ServiceCIDR. It stays Terminating until
// kube-controller-manager sees that no IPAddress depends only on it.
// Delete refuses (ErrLastServiceCIDR) when the ServiceCIDR is the last one
// that can hand out ClusterIPs for one of its families: the cluster could no
// longer create Services of that family.
func (c *Client) Delete(ctx context.Context, name string, opts DeleteOptions) error {
	all, err := c.List(ctx)
	if err != nil {
		return err
	}
	idx := slices.IndexFunc(all, func(s ServiceCIDR) bool { return s.Name == name })
	if idx < 0 {
		return fmt.Errorf("deleting ServiceCIDR %s: %w", name, apierrors.NewNotFound(ServiceCIDRResource(c.version).GroupResource(), name))
	}
	target := all[idx]
	if target.Terminating() {
		return nil
	}
	if err := checkNotLast(target, all); err != nil {
		return err
	}
	del := metav1.DeleteOptions{DryRun: dryRunOpt(opts.DryRun)}
	if opts.UID != "" || opts.ResourceVersion != "" {
		del.Preconditions = &metav1.Preconditions{}
		if opts.UID != "" {
			uid := types.UID(opts.UID)
			del.Preconditions.UID = &uid
		}
		if opts.ResourceVersion != "" {
			rv := opts.ResourceVersion
			del.Preconditions.ResourceVersion = &rv
		}
	}
	release, err := holdFor(ctx, opts.Lock, opts.DryRun, "not deleting ServiceCIDR "+name)
	if err != nil {
		return err
	}
	defer release()
	if err := c.sc.delete(ctx, name, del); err != nil {
		return fmt.Errorf("deleting ServiceCIDR %s: %w", name, err)
	}
	logr.FromContextOrDiscard(ctx).Info("requested ServiceCIDR deletion", "name", name, "dryRun", opts.DryRun)
	return nil
}

// holdFor takes l around one write that is not a dry run; what says what is
// not done when it cannot be taken or is no longer held.
func holdFor(ctx context.Context, l Locker, dryRun bool, what string) (release func(), err error) {
	if dryRun {
		return func() {}, nil
	}
	return lease.HoldFor(ctx, l, what)
}

// checkNotLast refuses when no other ServiceCIDR that is not being deleted
// remains, or none covers one of the cluster's Service families (those of the
// default "kubernetes" ServiceCIDR, or else of target).
func checkNotLast(target ServiceCIDR, all []ServiceCIDR) error {
	families := map[cidr.Family]bool{}
	for _, s := range all {
		if s.Name == DefaultServiceCIDRName {
			for _, p := range s.CIDRs {
				families[cidr.FamilyOf(p)] = true
			}
		}
	}
	if len(families) == 0 {
		for _, p := range target.CIDRs {
			families[cidr.FamilyOf(p)] = true
		}
	}
	others := 0
	covers := map[cidr.Family]bool{}
	for _, o := range all {
		if o.Name == target.Name || o.Terminating() {
			continue
		}
		others++
		for _, q := range o.CIDRs {
			covers[cidr.FamilyOf(q)] = true
		}
	}
	for _, p := range target.CIDRs {
		fam := cidr.FamilyOf(p)
		if others > 0 && (covers[fam] || !families[fam]) {
			continue
		}
		return &FieldError{Field: "ServiceCIDR " + target.Name, Value: p.String(),
			Reason: fmt.Sprintf("it is the last ServiceCIDR for %s that is not being deleted; the cluster could not allocate %s ClusterIPs any more: create the new ServiceCIDR first and wait until it is Ready", fam, fam),
			Err:    ErrLastServiceCIDR}
	}
	return nil
}

// WaitOptions bounds a wait.
type WaitOptions struct {
	// Timeout defaults to two minutes.
	Timeout time.Duration
	// Interval between polls; defaults to one second.
	Interval time.Duration
	// UID, for WaitDeleted, names the incarnation to wait for: kube-apiserver
	// recreates the "kubernetes" ServiceCIDR under the same name from its
	// flags, and that new object must not be mistaken for the old one. Empty
	// means the object found by the first poll.
	UID types.UID
}

func (o WaitOptions) withDefaults() WaitOptions {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	return o
}

// poll calls f every interval until it returns done or an error, or the
// timeout or ctx ends; it returns context.DeadlineExceeded on timeout.
func poll(ctx context.Context, o WaitOptions, f func() (bool, error)) error {
	o = o.withDefaults()
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		done, err := f()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return context.DeadlineExceeded
		case <-tick.C:
		}
	}
}

// WaitReady waits until the ServiceCIDR is Ready, and fails at once if it is
// being deleted. On timeout the error (ErrNotReady) carries the last
// condition the controllers set.
func (c *Client) WaitReady(ctx context.Context, name string, opts WaitOptions) (ServiceCIDR, error) {
	var last ServiceCIDR
	err := poll(ctx, opts, func() (bool, error) {
		sc, err := c.Get(ctx, name)
		if err != nil {
			return false, err
		}
		last = sc
		if sc.Terminating() {
			return false, fmt.Errorf("%w: ServiceCIDR %s is being deleted and will never be Ready", ErrNotReady, name)
		}
		return sc.IsReady(), nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		why := "no Ready condition yet: is kube-controller-manager running with the service-cidr-controller (and, before 1.33, --feature-gates=MultiCIDRServiceAllocator=true)?"
		if last.Ready != nil {
			why = fmt.Sprintf("Ready=%s reason %q: %s", last.Ready.Status, last.Ready.Reason, last.Ready.Message)
		}
		return last, fmt.Errorf("%w: ServiceCIDR %s after %s: %s", ErrNotReady, name, opts.withDefaults().Timeout, why)
	}
	return last, err
}

// WaitDeleted waits until the ServiceCIDR is gone. On timeout it returns a
// *DeletionBlockedError (errors.Is ErrDeletionBlocked) whose report lists
// the IPAddresses and Services that still hold it.
func (c *Client) WaitDeleted(ctx context.Context, name string, opts WaitOptions) error {
	uid := opts.UID
	err := poll(ctx, opts, func() (bool, error) {
		sc, err := c.sc.get(ctx, name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if uid == "" {
			uid = sc.UID
		}
		return sc.UID != uid, nil // replaced by a new incarnation: the old one is gone
	})
	if errors.Is(err, context.DeadlineExceeded) {
		rep, rerr := c.ExplainDeletion(ctx, name)
		if rerr != nil {
			return fmt.Errorf("%w: ServiceCIDR %s still exists after %s (explaining it failed: %v)", ErrDeletionBlocked, name, opts.withDefaults().Timeout, rerr)
		}
		return &DeletionBlockedError{Report: rep}
	}
	return err
}
