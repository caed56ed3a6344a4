package e2e_test

// Helpers for the nodecidr end-to-end tests (nodecidr_test.go): creating
// many kwok nodes and pods, snapshotting node metadata, running the example
// binaries with SIGKILL at chosen moments, and restarting
// kube-controller-manager with other flags.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// largeClusters lets one test with hundreds of kwok nodes run at a time.
// Two at once (two control planes and two kwoks with 500 nodes between them)
// starve each other on a two-core machine: in a CI run on 2026-11-27,
// TestNodeCIDRNoderecreateSurvivesSIGKILL (200 nodes) and
// TestNodeCIDRSecondStoryDoctorAndFix (301 nodes, 601 pods) ran together,
// kwok renewed no node Lease for over 50 s, 98 nodes were tainted
// unreachable, and the moved nodes' new pods stayed Pending past 2 minutes.
var largeClusters = make(chan struct{}, 1)

// nodeE2ELargeCluster waits, after t.Parallel, until no other test with a
// large cluster runs, and holds the turn until t ends.
func nodeE2ELargeCluster(t *testing.T) {
	t.Helper()
	start := time.Now()
	select {
	case largeClusters <- struct{}{}:
	case <-t.Context().Done():
		t.Fatal("waiting for the other large cluster's test to end: test context done")
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %s for the other large cluster's test to end", d.Round(time.Second))
	}
	t.Cleanup(func() { <-largeClusters })
}

// nodeE2EClient returns the cluster's admin clientset.
func nodeE2EClient(t *testing.T, c *harness.Cluster) kubernetes.Interface {
	t.Helper()
	cs, err := c.Client()
	require.NoError(t, err)
	return cs
}

// nodeE2EParallel runs fn for every index in [0, n) on a few goroutines and
// returns the errors joined.
func nodeE2EParallel(n, workers int, fn func(i int) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	for range min(workers, max(n, 1)) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// nodeE2ECreateNodes creates nodes concurrently and returns them as stored.
func nodeE2ECreateNodes(t *testing.T, ctx context.Context, cs kubernetes.Interface, nodes []*corev1.Node) []*corev1.Node {
	t.Helper()
	out := make([]*corev1.Node, len(nodes))
	err := nodeE2EParallel(len(nodes), 16, func(i int) error {
		n, err := cs.CoreV1().Nodes().Create(ctx, nodes[i], metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", nodes[i].Name, err)
		}
		out[i] = n
		return nil
	})
	require.NoError(t, err)
	return out
}

// nodeE2EWithPodCIDR sets both podCIDR fields of a node, as a kubelet-less
// creation with a podCIDR must.
func nodeE2EWithPodCIDR(n *corev1.Node, podCIDR string) *corev1.Node {
	if podCIDR != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
	}
	return n
}

// nodeE2ENodes lists every node, by name.
func nodeE2ENodes(t *testing.T, ctx context.Context, cs kubernetes.Interface) map[string]*corev1.Node {
	t.Helper()
	list, err := nodecidr.ListNodes(ctx, cs, nodecidr.ListOptions{})
	require.NoError(t, err)
	out := make(map[string]*corev1.Node, len(list))
	for i := range list {
		out[list[i].Name] = &list[i]
	}
	return out
}

