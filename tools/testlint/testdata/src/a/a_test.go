package a

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"b"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8stesting "k8s.io/client-go/testing"
)

type finding struct{ Kind string }

type kind string

func check(t *testing.T) { t.Fatal("x") } // want check:"stops"

func checkTwice(t *testing.T) { check(t) } // want checkTwice:"stops"

func quiet(t *testing.T) error { return nil }

func TestOffTheTestGoroutine(t *testing.T) {
	var f k8stesting.Fake
	f.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, any, error) {
		require.NoError(t, nil) // want `require.NoError stops the test, but runs in a fake clientset's reactor`
		assert.NoError(t, nil)
		return false, nil, nil
	})
	count := func(a k8stesting.Action) (bool, any, error) {
		t.Fatalf("no") // want `T.Fatalf stops the test, but runs in a fake clientset's reactor`
		return false, nil, nil
	}
	f.AddReactor("*", "*", count)
	go func() {
		checkTwice(t) // want `checkTwice may stop the test .* but runs in a goroutine \(go statement\)`
		_ = quiet(t)
	}()
	go check(t) // want `check runs in a goroutine and may stop the test there`
	var wg sync.WaitGroup
	wg.Go(func() {
		b.MustDo(t) // want `MustDo may stop the test`
		_ = b.Quiet(t)
		_ = t.TempDir() // want `T.TempDir stops the test`
	})
	assert.Eventually(t, func() bool {
		r := require.New(t)
		r.NoError(nil) // want `require.NoError stops the test, but runs in the condition of Eventually`
		return true
	}, time.Second, time.Millisecond)
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, nil)
	}, time.Second, time.Millisecond)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.FailNow() // want `T.FailNow stops the test, but runs in an HTTP handler`
	})
	_ = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.SkipNow() // want `T.SkipNow stops the test, but runs in an HTTP handler`
	})
	// On the test goroutine: fine.
	require.NoError(t, nil)
	check(t)
	func() { require.NoError(t, nil) }()
	t.Run("sub", func(t *testing.T) { require.NoError(t, nil) })
}

func TestCannotFail(t *testing.T) {
	findings := []finding{{Kind: "x"}}
	assert.NotContains(t, findings, "x")    // want `NotContains always passes: it looks for a string among the elements of a \[\]a.finding`
	assert.Contains(t, findings, kind("x")) // want `Contains always fails: it looks for a a.kind among the elements`
	assert.NotContains(t, findings, finding{Kind: "x"})
	kinds := []kind{"x"}
	assert.NotContains(t, kinds, "x") // want `NotContains always passes: it looks for a string among the elements of a \[\]a.kind`
	assert.NotContains(t, kinds, kind("x"))
	require.NotContains(t, map[string]int{}, 3) // want `NotContains always passes: it looks for a int among the keys`
	assert.Containsf(t, "abc", 'b', "msg")      // want `Contains always fails: it looks for a rune in a string`
	assert.NotContains(t, "abc", "b")
	assert.New(t).NotContains([]int64{1}, 1) // want `NotContains always passes: it looks for a int among the elements of a \[\]int64`
	assert.NotContains(t, []any{1}, "x")
	var err error = errors.New("x")
	assert.NotContains(t, []error{err}, err)
	assert.NotSubset(t, []int{1}, []int64{2}) // want `NotSubset always passes`
	assert.NotSubset(t, []int{1}, []int{2})
	var n int64 = 3
	assert.NotEqual(t, 3, n) // want `NotEqual always passes: a int is never equal to a int64`
	assert.NotEqual(t, int64(3), n)
	assert.NotEqual(t, nil, err)
	assert.NotNil(t, finding{}) // want `NotNil always passes: a a.finding is never nil`
	assert.NotNil(t, &finding{})
	assert.NotNil(t, err)
	assert.True(t, true) // want `True of a constant`
	assert.True(t, n == 3)
}
