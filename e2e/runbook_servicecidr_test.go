package e2e_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/e2e/harness"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// Story 3 of FACTS.md carried out end to end by the runbook binary
// examples/migrate-servicecidr: the Service range moves from 100.64.0.0/13
// to 172.24.0.0/15 while a Deployment keeps running. The runbook pauses (exit
// 3) for the operator step; the test plays the operator and restarts
// kube-apiserver and kube-controller-manager with the new range.

var (
	rbOldRange = netip.MustParsePrefix("100.64.0.0/13")
	rbNewRange = netip.MustParsePrefix("172.24.0.0/15")
)

const rbNamespace = "rb-shop"

// rbBuild builds the runbook binary from the root module.
func rbBuild(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "migrate-servicecidr")
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/cidrshift/cidrshift/examples/migrate-servicecidr")
	cmd.Dir = filepath.Join(wd, "..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build examples/migrate-servicecidr:\n%s", out)
	t.Logf("built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// rbFixture creates kube-dns at 100.64.0.10, a few Services of every kind
// and a Deployment of two replicas on a kwok node, and waits until both
// replicas are Ready. It returns every Service by namespace/name.
func rbFixture(t *testing.T, ctx context.Context, cs kubernetes.Interface) map[string]*corev1.Service {
	t.Helper()
	_, err := cs.CoreV1().Nodes().Create(ctx, harness.KwokNode("rb-worker1", nil), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rbNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)

	port := []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}
	svcs := []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns", Labels: map[string]string{"k8s-app": "kube-dns"}},
			Spec: corev1.ServiceSpec{ClusterIP: "100.64.0.10", Selector: map[string]string{"k8s-app": "kube-dns"},
				Ports: []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: rbNamespace, Name: "web"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: rbNamespace, Name: "pinned"},
			Spec: corev1.ServiceSpec{ClusterIP: "100.64.3.7", Selector: map[string]string{"app": "web"}, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: rbNamespace, Name: "np"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30777, Protocol: corev1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: rbNamespace, Name: "lb"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"}, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: rbNamespace, Name: "headless"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "web"}, Ports: port}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: rbNamespace, Name: "alias"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}},
	}
	for _, s := range svcs {
		_, err := cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err, "create Service %s/%s", s.Namespace, s.Name)
	}

	replicas, zero, no := int32(2), int64(0), false
	_, err = cs.AppsV1().Deployments(rbNamespace).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: rbNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: &no,
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	poll(t, 90*time.Second, "Deployment web has 2 ready replicas", func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments(rbNamespace).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 2 {
			return fmt.Errorf("%d ready replicas", d.Status.ReadyReplicas)
		}
		return nil
	})
	saved := scServices(t, ctx, cs)
	require.Equal(t, "100.64.0.1", saved[servicecidr.KubernetesService].Spec.ClusterIP)
	return saved
}

// rbSampler records, every 100 ms, the Deployment's ready replicas while the
// API answers (it does not during kube-apiserver's restart).
type rbSampler struct {
	mu         sync.Mutex
	samples    int
	minReady   int32
	unanswered int
	stop       chan struct{}
	done       chan struct{}
}

func rbSample(ctx context.Context, cs kubernetes.Interface) *rbSampler {
	s := &rbSampler{minReady: 1 << 30, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			d, err := cs.AppsV1().Deployments(rbNamespace).Get(rctx, "web", metav1.GetOptions{})
			cancel()
			s.mu.Lock()
			if err != nil {
				s.unanswered++
			} else {
				s.samples++
				s.minReady = min(s.minReady, d.Status.ReadyReplicas)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *rbSampler) finish() (samples int, minReady int32, unanswered int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.minReady, s.unanswered
}

// rbRun runs the runbook once. When killOn is not empty, the process is
// SIGKILLed as soon as a line of its stderr contains it; killed says so.
func rbRun(t *testing.T, cmd *exec.Cmd, killOn string) (code int, killed bool, stdout string) {
	t.Helper()
	var out strings.Builder
	cmd.Stdout = &out
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	var stderr strings.Builder
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		stderr.WriteString(line + "\n")
		if killOn != "" && !killed && strings.Contains(line, killOn) {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
			t.Logf("SIGKILLed the runbook at %q", line)
		}
	}
	err = cmd.Wait()
	code = 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("runbook exit %d (killed %v); stderr:\n%s", code, killed, stderr.String())
	if !killed {
		t.Logf("stdout:\n%s", out.String())
	}
	return code, killed, out.String()
}

// rbKillPoints are stderr lines at which the killed variant may die: every
// step start and the Service moves, before and after the operator step.
var rbKillPoints = []string{
	"step 2/6", "step 3/6", "service-deleted", "service-created " + rbNamespace, "step 4/6", "step 5/6",
	"step 6/6", "servicecidr-delete-requested", "kubernetes-service-deleted",
}

func TestRunbookServiceCIDR(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	rbScenario(t, rbOptions{})
}

// TestRunbookServiceCIDRKilled SIGKILLs the runbook at a random point and
// resumes it with another, empty journal directory (another machine): the
// journal kept in the cluster carries the run.
func TestRunbookServiceCIDRKilled(t *testing.T) {
	skipInShortMode(t)
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, seed>>7))
	killOn := rbKillPoints[r.IntN(len(rbKillPoints))]
	if at := os.Getenv("E2E_RUNBOOK_KILL_AT"); at != "" {
		killOn = at // reproduce a failure
	}
	t.Logf("seed %d: kill the runbook at the first stderr line containing %q", seed, killOn)
	rbScenario(t, rbOptions{killOn: killOn})
}