// nodeE2EWaitPodCIDRs waits until kube-controller-manager has given every
// named node a podCIDR and returns them.
func nodeE2EWaitPodCIDRs(t *testing.T, cs kubernetes.Interface, names []string, timeout time.Duration) map[string]netip.Prefix {
	t.Helper()
	out := map[string]netip.Prefix{}
	poll(t, timeout, "podCIDRs allocated", func(ctx context.Context) error {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		byName := map[string]*corev1.Node{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		missing := 0
		for _, name := range names {
			n := byName[name]
			if n == nil || n.Spec.PodCIDR == "" {
				missing++
				continue
			}
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil {
				return fmt.Errorf("node %s podCIDR %q: %w", name, n.Spec.PodCIDR, err)
			}
			out[name] = p
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d nodes have no podCIDR yet", missing, len(names))
		}
		return nil
	})
	return out
}

// nodeE2EMeta is what a node must keep through a recreate, compared byte
// for byte (JSON): labels, annotations (but nodeE2ETTLAnnotation), taints
// and unschedulable.
type nodeE2EMeta struct {
	Labels        map[string]string `json:"labels"`
	Annotations   map[string]string `json:"annotations"`
	Taints        []corev1.Taint    `json:"taints"`
	Unschedulable bool              `json:"unschedulable"`
}

// nodeE2ETTLAnnotation is set by kube-controller-manager's TTL controller
// from the cluster's size (0 up to 100 nodes, 15 up to 500, ...) whenever it
// handles an event of the node, so a node that stayed quiet while the
// cluster grew keeps a stale value until anything (a patch of its podCIDR,
// say) updates it. It is the one annotation the comparison leaves out.
const nodeE2ETTLAnnotation = "node.alpha.kubernetes.io/ttl"

func nodeE2EMetaOf(n *corev1.Node) string {
	annotations := n.Annotations
	if _, ok := annotations[nodeE2ETTLAnnotation]; ok {
		annotations = maps.Clone(annotations)
		delete(annotations, nodeE2ETTLAnnotation)
	}
	data, err := json.Marshal(nodeE2EMeta{Labels: n.Labels, Annotations: annotations, Taints: n.Spec.Taints, Unschedulable: n.Spec.Unschedulable})
	if err != nil {
		panic(err) // maps of strings and taints always marshal
	}
	return string(data)
}

// nodeE2ESnapshot returns every node's metadata as JSON, by name.
func nodeE2ESnapshot(nodes map[string]*corev1.Node) map[string]string {
	out := make(map[string]string, len(nodes))
	for name, n := range nodes {
		out[name] = nodeE2EMetaOf(n)
	}
	return out
}

// nodeE2EMetaDiff lists the nodes whose metadata differs from want (or that
// are missing), with both versions.
func nodeE2EMetaDiff(want, got map[string]string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[name]
		switch {
		case !ok:
			out = append(out, "node "+name+" is missing")
		case g != want[name]:
			out = append(out, fmt.Sprintf("node %s:\n  before %s\n  after  %s", name, want[name], g))
		}
	}
	return out
}

// nodeE2ESettled waits until the nodes' metadata stops changing (kwok marks
// them Ready, the node lifecycle controller removes the not-ready taint, the
// TTL controller annotates them) and every node is Ready, and returns the
// nodes. want is the number of nodes expected.
func nodeE2ESettled(t *testing.T, cs kubernetes.Interface, want int, timeout time.Duration) map[string]*corev1.Node {
	t.Helper()
	var (
		last      map[string]string
		lastSince time.Time
		nodes     map[string]*corev1.Node
	)
	poll(t, timeout, "nodes settled", func(ctx context.Context) error {
		list, err := nodecidr.ListNodes(ctx, cs, nodecidr.ListOptions{})
		if err != nil {
			return err
		}
		cur := make(map[string]*corev1.Node, len(list))
		for i := range list {
			n := &list[i]
			cur[n.Name] = n
			if !nodeE2EReady(n) {
				last = nil
				return fmt.Errorf("node %s is not Ready", n.Name)
			}
			for _, taint := range n.Spec.Taints {
				if taint.Key == "node.kubernetes.io/not-ready" || taint.Key == "node.kubernetes.io/unreachable" {
					last = nil
					return fmt.Errorf("node %s has taint %s", n.Name, taint.ToString())
				}
			}
		}
		if len(cur) != want {
			return fmt.Errorf("%d nodes, want %d", len(cur), want)
		}
		snap := nodeE2ESnapshot(cur)
		if last == nil || !maps.Equal(snap, last) {
			last, lastSince = snap, time.Now()
			return errors.New("node metadata still changing")
		}
		if time.Since(lastSince) < 2*time.Second {
			return errors.New("node metadata not yet stable for 2s")
		}
		nodes = cur
		return nil
	})
	return nodes
}

