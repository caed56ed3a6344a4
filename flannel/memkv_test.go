package flannel

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a settable clock for MemKV.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestMemKVRevisions(t *testing.T) {
	ctx := context.Background()
	m := NewMemKV(MemKVOptions{})
	assert.EqualValues(t, 1, m.Revision())

	r, err := m.Put("/a", []byte("1"), 0)
	require.NoError(t, err)
	assert.EqualValues(t, 2, r)
	_, err = m.Put("/a", []byte("2"), 0)
	require.NoError(t, err)
	res, err := m.Get(ctx, "/a", GetOptions{})
	require.NoError(t, err)
	require.Len(t, res.KVs, 1)
	assert.Equal(t, KeyValue{Key: "/a", Value: []byte("2"), CreateRevision: 2, ModRevision: 3, Version: 2}, res.KVs[0])

	// A failed comparison writes nothing; a successful one writes atomically at one revision.
	tr, err := m.Txn(ctx, Txn{If: []Compare{{Key: "/a", ModRevision: 2}}, Then: []Op{{Type: OpDelete, Key: "/a"}}})
	require.NoError(t, err)
	assert.False(t, tr.Succeeded)
	tr, err = m.Txn(ctx, Txn{If: []Compare{{Key: "/a", ModRevision: 3}, {Key: "/b", ModRevision: 0}},
		Then: []Op{{Type: OpPut, Key: "/b", Value: []byte("x")}, {Type: OpDelete, Key: "/a"}}})
	require.NoError(t, err)
	assert.True(t, tr.Succeeded)
	assert.EqualValues(t, 4, tr.Revision)
	res, err = m.Get(ctx, "/", GetOptions{Prefix: true})
	require.NoError(t, err)
	require.Len(t, res.KVs, 1)
	assert.Equal(t, "/b", res.KVs[0].Key)
	assert.EqualValues(t, 4, res.KVs[0].ModRevision)

	// Deleting nothing does not bump the revision, as in etcd.
	r, err = m.Delete("/nothing")
	require.NoError(t, err)
	assert.EqualValues(t, 4, r)
	assert.EqualValues(t, 4, m.Revision())
	r, err = m.Delete("/b")
	require.NoError(t, err)
	assert.EqualValues(t, 5, r)
}

func TestMemKVLeases(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	m := NewMemKV(MemKVOptions{Now: clk.Now})
	id := m.Grant(24 * time.Hour)
	_, err := m.Put("/k", []byte("v"), id)
	require.NoError(t, err)
	ttl, err := m.TimeToLive(ctx, id)
	require.NoError(t, err)
	assert.EqualValues(t, 86400, ttl.TTLSeconds)
	assert.EqualValues(t, 86400, ttl.GrantedTTLSeconds)

	clk.Advance(23 * time.Hour)
	ttl, err = m.TimeToLive(ctx, id)
	require.NoError(t, err)
	assert.EqualValues(t, 3600, ttl.TTLSeconds)

	clk.Advance(time.Hour)
	ttl, err = m.TimeToLive(ctx, id)
	require.NoError(t, err)
	assert.EqualValues(t, -1, ttl.TTLSeconds, "expired")
	res, err := m.Get(ctx, "/k", GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.KVs, "the key went with its lease")

	_, err = m.Put("/k", []byte("v"), id)
	assert.ErrorIs(t, err, ErrLeaseNotFound)
	assert.ErrorIs(t, m.Revoke(id), ErrLeaseNotFound)

	id2 := m.Grant(time.Minute)
	_, err = m.Put("/k2", []byte("v"), id2)
	require.NoError(t, err)
	rev := m.Revision()
	require.NoError(t, m.Revoke(id2))
	assert.Equal(t, rev+1, m.Revision(), "revoking a lease deletes its keys at a new revision, as in etcd")
	res, err = m.Get(ctx, "/k2", GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.KVs)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Get(cancelled, "/k", GetOptions{})
	assert.ErrorIs(t, err, context.Canceled)
}
