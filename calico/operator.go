package calico

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// InstallationsV1 is the Tigera operator's Installation resource.
var InstallationsV1 = schema.GroupVersionResource{Group: "operator.tigera.io", Version: "v1", Resource: "installations"}

// InstallationName is the name of the Installation the operator reconciles.
const InstallationName = "default"

// OperatorInfo says whether the Tigera operator manages a pool.
type OperatorInfo struct {
	// Installed is true when an operator.tigera.io/v1 Installation named
	// "default" exists.
	Installed bool `json:"installed"`
	// ManagesPool is true when that Installation lists the pool (by name or
	// CIDR) in spec.calicoNetwork.ipPools, or the pool carries the operator's
	// managed-by label. The operator then reverts direct edits of the pool.
	ManagesPool bool `json:"managesPool"`
	// Index is the pool's position in spec.calicoNetwork.ipPools, or -1.
	Index int `json:"index"`
	// Entry is the Installation's name for the pool.
	Entry string `json:"entry,omitempty"`
}

// DetectOperator looks for the Tigera operator's Installation "default" and
// whether it manages pool. A cluster without the operator.tigera.io API, or
// without the Installation, is reported as not installed.
func DetectOperator(ctx context.Context, dyn dynamic.Interface, pool IPPool) (OperatorInfo, error) {
	info := OperatorInfo{Index: -1}
	if dyn == nil {
		return info, nil
	}
	inst, err := dyn.Resource(InstallationsV1).Get(ctx, InstallationName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return info, nil
	case err != nil:
		return info, fmt.Errorf("reading %s %q: %w", InstallationsV1.GroupResource(), InstallationName, err)
	}
	info.Installed = true
	pools, _, err := unstructuredNestedSlice(inst.Object, "spec", "calicoNetwork", "ipPools")
	if err != nil {
		return info, fmt.Errorf("reading Installation %q spec.calicoNetwork.ipPools: %w", InstallationName, err)
	}
	for i, e := range pools {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		name, _ := m["name"].(string)
		c, _ := m["cidr"].(string)
		if (name != "" && name == pool.Name) || (c != "" && c == pool.Spec.CIDR) {
			info.ManagesPool, info.Index, info.Entry = true, i, name
			break
		}
	}
	if pool.ManagedByOperator() {
		info.ManagesPool = true
	}
	return info, nil
}

func unstructuredNestedSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	var cur any = obj
	for i, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("%v is not an object", fields[:i])
		}
		cur, ok = m[f]
		if !ok || cur == nil {
			return nil, false, nil
		}
	}
	s, ok := cur.([]any)
	if !ok {
		return nil, false, fmt.Errorf("%v is %T, not a list", fields, cur)
	}
	return s, true, nil
}

// ErrWaitingForOperator is wrapped by *OperatorChangeError.
var ErrWaitingForOperator = errors.New("waiting for an operator change")

// OperatorChange is a change a person (or GitOps) must make to the Tigera
// operator's Installation, because the operator manages the pool and would
// revert a direct edit.
type OperatorChange struct {
	Pool string `json:"pool"`
	// Action is "disable" (stop new allocations) or "remove" (delete the pool).
	Action string `json:"action"`
	// Field is the Installation field to change, e.g.
	// spec.calicoNetwork.ipPools[0].disableNewAllocations.
	Field string `json:"field"`
	// Value is the value to set (empty for "remove").
	Value string `json:"value,omitempty"`
	// Alternative is another accepted change.
	Alternative string `json:"alternative,omitempty"`
	// Command is a kubectl command that makes the change.
	Command string `json:"command"`
}

// String describes the change in one line.
func (c OperatorChange) String() string {
	if c.Action == "remove" {
		return fmt.Sprintf("the Tigera operator manages IPPool %q: remove %s from Installation %q (%s)", c.Pool, c.Field, InstallationName, c.Command)
	}
	s := fmt.Sprintf("the Tigera operator manages IPPool %q: set %s to %s in Installation %q (%s)", c.Pool, c.Field, c.Value, InstallationName, c.Command)
	if c.Alternative != "" {
		s += "; or " + c.Alternative
	}
	return s
}

// OperatorChangeError stops Apply until the operator change is observed.
type OperatorChangeError struct {
	Change OperatorChange
}

// Error describes the problem in one line.
func (e *OperatorChangeError) Error() string {
	return "waiting for an operator change: " + e.Change.String() + "; run Apply again once it is made"
}

// Is reports whether target is ErrWaitingForOperator.
func (e *OperatorChangeError) Is(target error) bool { return target == ErrWaitingForOperator }

// DisableChange is the Installation change that stops new allocations from
// the pool (disableNewAllocations, or the "!all()" node selector).
func (info OperatorInfo) DisableChange(pool string) OperatorChange { return disableChange(pool, info) }

// RemoveChange is the Installation change that deletes the pool.
func (info OperatorInfo) RemoveChange(pool string) OperatorChange { return removeChange(pool, info) }

func disableChange(pool string, info OperatorInfo) OperatorChange {
	ch := OperatorChange{Pool: pool, Action: "disable", Value: "true"}
	if info.Index >= 0 {
		ch.Field = fmt.Sprintf("spec.calicoNetwork.ipPools[%d].disableNewAllocations", info.Index)
		ch.Alternative = fmt.Sprintf(`set spec.calicoNetwork.ipPools[%d].nodeSelector to "%s"`, info.Index, DisabledNodeSelector)
		ch.Command = fmt.Sprintf(`kubectl patch installation %s --type=json -p '[{"op":"add","path":"/spec/calicoNetwork/ipPools/%d/disableNewAllocations","value":true}]'`, InstallationName, info.Index)
	} else {
		ch.Field = "spec.calicoNetwork.ipPools[<entry for " + pool + ">].disableNewAllocations"
		ch.Alternative = fmt.Sprintf(`set that entry's nodeSelector to "%s"`, DisabledNodeSelector)
		ch.Command = "kubectl edit installation " + InstallationName
	}
	return ch
}

func removeChange(pool string, info OperatorInfo) OperatorChange {
	ch := OperatorChange{Pool: pool, Action: "remove"}
	if info.Index >= 0 {
		ch.Field = fmt.Sprintf("spec.calicoNetwork.ipPools[%d]", info.Index)
		p, _ := json.Marshal([]map[string]any{{"op": "remove", "path": fmt.Sprintf("/spec/calicoNetwork/ipPools/%d", info.Index)}})
		ch.Command = fmt.Sprintf("kubectl patch installation %s --type=json -p '%s'", InstallationName, p)
	} else {
		ch.Field = "spec.calicoNetwork.ipPools[<entry for " + pool + ">]"
		ch.Command = "kubectl edit installation " + InstallationName
	}
	return ch
}
