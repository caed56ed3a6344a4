package nodecidr

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr/nodecidrtest"
)

var t0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

type nodeOpt func(*corev1.Node)

func cp(n *corev1.Node) { n.Labels[LabelControlPlane] = "" }

func age(d int) nodeOpt {
	return func(n *corev1.Node) { n.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(d) * time.Minute)) }
}

func podCIDRField(v string) nodeOpt { return func(n *corev1.Node) { n.Spec.PodCIDR = v } }

// node builds a realistic Node: labels, annotations, a taint, a providerID,
// status with conditions and addresses, podCIDR and podCIDRs consistent.
func node(name string, cidrs []string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			UID:               types.UID("uid-" + name),
			ResourceVersion:   "7",
			CreationTimestamp: metav1.NewTime(t0),
			Labels:            map[string]string{"kubernetes.io/hostname": name, "team": "net"},
			Annotations:       map[string]string{"flannel.alpha.coreos.com/public-ip": "192.0.2.1", "note": name},
		},
		Spec: corev1.NodeSpec{
			ProviderID: "test://" + name,
			Taints:     []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectPreferNoSchedule}},
			PodCIDRs:   cidrs,
		},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}},
		},
	}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func cidrs(s ...string) []string { return s }

func newCluster(nodes ...*corev1.Node) (*fake.Clientset, *nodecidrtest.Server) {
	objs := make([]runtime.Object, 0, len(nodes))
	for _, n := range nodes {
		objs = append(objs, n)
	}
	return nodecidrtest.New(objs...)
}

func layout(t testing.TB, clusters string, masks ...int) cidr.NodeIPAMLayout {
	t.Helper()
	ps, err := cidr.ParseList(clusters)
	require.NoError(t, err)
	return cidr.NodeIPAMLayout{ClusterCIDRs: ps, NodeMasks: masks}
}

func fastRetry() Retry {
	return Retry{Initial: time.Millisecond, Max: 5 * time.Millisecond, Timeout: 2 * time.Second}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// offTest collects what a reactor, hook or callback saw wrong while it ran on
// one of Apply's worker goroutines. testify's require (t.FailNow) there would
// stop only that worker, and the run would wait for it until -timeout with no
// message; check reports the failures on the test goroutine once Apply has
// returned.
type offTest struct {
	mu   sync.Mutex
	errs []string
}

// errorf records a failure.
func (o *offTest) errorf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errs = append(o.errs, fmt.Sprintf(format, args...))
}

// noError records err, if any, with what was being done, and reports whether
// it was nil.
func (o *offTest) noError(err error, doing string) bool {
	if err != nil {
		o.errorf("%s: %v", doing, err)
	}
	return err == nil
}

// check fails the test (on the test goroutine) with every recorded failure.
func (o *offTest) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	require.Empty(t, o.errs, "failures seen off the test goroutine")
}