// rbWithJournal returns args with the --journal value replaced by dir.
func rbWithJournal(args []string, dir string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		switch {
		case strings.HasPrefix(a, "--journal="):
			out[i] = "--journal=" + dir
		case a == "--journal" && i+1 < len(out):
			out[i+1] = dir
		}
	}
	return out
}

// rbOptions vary the runbook scenario.
type rbOptions struct {
	// killOn: SIGKILL the first run at the first stderr line holding it.
	killOn string
	// inCluster runs the runbook as its Job would (see rbInCluster).
	inCluster bool
}

func rbScenario(t *testing.T, o rbOptions) {
	killOn := o.killOn
	bin := rbBuild(t)
	opts, minor := scWithServiceCIDRAPI(harness.Options{ServiceCIDR: rbOldRange.String()})
	c := harness.Start(t, opts)
	ctx := t.Context()
	cs, err := c.Client()
	require.NoError(t, err)
	saved := rbFixture(t, ctx, cs)
	journalDir := filepath.Join(t.TempDir(), "journal")
	testFlags := []string{"--include-loadbalancers", "--poll-interval", "200ms", "--drain-timeout", "90s"}
	args := append([]string{"--kubeconfig", c.AdminKubeconfig(), "--to", rbNewRange.String(), "--journal", journalDir, "--apply"}, testFlags...)
	planArgs := []string{"--kubeconfig", c.AdminKubeconfig(), "--to", rbNewRange.String()}
	command := func(args []string) *exec.Cmd { return exec.Command(bin, args...) }
	if o.inCluster {
		var jobArgs []string
		command, jobArgs = rbInCluster(t, ctx, c, cs, bin)
		args = append(jobArgs, testFlags...)
		planArgs = []string{"--to", rbNewRange.String()}
		t.Logf("runbook run as its Job: %v", args)
	}

	// The plan alone changes nothing.
	code, _, out := rbRun(t, command(planArgs), "")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "kube-system/kube-dns 100.64.0.10 -> 172.24.0.10 (cluster DNS)")
	assert.Contains(t, out, "5. control-plane-flags [operator]")

	// The runbook sees kube-apiserver's new flag through kubeadm's mirror
	// pods (the harness runs none) or through the Warning event
	// KubernetesDefaultServiceCIDRInconsistent. kube-apiserver 1.30 records
	// no such event (its default-ServiceCIDR controller in v1.30.14 has none;
	// v1.33.13's has), so there the runbook cannot see the flag, says so, and
	// the operator confirms the restart with --continue, as the runbook's
	// pause tells them to.
	confirmByHand := minor <= 30
	sampler := rbSample(ctx, cs)
	start := time.Now()
	operatorDone, killedOnce, observed, confirmed := false, false, false, false
	runs := 0
	for ; runs < 8; runs++ {
		kill := ""
		if !killedOnce {
			kill = killOn
		}
		code, killed, out := rbRun(t, command(args), kill)
		if strings.Contains(out, "observed: kube-apiserver reports") {
			observed = true
		}
		if strings.Contains(out, "--continue given: the operator confirmed the restart") {
			confirmed = true
		}
		if killed {
			killedOnce = true
			// The killed run's machine is lost: the next runs have an empty
			// journal directory and resume from the journal kept in the
			// cluster.
			args = rbWithJournal(args, filepath.Join(t.TempDir(), "other-machine"))
			continue
		}
		if code == 3 {
			require.False(t, operatorDone, "the runbook waits again after the operator restarted the control plane:\n%s", out)
			assert.Contains(t, out, "WAITING FOR AN OPERATOR (step control-plane-flags)")
			assert.Contains(t, out, "--service-cluster-ip-range=172.24.0.0/15")
			// The operator: restart both components with the new range.
			svcs := scServices(t, ctx, cs)
			assert.Equal(t, "172.24.0.10", svcs["kube-system/kube-dns"].Spec.ClusterIP, "kube-dns moved before the pause")
			assert.Equal(t, "100.64.0.1", svcs[servicecidr.KubernetesService].Spec.ClusterIP, "default/kubernetes waits for the new flag")
			// On 1.33 the runbook also asks for the allocator's dual-write off.
			apiFlags := []string{scNewRangeFlag}
			if minor == 33 {
				require.Contains(t, out, "--feature-gates=DisableAllocatorDualWrite=true", "the runbook names the 1.33 gate")
				apiFlags = scAPIServerNewRange(minor)
			} else {
				assert.NotContains(t, out, "DisableAllocatorDualWrite")
			}
			rs := time.Now()
			require.NoError(t, c.Restart(ctx, harness.APIServer, apiFlags...))
			require.NoError(t, c.Restart(ctx, harness.ControllerManager, scNewRangeFlag))
			t.Logf("operator: restarted kube-apiserver and kube-controller-manager with %s in %s", scNewRangeFlag, time.Since(rs).Round(time.Millisecond))
			operatorDone = true
			if confirmByHand {
				require.Contains(t, out, "add --continue if it cannot see it", "the pause names the way on without an observation")
				args = append(slices.Clone(args), "--continue")
			}
			continue
		}
		require.Equal(t, 0, code, "runbook failed:\n%s", out)
		break
	}
	require.True(t, operatorDone, "the runbook paused for the operator")
	// Unless the kill came after step 5 finished and before its report was
	// printed, some run says how it saw the new flag.
	switch {
	case confirmByHand:
		assert.False(t, observed, "Kubernetes 1.%d: no event to observe", minor)
		if killOn == "" {
			assert.True(t, confirmed, "the runbook went on on the operator's --continue")
		}
	case killOn == "":
		assert.True(t, observed, "the runbook saw kube-apiserver's new flag by itself")
	default:
		t.Logf("a run reported the observation: %v", observed)
	}
	if killOn != "" {
		assert.True(t, killedOnce, "the runbook printed %q at some point and was killed there", killOn)
	}
	t.Logf("migration took %s over %d run(s)", time.Since(start).Round(time.Millisecond), runs+1)
	samples, minReady, unanswered := sampler.finish()
	t.Logf("Deployment sampled %d times (%d unanswered during the restart), min ready replicas %d", samples, unanswered, minReady)
	assert.Greater(t, samples, 10)
	assert.GreaterOrEqual(t, minReady, int32(1), "the Deployment kept a ready replica throughout")

	// End state.
	live := scServices(t, ctx, cs)
	var want, got []string
	for k := range saved {
		want = append(want, k)
	}
	for k := range live {
		got = append(got, k)
	}
	sort.Strings(want)
	sort.Strings(got)
	assert.Equal(t, want, got, "no Service lost or added")
	for key, s := range live {
		old := saved[key]
		switch {
		case old == nil:
		case s.Spec.Type == corev1.ServiceTypeExternalName || s.Spec.ClusterIP == corev1.ClusterIPNone:
			assert.Equal(t, old.UID, s.UID, "%s has nothing to move and is left alone", key)
		default:
			assert.NotEqual(t, old.UID, s.UID, "%s was recreated", key)
			for _, ip := range servicecidr.ClusterIPs(s) {
				assert.True(t, rbNewRange.Contains(ip), "%s at %s, outside %s", key, ip, rbNewRange)
			}
			if key != servicecidr.KubernetesService {
				assert.Equal(t, scComparable(old), scComparable(s), "%s kept every field but its ClusterIP", key)
			}
		}
	}
	assert.Equal(t, "172.24.0.10", live["kube-system/kube-dns"].Spec.ClusterIP, "kube-dns keeps the tenth address")
	assert.Equal(t, "172.24.3.7", live[rbNamespace+"/pinned"].Spec.ClusterIP, "offset kept")
	assert.Equal(t, "172.24.0.1", live[servicecidr.KubernetesService].Spec.ClusterIP, "default/kubernetes recreated by kube-apiserver")
	assert.Equal(t, int32(30777), live[rbNamespace+"/np"].Spec.Ports[0].NodePort, "nodePort kept")

	client := scClient(t, ctx, c)
	poll(t, 60*time.Second, "no ServiceCIDR left in the old range", func(ctx context.Context) error {
		list, err := client.List(ctx)
		if err != nil {
			return err
		}
		for _, sc := range list {
			for _, p := range sc.CIDRs {
				if p.Overlaps(rbOldRange) {
					return fmt.Errorf("ServiceCIDR %s %v is %s", sc.Name, sc.CIDRs, sc.State())
				}
			}
		}
		return nil
	})
	v, err := client.Verify(ctx, servicecidr.VerifyOptions{To: []netip.Prefix{rbNewRange}, From: []netip.Prefix{rbOldRange},
		DNSIPs: []netip.Addr{netip.MustParseAddr("172.24.0.10")}, IncludeLoadBalancers: true})
	require.NoError(t, err)
	for _, f := range v.Findings {
		t.Logf("verify: %s %s: %s", f.Severity, f.Object, f.Message)
	}
	assert.True(t, v.OK)

	// Finished: a rerun reports every step done and changes nothing.
	before := scServices(t, ctx, cs)
	code, _, out = rbRun(t, command(args), "")
	require.Equal(t, 0, code)
	for _, step := range []string{"preflight [completed]", "add-servicecidr [done]", "move-services [done]", "node-config [done]", "control-plane-flags [done]", "retire-old-range [done]"} {
		assert.Contains(t, out, step)
	}
	after := scServices(t, ctx, cs)
	for k, s := range before {
		assert.Equal(t, s.UID, after[k].UID, "%s untouched by the rerun", k)
	}
}
