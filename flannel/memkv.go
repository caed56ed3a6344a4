package flannel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemKV is an in-memory KV with etcd's semantics: one revision counter
// bumped by every write, per-key create/mod revisions and versions, atomic
// compare-on-mod-revision transactions, and leases that expire and take their
// keys with them. It is meant for tests, examples and offline what-if runs
// (load a snapshot, apply a plan, audit the result). It is safe for
// concurrent use.
type MemKV struct {
	mu        sync.Mutex
	now       func() time.Time
	rev       int64
	kvs       map[string]KeyValue
	leases    map[int64]*memLease
	nextLease int64
}

type memLease struct {
	granted  time.Duration
	deadline time.Time
}

// MemKVOptions configures a MemKV.
type MemKVOptions struct {
	// Now is the clock leases expire by; nil means time.Now. Tests pass a
	// fake clock to expire leases at will.
	Now func() time.Time
}

// NewMemKV returns an empty store at revision 1, as a fresh etcd starts.
func NewMemKV(opts MemKVOptions) *MemKV {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &MemKV{now: now, rev: 1, kvs: map[string]KeyValue{}, leases: map[int64]*memLease{}, nextLease: 0x7a3c0001}
}

// Revision returns the current store revision.
func (m *MemKV) Revision() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	return m.rev
}

// Grant creates an etcd lease with the given TTL (rounded down to seconds,
// at least one) and returns its ID.
func (m *MemKV) Grant(ttl time.Duration) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ttl < time.Second {
		ttl = time.Second
	}
	ttl = ttl.Truncate(time.Second)
	id := m.nextLease
	m.nextLease++
	m.leases[id] = &memLease{granted: ttl, deadline: m.now().Add(ttl)}
	return id
}

// Revoke ends a lease now and deletes its keys, as etcd does.
func (m *MemKV) Revoke(id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	if _, ok := m.leases[id]; !ok {
		return fmt.Errorf("revoke lease %x: %w", id, ErrLeaseNotFound)
	}
	m.revokeLocked(id)
	return nil
}

// Put writes a key unconditionally (as flanneld's lease renewal does) and
// returns the new revision. lease 0 attaches no lease.
func (m *MemKV) Put(key string, value []byte, lease int64) (int64, error) {
	r, err := m.Txn(context.Background(), Txn{Then: []Op{{Type: OpPut, Key: key, Value: value, Lease: lease}}})
	if err != nil {
		return 0, err
	}
	return r.Revision, nil
}

// Delete deletes a key unconditionally and returns the new revision.
func (m *MemKV) Delete(key string) (int64, error) {
	r, err := m.Txn(context.Background(), Txn{Then: []Op{{Type: OpDelete, Key: key}}})
	if err != nil {
		return 0, err
	}
	return r.Revision, nil
}

// Get implements KV.
func (m *MemKV) Get(ctx context.Context, key string, opts GetOptions) (*GetResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	out := &GetResult{Revision: m.rev}
	if !opts.Prefix {
		if kv, ok := m.kvs[key]; ok {
			out.KVs = append(out.KVs, cloneKV(kv))
		}
		return out, nil
	}
	for k, kv := range m.kvs {
		if strings.HasPrefix(k, key) {
			out.KVs = append(out.KVs, cloneKV(kv))
		}
	}
	slices.SortFunc(out.KVs, func(a, b KeyValue) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Txn implements KV.
func (m *MemKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	for _, c := range t.If {
		if m.kvs[c.Key].ModRevision != c.ModRevision {
			return &TxnResult{Succeeded: false, Revision: m.rev}, nil
		}
	}
	for _, o := range t.Then {
		switch o.Type {
		case OpPut:
			if _, ok := m.leases[o.Lease]; o.Lease != 0 && !ok {
				return nil, fmt.Errorf("put %s with lease %x: %w", o.Key, o.Lease, ErrLeaseNotFound)
			}
		case OpDelete:
		default:
			return nil, fmt.Errorf("%w: unknown transaction operation %d on %s", ErrInvalidRequest, o.Type, o.Key)
		}
	}
	next := m.rev + 1
	changed := false
	for _, o := range t.Then {
		switch o.Type {
		case OpPut:
			kv, ok := m.kvs[o.Key]
			if !ok {
				kv = KeyValue{Key: o.Key, CreateRevision: next}
			}
			kv.Value = slices.Clone(o.Value)
			kv.ModRevision = next
			kv.Version++
			kv.Lease = o.Lease
			m.kvs[o.Key] = kv
			changed = true
		case OpDelete:
			if _, ok := m.kvs[o.Key]; ok {
				delete(m.kvs, o.Key)
				changed = true
			}
		}
	}
	if changed {
		m.rev = next
	}
	return &TxnResult{Succeeded: true, Revision: m.rev}, nil
}

// TimeToLive implements KV.
func (m *MemKV) TimeToLive(ctx context.Context, id int64) (*LeaseTTL, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	l, ok := m.leases[id]
	if !ok {
		return &LeaseTTL{ID: id, TTLSeconds: -1}, nil
	}
	left := l.deadline.Sub(m.now())
	return &LeaseTTL{ID: id, TTLSeconds: int64((left + time.Second - 1) / time.Second), GrantedTTLSeconds: int64(l.granted / time.Second)}, nil
}

// expireLocked revokes every lease whose deadline has passed.
func (m *MemKV) expireLocked() {
	now := m.now()
	var ids []int64
	for id, l := range m.leases {
		if !now.Before(l.deadline) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		m.revokeLocked(id)
	}
}

func (m *MemKV) revokeLocked(id int64) {
	delete(m.leases, id)
	var keys []string
	for k, kv := range m.kvs {
		if kv.Lease == id {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	m.rev++
	for _, k := range keys {
		delete(m.kvs, k)
	}
}

func cloneKV(kv KeyValue) KeyValue {
	kv.Value = slices.Clone(kv.Value)
	return kv
}
