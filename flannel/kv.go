package flannel

import (
	"context"
)

// KV is the small part of the etcd v3 API the registry needs. EtcdKV
// implements it over go.etcd.io/etcd/client/v3 and MemKV in memory; callers
// may plug in their own (a proxy, a recorder, a fault injector).
//
// Implementations must give etcd's guarantees: Get reads one consistent
// revision, and Txn applies all of its operations atomically if and only if
// every comparison holds.
type KV interface {
	// Get reads one key, or every key starting with key when opts.Prefix is set,
	// sorted by key.
	Get(ctx context.Context, key string, opts GetOptions) (*GetResult, error)
	// Txn runs a transaction: if every comparison in t.If holds, the operations
	// in t.Then are applied atomically and Succeeded is true; otherwise nothing
	// is written and Succeeded is false.
	Txn(ctx context.Context, t Txn) (*TxnResult, error)
	// TimeToLive returns what is left of an etcd lease. A lease that has expired
	// or was revoked is reported with TTLSeconds -1 and no error.
	TimeToLive(ctx context.Context, id int64) (*LeaseTTL, error)
}

// GetOptions tunes KV.Get.
type GetOptions struct {
	// Prefix reads every key that starts with the given key.
	Prefix bool
}

// KeyValue is one key with its etcd metadata.
type KeyValue struct {
	Key            string
	Value          []byte
	CreateRevision int64
	ModRevision    int64
	Version        int64
	// Lease is the ID of the etcd lease attached to the key, 0 for none.
	Lease int64
}

// GetResult is the answer to KV.Get.
type GetResult struct {
	// Revision is the store revision the read saw.
	Revision int64
	KVs      []KeyValue
}

// Compare is one condition of a transaction: the key's mod revision equals
// ModRevision. ModRevision 0 means "the key does not exist".
type Compare struct {
	Key         string
	ModRevision int64
}

// OpType is the kind of a transaction operation.
type OpType int

// The operations a transaction can carry.
const (
	// OpPut writes Value to Key, attaching Lease when it is not zero.
	OpPut OpType = iota + 1
	// OpDelete deletes Key.
	OpDelete
)

// Op is one write in a transaction.
type Op struct {
	Type  OpType
	Key   string
	Value []byte
	// Lease attaches an existing etcd lease to the key (OpPut only).
	Lease int64
}

// Txn is a compare-and-swap transaction.
type Txn struct {
	If   []Compare
	Then []Op
}

// TxnResult is the outcome of a transaction.
type TxnResult struct {
	// Succeeded is false when a comparison failed and nothing was written.
	Succeeded bool
	// Revision is the store revision after the transaction.
	Revision int64
}

// LeaseTTL describes an etcd lease.
type LeaseTTL struct {
	ID int64
	// TTLSeconds is the time left; -1 when the lease has expired or never existed.
	TTLSeconds int64
	// GrantedTTLSeconds is the TTL the lease was granted with.
	GrantedTTLSeconds int64
}
