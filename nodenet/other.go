//go:build !linux

package nodenet

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

func unsupported(op string) error {
	return fmt.Errorf("nodenet: %s reads and changes Linux network state (netlink, iptables): %w on %s", op, errors.ErrUnsupported, runtime.GOOS)
}

// Audit reads the node's pod network and reports what differs from want. Off
// Linux it returns an error matching errors.ErrUnsupported.
func Audit(ctx context.Context, want Want) (*Report, error) { return nil, unsupported("Audit") }

// Verify proves the end state. Off Linux it returns an error matching
// errors.ErrUnsupported.
func Verify(ctx context.Context, want Want) (*Report, error) { return nil, unsupported("Verify") }

// Apply carries out a plan on the node. Off Linux it returns an error
// matching errors.ErrUnsupported.
func Apply(ctx context.Context, want Want, plan *Plan, opts ApplyOptions) (*Result, error) {
	return nil, unsupported("Apply")
}