func nodeE2EReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeE2EPod is a bare pod bound to a node (no scheduler, no controller).
func nodeE2EPod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// nodeE2EDeployment is a Deployment of pause pods labelled app=name.
func nodeE2EDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

// nodeE2EWaitPodsRunning waits until every pod in ns matching selector is
// Running with an IP and there are want of them, and returns them by name.
// c is the cluster whose kwok may be restarted when it ignores a pod for
// good (kwokNudge); nil never restarts it.
func nodeE2EWaitPodsRunning(t *testing.T, c *harness.Cluster, cs kubernetes.Interface, ns, selector string, want int, timeout time.Duration) map[string]*corev1.Pod {
	t.Helper()
	out := map[string]*corev1.Pod{}
	w := newKwokWatch(c)
	poll(t, timeout, fmt.Sprintf("%d pods %q running", want, selector), func(ctx context.Context) error {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		running := 0
		clear(out)
		var waiting []string
		for i := range list.Items {
			p := &list.Items[i]
			out[p.Name] = p
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				running++
			} else if len(waiting) < 5 {
				waiting = append(waiting, fmt.Sprintf("%s on %s: phase %q, IP %q, conditions %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.Conditions))
			}
			kwokNudge(t, ctx, cs, p, w)
		}
		if len(list.Items) != want || running != want {
			return fmt.Errorf("%d pods, %d of them running with an IP; want %d; not running: %s", len(list.Items), running, want, strings.Join(waiting, "; "))
		}
		return nil
	})
	return out
}

// kwokWatch is what kwokNudge keeps between its looks at the pods.
type kwokWatch struct {
	c         *harness.Cluster        // restarted once for a pod nudges do not help; nil: never
	first     map[types.UID]time.Time // bound pods kwok has not touched, since first seen so
	nudged    map[types.UID]time.Time // ... since their last nudge
	restarted bool
}

func newKwokWatch(c *harness.Cluster) *kwokWatch {
	return &kwokWatch{c: c, first: map[types.UID]time.Time{}, nudged: map[types.UID]time.Time{}}
}

const (
	// kwokNudgeAfter is how long a bound pod may stay untouched before
	// kwokNudge annotates it.
	kwokNudgeAfter = 15 * time.Second
	// kwokStuckAfter is how long a pod may stay untouched, nudged every
	// kwokNudgeAfter, before kwokNudge restarts kwok.
	kwokStuckAfter = 50 * time.Second
)

// kwokNudge works around a race of kwok v0.8.0 (the kubelets' emulator):
// when a node is re-created, kwok creates its Lease and at once replays the
// node's pods, but it skips every pod whose node's Lease its informer has
// not seen yet as held (PodController.watchResources: readOnly, from
// NodeLeaseController.Held, which reads the cache), and nothing replays
// them later: a pod bound then stays Pending with no status for ever. A pod
// bound, Pending and untouched (no conditions) for kwokNudgeAfter gets an
// annotation, whose update event kwok handles again with its cache caught
// up. On a loaded machine kwok has also been seen to ignore a re-created
// node's pods through every nudge for two minutes, while its Lease syncs
// failed on conflicts (its Lease cache behind the API server): a pod still
// untouched after kwokStuckAfter makes kwokNudge log the node's Lease and
// restart kwok once, with every node Lease deleted while it is down, so the
// new process creates them at once and builds its caches afresh. kwok still
// has to run the pod; what the tests check of it is unchanged.
func kwokNudge(t *testing.T, ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, w *kwokWatch) {
	t.Helper()
	if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodPending || len(p.Status.Conditions) > 0 || p.DeletionTimestamp != nil {
		delete(w.first, p.UID)
		delete(w.nudged, p.UID)
		return
	}
	first, ok := w.first[p.UID]
	if !ok {
		w.first[p.UID], w.nudged[p.UID] = time.Now(), time.Now()
		return
	}
	if time.Since(w.nudged[p.UID]) < kwokNudgeAfter {
		return
	}
	if time.Since(first) >= kwokStuckAfter && w.c != nil && !w.restarted {
		w.restarted = true
		t.Logf("kwok left pod %s/%s on node %s untouched for %s through every nudge (node Lease: %s): restarting kwok",
			p.Namespace, p.Name, p.Spec.NodeName, time.Since(first).Round(time.Second), kwokLeaseState(ctx, cs, p.Spec.NodeName))
		if err := kwokRestart(ctx, w.c, cs); err != nil {
			t.Errorf("restarting kwok: %v", err)
		}
		clear(w.first)
		clear(w.nudged)
		return
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.cidrshift.io/kwok-nudge":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := cs.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
		t.Logf("kwok left pod %s/%s on node %s untouched for %s: annotated it so that kwok looks again (node Lease: %s)",
			p.Namespace, p.Name, p.Spec.NodeName, time.Since(first).Round(time.Second), kwokLeaseState(ctx, cs, p.Spec.NodeName))
		w.nudged[p.UID] = time.Now()
	}
}

// kwokLeaseState describes a node's Lease for the log: its holder, the age
// of its last renewal, and whether its owner is the node as it is now.
func kwokLeaseState(ctx context.Context, cs kubernetes.Interface, node string) string {
	l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	holder, renewed := "none", "never renewed"
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		renewed = fmt.Sprintf("renewed %s ago", time.Since(l.Spec.RenewTime.Time).Round(time.Second))
	}
	owner := "no owner"
	if len(l.OwnerReferences) > 0 {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err != nil:
			owner = "node: " + err.Error()
		case n.UID == l.OwnerReferences[0].UID:
			owner = "owned by the node"
		default:
			owner = fmt.Sprintf("owned by node UID %s, the node's is %s", l.OwnerReferences[0].UID, n.UID)
		}
	}
	return fmt.Sprintf("holder %s, %s, %s, resourceVersion %s", holder, renewed, owner, l.ResourceVersion)
}

