package calicotest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
)

// IPAM stands in for Calico's CNI plugin and IPAM where no Calico runs (a
// fake clientset, or a real API server without nodes running Calico): it
// gives every pod that has no address one from an enabled Calico pool, the
// way calico-ipam does, and writes it to the pod's status.podIP(s).
//
//   - Pools are read through Pools on every pass, so disabling a pool (or
//     setting its nodeSelector to "!all()") stops allocations from it at
//     once, as with Calico. Only pools whose allowedUses include Workload
//     are used, in name order; node selectors other than all() are treated
//     as matching every node.
//   - Each pool is cut into blocks of its blockSize; a node uses its own
//     blocks first and then claims the lowest free block, as Calico's
//     block affinity does. Addresses are taken lowest first.
//   - One address is given per IP family that has an enabled pool.
//   - Pods that finished or are being deleted release their addresses.
//   - With Dynamic set, the allocations are mirrored into
//     crd.projectcalico.org/v1 IPAMBlocks and BlockAffinities (Calico's
//     layout: allocations, attributes with handle_id and secondary
//     namespace/node/pod, unallocated), so block reports see them; blocks
//     that become empty keep their affinity, as with Calico.
//   - With MarkReady, pods also get phase Running and Ready conditions, as a
//     kubelet would report once their containers run.
type IPAM struct {
	Kube      kubernetes.Interface
	Pools     calico.PoolStore
	Dynamic   dynamic.Interface
	MarkReady bool
	mu        sync.Mutex
}

type poolInfo struct {
	pool calico.IPPool
	pfx  netip.Prefix
	bs   int
}

type blockState struct {
	pfx  netip.Prefix
	node string
	// used maps an address ordinal to the pod holding it.
	used map[int]*corev1.Pod
}

// Sync runs one pass: assign addresses, then mirror the IPAM state.
func (m *IPAM) Sync(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	pools, err := m.Pools.List(ctx)
	if err != nil {
		return err
	}
	var all, enabled []poolInfo
	for _, p := range pools {
		pfx, err := p.Prefix()
		if err != nil {
			continue
		}
		bs := p.EffectiveBlockSize()
		if bs < pfx.Bits() || bs-pfx.Bits() > 20 || pfx.Addr().BitLen()-bs > 12 {
			continue
		}
		pi := poolInfo{pool: p, pfx: pfx, bs: bs}
		all = append(all, pi)
		if !p.AllocationStopped() && slices.Contains(p.EffectiveAllowedUses(), calico.UseWorkload) {
			enabled = append(enabled, pi)
		}
	}
	list, err := m.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	blocks := map[netip.Prefix]*blockState{}
	blockOf := func(ip netip.Addr) (*blockState, int) {
		for _, pi := range all {
			if !pi.pfx.Contains(ip) {
				continue
			}
			bp, _ := ip.Prefix(pi.bs)
			b, ok := blocks[bp]
			if !ok {
				b = &blockState{pfx: bp, used: map[int]*corev1.Pod{}}
				blocks[bp] = b
			}
			return b, ordinal(bp, ip)
		}
		return nil, 0
	}
	if m.Dynamic != nil {
		existing, err := m.Dynamic.Resource(calico.IPAMBlocksV1).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, u := range existing.Items {
				b, err := calico.BlockFromUnstructured(u.Object)
				if err != nil {
					continue
				}
				bs, _ := blockOf(b.CIDR.Addr())
				if bs != nil && bs.pfx == b.CIDR {
					bs.node = b.Node
				}
			}
		}
	}
	live := func(p *corev1.Pod) bool {
		return !p.Spec.HostNetwork && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
	}
	for i := range pods {
		p := &pods[i]
		if !live(p) {
			continue
		}
		for _, s := range podIPs(p) {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if b, ord := blockOf(ip.Unmap()); b != nil {
				b.used[ord] = p
				if b.node == "" {
					b.node = p.Spec.NodeName
				}
			}
		}
	}
	for i := range pods {
		p := &pods[i]
		if !live(p) || p.Spec.NodeName == "" || len(podIPs(p)) > 0 { // calico-ipam runs in the CNI, on the node the pod is bound to
			continue
		}
		var ips []netip.Addr
		for _, fam := range []bool{true, false} {
			for _, pi := range enabled {
				if pi.pfx.Addr().Is4() != fam {
					continue
				}
				if ip, ok := allocate(pi, p, blocks); ok {
					ips = append(ips, ip)
					break
				}
			}
		}
		if len(ips) == 0 {
			continue
		}
		if err := m.setStatus(ctx, p, ips); err != nil {
			return err
		}
	}
	if m.Dynamic != nil {
		return m.mirror(ctx, blocks)
	}
	return nil
}

func podIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && p.Status.PodIP != "" {
		out = append(out, p.Status.PodIP)
	}
	return out
}

// ordinal is ip's index in block, which holds it (blocks have at most 2^12
// addresses).
func ordinal(block netip.Prefix, ip netip.Addr) int {
	a, b := block.Addr().AsSlice(), ip.AsSlice()
	n := 0
	for i := range a {
		n = n<<8 | int(b[i]-a[i])
	}
	return n
}

// allocate takes the lowest free address of the node's blocks in the pool,
// claiming the lowest free block when they are full.
func allocate(pi poolInfo, p *corev1.Pod, blocks map[netip.Prefix]*blockState) (netip.Addr, bool) {
	size := 1 << (pi.pfx.Addr().BitLen() - pi.bs)
	take := func(b *blockState) (netip.Addr, bool) {
		for o := 0; o < size; o++ {
			if _, used := b.used[o]; used {
				continue
			}
			ip, err := cidr.NthAddr(b.pfx, uint64(o))
			if err != nil {
				return netip.Addr{}, false
			}
			b.used[o] = p
			return ip, true
		}
		return netip.Addr{}, false
	}
	var mine []*blockState
	for _, b := range blocks {
		if b.node == p.Spec.NodeName && pi.pfx.Contains(b.pfx.Addr()) && b.pfx.Bits() == pi.bs {
			mine = append(mine, b)
		}
	}
	slices.SortFunc(mine, func(a, b *blockState) int { return a.pfx.Addr().Compare(b.pfx.Addr()) })
	for _, b := range mine {
		if ip, ok := take(b); ok {
			return ip, true
		}
	}
	n := 1 << (pi.bs - pi.pfx.Bits())
	for i := 0; i < n; i++ {
		addr, err := cidr.NthAddr(pi.pfx, uint64(i)*uint64(size))
		if err != nil {
			return netip.Addr{}, false
		}
		bp := netip.PrefixFrom(addr, pi.bs)
		if _, taken := blocks[bp]; taken {
			continue
		}
		b := &blockState{pfx: bp, node: p.Spec.NodeName, used: map[int]*corev1.Pod{}}
		blocks[bp] = b
		return take(b)
	}
	return netip.Addr{}, false
}

