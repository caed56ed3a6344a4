//go:build linux

package nodenet

import (
	"context"

	"github.com/go-logr/logr"
)

// Audit reads the node's pod network (in Want.NetNS, or the caller's
// namespace) and its files and reports what differs from want. It changes
// nothing. Bad input (a malformed Want, no RunFlannelDir, no usable iptables,
// an unknown iptables backend) is an error, not a finding.
func Audit(ctx context.Context, want Want) (*Report, error) {
	w, err := want.normalize()
	if err != nil {
		return nil, err
	}
	h, err := openHost(w)
	if err != nil {
		return nil, err
	}
	defer h.close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := h.snapshot()
	if err != nil {
		return nil, err
	}
	r := analyze(w, s)
	log := logr.FromContextOrDiscard(ctx)
	log.V(1).Info("audited node network", "node", w.Node, "podCIDR", w.PodCIDR, "iptables", h.backend,
		"findings", len(r.Findings), "errors", len(r.Errors()))
	return r, nil
}

// Verify proves the end state: it audits the node and returns
// *NotConvergedError (wrapping ErrNotConverged) while any finding of error
// severity is left. The report is returned in both cases.
func Verify(ctx context.Context, want Want) (*Report, error) {
	r, err := Audit(ctx, want)
	if err != nil {
		return nil, err
	}
	if errs := r.Errors(); len(errs) > 0 {
		return r, &NotConvergedError{Node: r.Node, Findings: errs}
	}
	return r, nil
}