// kwokRestart stops kwok, deletes every node Lease (held by the stopped
// process's identity, they would keep the new one off every node until
// they expire) and starts kwok again.
func kwokRestart(ctx context.Context, c *harness.Cluster, cs kubernetes.Interface) error {
	if err := c.Stop(harness.Kwok); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete the node Leases: %w", err)
	}
	if err := c.StartComponent(ctx, harness.Kwok); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// kwokNudger runs kwokNudge over every pod each second until stop is
// called, for a program under test that waits for the pods of the nodes it
// re-creates itself (a runbook's health check), while no test helper polls
// them.
func kwokNudger(t *testing.T, c *harness.Cluster, cs kubernetes.Interface) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := newKwokWatch(c)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for i := range list.Items {
				kwokNudge(t, ctx, cs, &list.Items[i], w)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// nodeE2EBuild builds an example program of the root module.
func nodeE2EBuild(t *testing.T, name string) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	root := filepath.Join(wd, "..")
	bin := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cidrshift/cidrshift/examples/"+name)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build examples/%s in %s:\n%s", name, root, out)
	t.Logf("built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// nodeE2EProc is one run of an example binary, its stderr read line by line.
type nodeE2EProc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	lines  chan string // stderr lines; closed at EOF

	mu     sync.Mutex
	stderr strings.Builder
}

func nodeE2EStart(t *testing.T, bin string, args ...string) *nodeE2EProc {
	t.Helper()
	p := &nodeE2EProc{cmd: exec.Command(bin, args...), lines: make(chan string, 8192)}
	p.cmd.Stdout = &p.stdout
	pipe, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start(), "start %s", bin)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

func (p *nodeE2EProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "stdout:\n" + p.stdout.String() + "\nstderr:\n" + p.stderr.String()
}

