package kubeadmcfg

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/cidr"
)

// goldenVersions are the kubeadm clusters whose files live in testdata/golden.
var goldenVersions = []string{"v1.30", "v1.31", "v1.32", "v1.33", "v1.34", "v1.35", "v1.36"}

func golden(t testing.TB, version, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden", version, name))
	require.NoError(t, err)
	return data
}

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// fakeCluster is a fake clientset whose reactors enforce what the API server
// does and the default tracker does not: an update carrying an old
// resourceVersion is a Conflict, every write gets a new resourceVersion, a
// dry-run write is not persisted. SelfSubjectAccessReviews answer from deny.
type fakeCluster struct {
	*fake.Clientset
	deny    map[string]bool // "verb/name" refused
	updates int             // persisted ConfigMap updates
	// beforeUpdate, when set, runs inside an update before the
	// resourceVersion check (to simulate a concurrent writer).
	beforeUpdate func()
}

func newFakeCluster(t testing.TB, objs ...runtime.Object) *fakeCluster {
	t.Helper()
	f := &fakeCluster{Clientset: fake.NewClientset(objs...), deny: map[string]bool{}}
	f.PrependReactor("update", "configmaps", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ua := action.(k8stesting.UpdateActionImpl)
		cm := ua.GetObject().(*corev1.ConfigMap).DeepCopy()
		if f.beforeUpdate != nil {
			hook := f.beforeUpdate
			f.beforeUpdate = nil
			hook()
		}
		cur, err := f.Tracker().Get(configMapsGVR, ua.GetNamespace(), cm.Name)
		if err != nil {
			return true, nil, err
		}
		curCM := cur.(*corev1.ConfigMap)
		if cm.ResourceVersion != "" && cm.ResourceVersion != curCM.ResourceVersion {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, cm.Name,
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		if cm.UID != "" && cm.UID != curCM.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, cm.Name, errors.New("Precondition failed: UID in precondition"))
		}
		n, _ := strconv.Atoi(curCM.ResourceVersion)
		cm.ResourceVersion = strconv.Itoa(n + 1)
		cm.UID = curCM.UID
		if len(ua.UpdateOptions.DryRun) > 0 {
			return true, cm, nil
		}
		if err := f.Tracker().Update(configMapsGVR, cm, ua.GetNamespace()); err != nil {
			return true, nil, err
		}
		f.updates++
		return true, cm, nil
	})
	f.PrependReactor("create", "selfsubjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		r := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		a := r.Spec.ResourceAttributes
		r.Status.Allowed = a != nil && !f.deny[a.Verb+"/"+a.Name]
		if !r.Status.Allowed {
			r.Status.Reason = "RBAC: access denied"
		}
		return true, r, nil
	})
	return f
}

// configMap builds a kube-system ConfigMap with a resourceVersion and UID.
func configMap(name, key, value, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, ResourceVersion: rv, UID: types.UID("uid-" + name)},
		Data:       map[string]string{key: value},
	}
}

func node(name string, podCIDRs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
		n.Spec.PodCIDRs = podCIDRs
	}
	return n
}

// storyOne is the first field story after the failed attempt: kubeadm-config
// already says 10.20.0.0/16, the controller manager still runs with
// 10.233.64.0/18, two workers were moved, the control-plane node was not.
func storyOne(t testing.TB) *Snapshot {
	t.Helper()
	s := &Snapshot{}
	cc := string(golden(t, "v1.34", "cluster-configuration.yaml"))
	cc = replaceOnce(t, cc, "podSubnet: 10.233.64.0/18", "podSubnet: 10.20.0.0/16")
	require.NoError(t, s.AddConfigMap(configMap(KubeadmConfigMap, KubeadmConfigKey, cc, "100")))
	require.NoError(t, s.AddConfigMap(configMap(KubeProxyConfigMap, KubeProxyConfigKey, string(golden(t, "v1.34", "kube-proxy.conf")), "200")))
	require.NoError(t, s.AddConfigMap(configMap(KubeletConfigMap, KubeletConfigKey, string(golden(t, "v1.34", "kubelet.yaml")), "300")))
	var err error
	s.ControllerManager, err = parseManifest("kube-controller-manager.yaml", golden(t, "v1.34", "kube-controller-manager.yaml"))
	require.NoError(t, err)
	s.APIServer, err = parseManifest("kube-apiserver.yaml", golden(t, "v1.34", "kube-apiserver.yaml"))
	require.NoError(t, err)
	s.Nodes = []cidr.NodePodCIDRs{
		{Name: "master1", PodCIDRs: []string{"10.233.64.0/24"}},
		{Name: "worker1", PodCIDRs: []string{"10.20.1.0/24"}},
		{Name: "worker2", PodCIDRs: []string{"10.20.2.0/24"}},
		{Name: "worker3", PodCIDRs: []string{"10.233.67.0/24"}},
	}
	return s
}

func replaceOnce(t testing.TB, s, old, new string) string {
	t.Helper()
	i := strings.Index(s, old)
	require.GreaterOrEqual(t, i, 0, "%q not found", old)
	return s[:i] + new + s[i+len(old):]
}

func codes(fs []Finding) []Code {
	out := []Code{}
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}
