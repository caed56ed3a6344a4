package kubetest

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// WriteFault counts the creates and updates of one resource and answers one
// of them with an error, as a server that times out a single write does.
type WriteFault struct {
	mu     sync.Mutex
	writes int
}

// FailWrite prepends a reactor to c that answers write number failAt
// (counted from 0; a negative failAt fails none) of resource's creates and
// updates with err. Call it after EnforceCAS, so that it answers first.
func FailWrite(c *fake.Clientset, resource string, failAt int, err error) *WriteFault {
	w := &WriteFault{}
	react := func(k8stesting.Action) (bool, runtime.Object, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.writes++
		if w.writes-1 == failAt {
			return true, nil, err
		}
		return false, nil, nil
	}
	c.PrependReactor("create", resource, react)
	c.PrependReactor("update", resource, react)
	return w
}

// Writes is how many creates and updates were sent, the failed one included.
func (w *WriteFault) Writes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}