// nodeE2EOutcome is how a run ended: SIGKILLed by the test, or its exit code.
type nodeE2EOutcome struct {
	killed   bool
	exitCode int
}

// wait waits for the run to end, SIGKILLing it as soon as kill (called for
// every stderr line) returns true.
func (p *nodeE2EProc) wait(t *testing.T, timeout time.Duration, kill func(line string) bool) nodeE2EOutcome {
	t.Helper()
	deadline := time.After(timeout)
	killed := false
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				err := p.cmd.Wait()
				var exitErr *exec.ExitError
				if err != nil && !errors.As(err, &exitErr) {
					t.Fatalf("wait for %s: %v", p.cmd.Path, err)
				}
				st := p.cmd.ProcessState
				if killed {
					ws, _ := st.Sys().(syscall.WaitStatus)
					require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%s should have died of SIGKILL: %s", p.cmd.Path, st)
				}
				return nodeE2EOutcome{killed: killed, exitCode: st.ExitCode()}
			}
			if kill != nil && !killed && kill(line) {
				require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL), "SIGKILL pid %d", p.cmd.Process.Pid)
				killed = true
			}
		case <-deadline:
			_ = p.cmd.Process.Kill()
			t.Fatalf("%s did not finish within %s:\n%s", p.cmd.Path, timeout, p.output())
		}
	}
}

// nodeE2ERun runs a binary to completion and returns its stdout and exit code.
func nodeE2ERun(t *testing.T, bin string, args ...string) (string, int, *nodeE2EProc) {
	t.Helper()
	p := nodeE2EStart(t, bin, args...)
	out := p.wait(t, 3*time.Minute, nil)
	return p.stdout.String(), out.exitCode, p
}

// nodeE2EEventLine matches noderecreate's event lines: "15:04:05  node: phase[...]".
var nodeE2EEventLine = regexp.MustCompile(`^\d\d:\d\d:\d\d  ([^:\s]+): ([a-z-]+)`)

// nodeE2EParseEvent returns the node and phase of a noderecreate event line.
func nodeE2EParseEvent(line string) (node, phase string, ok bool) {
	m := nodeE2EEventLine.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// nodeE2EEvents records nodecidr.Apply's events for assertions and logs the
// noteworthy ones.
type nodeE2EEvents struct {
	t  *testing.T
	mu sync.Mutex
	// phases counts events by phase; lastCreated is the time of the last
	// PhaseCreated event.
	phases      map[nodecidr.Phase]int
	byNode      map[string][]nodecidr.Phase
	lastCreated time.Time
	retries     []string
	hook        func(nodecidr.Event)
}

func nodeE2ENewEvents(t *testing.T) *nodeE2EEvents {
	return &nodeE2EEvents{t: t, phases: map[nodecidr.Phase]int{}, byNode: map[string][]nodecidr.Phase{}}
}

func (e *nodeE2EEvents) on(ev nodecidr.Event) {
	e.mu.Lock()
	e.phases[ev.Phase]++
	e.byNode[ev.Node] = append(e.byNode[ev.Node], ev.Phase)
	if ev.Phase == nodecidr.PhaseCreated {
		e.lastCreated = ev.Time
	}
	if ev.Phase == nodecidr.PhaseRetrying || ev.Phase == nodecidr.PhaseFailed || ev.Phase == nodecidr.PhaseRestored {
		e.retries = append(e.retries, ev.String())
	}
	hook := e.hook
	e.mu.Unlock()
	if ev.Phase == nodecidr.PhaseRetrying || ev.Phase == nodecidr.PhaseFailed || ev.Phase == nodecidr.PhaseRestored {
		e.t.Logf("apply event: %s", ev)
	}
	if hook != nil {
		hook(ev)
	}
}

func (e *nodeE2EEvents) count(p nodecidr.Phase) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.phases[p]
}

func (e *nodeE2EEvents) lastCreate() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastCreated
}

