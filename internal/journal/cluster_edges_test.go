package journal

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cidrshift/cidrshift/internal/access"
)

// An open run with a chunk deleted by hand is refused, naming the missing
// chunk and the ones left: reading it would lose the records the chunk
// held, and a resume from it would redo steps already done.
func TestClusterRunMissingAChunkIsRefused(t *testing.T) {
	c := clusterClient()
	opts := clusterOpts(c)
	opts.ChunkBytes = 300 // several chunks
	j := openCluster(t, t.TempDir(), opts)
	for i := range 6 {
		require.NoError(t, j.PutContext(context.Background(), fmt.Sprintf("node/w-%d", i), bigRec{Name: fmt.Sprint(i), Phase: "backed-up", Pad: strings.Repeat("p", 60)}))
	}
	cms := chunks(t, c)
	require.Greater(t, len(cms), 2)
	var gone string
	for _, cm := range cms {
		if cm.Labels[LabelChunk] == "1" {
			gone = cm.Name
		}
	}
	require.NotEmpty(t, gone)
	require.NoError(t, c.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), gone, metav1.DeleteOptions{}))

	_, err := ReadCluster(context.Background(), opts)
	require.ErrorIs(t, err, ErrClusterRun)
	assert.ErrorContains(t, err, "lacks a chunk")
	assert.ErrorContains(t, err, "chunk 1 missing")
	for _, cm := range cms {
		if cm.Name != gone {
			assert.ErrorContains(t, err, cm.Name, "the chunks left are named")
		}
	}
	_, err = OpenCluster(context.Background(), t.TempDir(), opts)
	assert.ErrorIs(t, err, ErrClusterRun, "no run starts beside it")
}

// A chunk create answered AlreadyExists is taken over only when the
// ConfigMap is this run's (an earlier attempt went through). Another run's
// ConfigMap of that name is left as it is, and so is one that cannot be
// read; the write fails in both cases.
func TestClusterChunkCreateAlreadyExists(t *testing.T) {
	for _, tc := range []struct {
		name    string
		run     string // the run label of the ConfigMap in the way; "" for this run's
		readErr error
		want    string
	}{
		{name: "this run's, from an earlier attempt", want: ""},
		{name: "another run's", run: "other", want: "already exists"},
		{name: "unreadable", readErr: apierrors.NewForbidden(corev1.Resource("configmaps"), "x", fmt.Errorf("no get")), want: "no get"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterClient()
			j := openCluster(t, t.TempDir(), clusterOpts(c))
			c.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
				cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
				if tc.run != "" {
					cm.Labels[LabelRun] = tc.run
				}
				cm.Data = map[string]string{"theirs": "kept"}
				if err := c.Tracker().Create(a.GetResource(), cm, cm.Namespace); err != nil {
					return true, nil, err
				}
				return true, nil, apierrors.NewAlreadyExists(a.GetResource().GroupResource(), cm.Name)
			})
			if tc.readErr != nil {
				c.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.readErr
				})
			}
			err := j.PutContext(context.Background(), "node/a", rec{"a", "cordoned"})
			cms := chunks(t, c)
			require.Len(t, cms, 1)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, map[string]string{"node_2fa": `{"name":"a","phase":"cordoned"}`}, cms[0].Data, "this run's chunk, written")
				return
			}
			require.ErrorContains(t, err, tc.want)
			assert.Equal(t, map[string]string{"theirs": "kept"}, cms[0].Data, "the ConfigMap in the way is untouched")
		})
	}
}

// OpenWithCluster without options is a journal directory alone; with them
// it keeps a copy in the cluster.
func TestOpenWithCluster(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenWithCluster(context.Background(), dir, nil)
	require.NoError(t, err)
	require.NoError(t, j.Put("node/a", rec{"a", "cordoned"}))
	require.NoError(t, j.Close())
	_, err = os.Stat(dir + "/" + markerFile)
	assert.ErrorIs(t, err, os.ErrNotExist, "no cluster run named")

	c := clusterClient()
	opts := clusterOpts(c)
	j, err = OpenWithCluster(context.Background(), t.TempDir(), &opts)
	require.NoError(t, err)
	t.Cleanup(func() { j.Close() })
	require.NoError(t, j.PutContext(context.Background(), "node/a", rec{"a", "cordoned"}))
	assert.Len(t, chunks(t, c), 1, "a copy in the cluster")
}

func TestClusterChecksAndClusterIn(t *testing.T) {
	verbs := func(cs []access.Check, ns string) []string {
		var out []string
		for _, c := range cs {
			assert.Equal(t, "configmaps", c.Resource)
			assert.Equal(t, ns, c.Namespace)
			out = append(out, c.Verb)
		}
		return out
	}
	want := []string{"get", "list", "create", "update", "delete"}
	assert.Equal(t, want, verbs(ClusterChecks(""), "kube-system"), "empty namespace is kube-system")
	assert.Equal(t, want, verbs(ClusterChecks("ops"), "ops"))

	c := clusterClient()
	assert.Equal(t, &ClusterOptions{Client: c, Namespace: "ops", Scope: "cidrshift-nodecidr", Holder: "h"},
		ClusterIn(c, "ops", "", "cidrshift-nodecidr", "h"), "empty name is the default scope")
	assert.Equal(t, &ClusterOptions{Client: c, Scope: "mine", Holder: "h"}, ClusterIn(c, "", "mine", "cidrshift-nodecidr", "h"))
}