func (m *IPAM) setStatus(ctx context.Context, p *corev1.Pod, ips []netip.Addr) error {
	pod := p.DeepCopy()
	pod.Status.PodIP = ips[0].String()
	pod.Status.PodIPs = nil
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	if m.MarkReady {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		pod.Status.Phase = corev1.PodRunning
		if pod.Status.StartTime == nil {
			pod.Status.StartTime = &now
		}
		pod.Status.Conditions = nil
		for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
	}
	_, err := m.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // changed or gone meanwhile: the next pass sees it again
	}
	if err != nil {
		return fmt.Errorf("setting the address of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	p.Status = pod.Status
	return nil
}

// BlockName is Calico's name for a block or affinity CIDR: dots, colons
// and the slash become dashes.
func BlockName(p netip.Prefix) string {
	return strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(p.String())
}

// mirror writes IPAMBlocks and BlockAffinities for the blocks in use.
func (m *IPAM) mirror(ctx context.Context, blocks map[netip.Prefix]*blockState) error {
	keys := make([]netip.Prefix, 0, len(blocks))
	for k := range blocks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for _, k := range keys {
		b := blocks[k]
		size := 1 << (b.pfx.Addr().BitLen() - b.pfx.Bits())
		allocs := make([]any, size)
		var attrs, unalloc []any
		for o := 0; o < size; o++ {
			p, ok := b.used[o]
			if !ok {
				unalloc = append(unalloc, int64(o))
				continue
			}
			allocs[o] = int64(len(attrs))
			attrs = append(attrs, map[string]any{
				"handle_id": "k8s-pod-network." + string(p.UID),
				"secondary": map[string]any{"namespace": p.Namespace, "node": p.Spec.NodeName, "pod": p.Name},
			})
		}
		if attrs == nil {
			attrs = []any{}
		}
		if unalloc == nil {
			unalloc = []any{}
		}
		spec := map[string]any{
			"cidr": b.pfx.String(), "allocations": allocs, "attributes": attrs, "unallocated": unalloc,
			"strictAffinity": false, "sequenceNumber": int64(0),
		}
		if b.node != "" {
			spec["affinity"] = "host:" + b.node
		}
		name := BlockName(b.pfx)
		res := m.Dynamic.Resource(calico.IPAMBlocksV1)
		cur, err := res.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": calico.IPAMBlocksV1.GroupVersion().String(), "kind": "IPAMBlock",
				"metadata": map[string]any{"name": name}, "spec": spec,
			}}
			if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating IPAMBlock %s: %w", name, err)
			}
		case err != nil:
			return err
		default:
			old, _ := cur.Object["spec"].(map[string]any)
			if old != nil && equalJSON(old["allocations"], allocs) && equalJSON(old["attributes"], attrs) && old["affinity"] == spec["affinity"] {
				break
			}
			if seq, ok := old["sequenceNumber"].(int64); ok {
				spec["sequenceNumber"] = seq + 1
			}
			cur.Object["spec"] = spec
			if _, err := res.Update(ctx, cur, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("updating IPAMBlock %s: %w", name, err)
			}
		}
		if b.node == "" {
			continue
		}
		aname := b.node + "-" + name
		ares := m.Dynamic.Resource(calico.BlockAffinitiesV1)
		if _, err := ares.Get(ctx, aname, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": calico.BlockAffinitiesV1.GroupVersion().String(), "kind": "BlockAffinity",
				"metadata": map[string]any{"name": aname},
				"spec":     map[string]any{"cidr": b.pfx.String(), "node": b.node, "state": "confirmed", "deleted": "false"},
			}}
			if _, err := ares.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating BlockAffinity %s: %w", aname, err)
			}
		} else if err != nil {
			return err
		}
	}
	return nil
}

func equalJSON(a, b any) bool {
	return fmt.Sprint(runtime.DeepCopyJSONValue(norm(a))) == fmt.Sprint(runtime.DeepCopyJSONValue(norm(b)))
}

func norm(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = norm(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = norm(e)
		}
		return out
	case int:
		return int64(x)
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	}
	return v
}

// Run keeps IPAM in step with a cluster: it watches pods (all namespaces),
// runs Sync after every change and at least every resync, and returns when
// ctx is done. Errors of a pass are passed to onErr (nil ignores them) and
// the pass is retried; a broken watch is reopened.
func (m *IPAM) Run(ctx context.Context, resync time.Duration, onErr func(error)) error {
	if resync <= 0 {
		resync = time.Second
	}
	report := func(err error) {
		if err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
	}
	for {
		report(m.Sync(ctx))
		w, err := m.Kube.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			report(err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(resync):
				continue
			}
		}
		t := time.NewTicker(resync)
	events:
		for {
			select {
			case <-ctx.Done():
				w.Stop()
				t.Stop()
				return ctx.Err()
			case _, ok := <-w.ResultChan():
				if !ok {
					break events
				}
				report(m.Sync(ctx))
			case <-t.C:
				report(m.Sync(ctx))
			}
		}
		w.Stop()
		t.Stop()
	}
}

// Loop calls every sync function in turn, every interval, until the returned
// stop function is called (stop waits for the last pass to end). Errors go
// to onErr (nil ignores them): conflicts are expected while the code under
// test writes to the same objects.
func Loop(ctx context.Context, interval time.Duration, onErr func(error), syncs ...func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			for _, s := range syncs {
				if err := s(ctx); err != nil && onErr != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
					onErr(err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