func (e *nodeE2EEvents) retryLines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.retries)
}

// nodeE2EExpectCrash restarts kube-controller-manager with flags and
// expects it to exit with status 1; it returns the run's log.
func nodeE2EExpectCrash(t *testing.T, ctx context.Context, c *harness.Cluster, flags ...string) string {
	t.Helper()
	err := c.Restart(ctx, harness.ControllerManager, flags...)
	var exitErr *harness.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("restart %s: %v", harness.ControllerManager, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	st, err := c.WaitExit(waitCtx, harness.ControllerManager)
	require.NoError(t, err, "kube-controller-manager kept running with %v", flags)
	require.Equal(t, 1, st.ExitCode, "kube-controller-manager %s", st)
	return c.RunLogs(harness.ControllerManager)
}

// nodeE2EJoinNode creates a new kwok node without a podCIDR and waits until
// kube-controller-manager gives it one inside want; it returns the podCIDR.
func nodeE2EJoinNode(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, want netip.Prefix) netip.Prefix {
	t.Helper()
	_, err := cs.CoreV1().Nodes().Create(ctx, harness.KwokNode(name, nil), metav1.CreateOptions{})
	require.NoError(t, err, "create node %s", name)
	var got netip.Prefix
	poll(t, 60*time.Second, "node "+name+" gets a podCIDR in "+want.String(), func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Spec.PodCIDR == "" {
			return errors.New("no podCIDR yet")
		}
		p, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			return err
		}
		got = p
		return nil
	})
	require.True(t, want.Contains(got.Addr()) && got.Bits() >= want.Bits(), "node %s got podCIDR %s outside %s", name, got, want)
	return got
}

// nodeE2EAbsent reports whether the named node does not exist.
func nodeE2EAbsent(ctx context.Context, cs kubernetes.Interface, name string) (bool, error) {
	_, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// nodeE2EJSON decodes JSON output of an example binary into v.
func nodeE2EJSON(t *testing.T, data string, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(data), v), "decode JSON output:\n%s", data)
}

// nodeE2ESubnet returns the i-th /bits subnet of base (either family).
func nodeE2ESubnet(base netip.Prefix, bits, i int) netip.Prefix {
	if base.Addr().Is4() {
		a := base.Masked().Addr().As4()
		binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(a[:])+uint32(i)<<(32-bits))
		return netip.PrefixFrom(netip.AddrFrom4(a), bits)
	}
	a := base.Masked().Addr().As16()
	hi, lo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	if bits <= 64 {
		hi += uint64(i) << (64 - bits)
	} else {
		next := lo + uint64(i)<<(128-bits)
		if next < lo {
			hi++
		}
		lo = next
	}
	binary.BigEndian.PutUint64(a[:8], hi)
	binary.BigEndian.PutUint64(a[8:], lo)
	return netip.PrefixFrom(netip.AddrFrom16(a), bits)
}

// nodeE2ERebase is cidr.Rebase, failing the test on error.
func nodeE2ERebase(t *testing.T, p, from, to netip.Prefix) netip.Prefix {
	t.Helper()
	out, err := cidr.Rebase(p, from, to)
	require.NoError(t, err)
	return out
}

// mustIndex returns the number in a node name "node-NNN".
func mustIndex(t *testing.T, nodeName string) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(nodeName, "node-"))
	require.NoError(t, err, "node name %s", nodeName)
	return i
}

// nodeE2EWaitPairs waits until every named node has one podCIDR per family
// and returns them by node.
func nodeE2EWaitPairs(t *testing.T, cs kubernetes.Interface, names []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	poll(t, time.Minute, "a podCIDR per family on every node", func(ctx context.Context) error {
		for _, name := range names {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(n.Spec.PodCIDRs) != 2 {
				return fmt.Errorf("node %s: podCIDRs %v", name, n.Spec.PodCIDRs)
			}
			out[name] = n.Spec.PodCIDRs
		}
		return nil
	})
	return out
}
