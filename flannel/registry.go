package flannel

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
)

// DefaultPrefix is flanneld's default --etcd-prefix.
const DefaultPrefix = "/coreos.com/network"

// LeaseTTLSeconds is the TTL flanneld grants a subnet lease (24 hours); it
// renews the lease --subnet-lease-renew-margin (default 60 minutes) before it
// ends.
const LeaseTTLSeconds = 24 * 60 * 60

// Registry reads and changes flannel's subnet registry in etcd, in the layout
// flanneld v0.18 and later use on the etcd v3 API:
//
//	<prefix>/config                                 the network config (JSON, no etcd lease)
//	<prefix>/subnets/10.5.34.0-24                   one lease per node (JSON, 24 h etcd lease)
//	<prefix>/subnets/10.5.34.0-24&fd00:10:244:5::-64 a dual-stack lease
//
// flanneld lists <prefix>/subnets without a trailing slash and matches its
// key pattern anywhere in a key, so it also takes keys such as
// <prefix>/subnets.bak/10.5.34.0-24 for leases; Snapshot does the same, and
// Audit flags them as non-canonical.
//
// Reads are Snapshot; changes go through a Plan (see PlanDelete, PlanMove,
// PlanSetNetwork, PlanPutConfig) and Apply.
type Registry struct {
	kv     KV
	prefix string
}

// RegistryOptions configures a Registry.
type RegistryOptions struct {
	// Prefix is flanneld's --etcd-prefix; empty means DefaultPrefix.
	Prefix string
}

// NewRegistry returns a registry over kv. The prefix must be an absolute
// etcd path ("/coreos.com/network"); a trailing slash is dropped.
func NewRegistry(kv KV, opts RegistryOptions) (*Registry, error) {
	if kv == nil {
		return nil, fmt.Errorf("%w: KV is nil", ErrInvalidRequest)
	}
	p := opts.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%w: etcd prefix %q must start with \"/\", like %q", ErrInvalidRequest, p, DefaultPrefix)
	}
	p = strings.TrimRight(p, "/")
	if p == "" {
		return nil, fmt.Errorf("%w: etcd prefix %q is the root; flanneld needs a prefix such as %q", ErrInvalidRequest, opts.Prefix, DefaultPrefix)
	}
	return &Registry{kv: kv, prefix: p}, nil
}

// Prefix returns the etcd prefix.
func (r *Registry) Prefix() string { return r.prefix }

// ConfigKey returns <prefix>/config.
func (r *Registry) ConfigKey() string { return r.prefix + "/config" }

// SubnetsPrefix returns <prefix>/subnets/.
func (r *Registry) SubnetsPrefix() string { return r.prefix + "/subnets/" }

// LeaseKey returns the etcd key of the lease on subnet k.
func (r *Registry) LeaseKey(k SubnetKey) string { return r.SubnetsPrefix() + k.String() }

// ConfigEntry is the network config as stored.
type ConfigEntry struct {
	Key         string `json:"key"`
	ModRevision int64  `json:"modRevision"`
	// Raw is the stored JSON text.
	Raw string `json:"raw"`
	// Config is the parsed config; nil when Raw cannot be parsed.
	Config *Config `json:"config,omitempty"`
	// Resolved is the config with flanneld's defaults applied; nil when
	// flanneld would refuse it.
	Resolved *Resolved `json:"resolved,omitempty"`
	// Error says why flanneld would refuse the config (parse or check).
	Error string `json:"error,omitempty"`
	// err is the typed error behind Error.
	err error
}

// Err returns the typed error behind Error (nil when the config is valid).
func (c *ConfigEntry) Err() error { return c.err }

// Snapshot is everything under the prefix at one etcd revision.
type Snapshot struct {
	Prefix string `json:"prefix"`
	// Revision is the etcd revision the snapshot was read at.
	Revision int64 `json:"revision"`
	// Config is nil when <prefix>/config does not exist.
	Config *ConfigEntry `json:"config,omitempty"`
	// Leases are the readable leases, sorted by key.
	Leases []Lease `json:"leases"`
	// BadLeases are keys under <prefix>/subnets/ flanneld cannot read.
	BadLeases []BadLease `json:"badLeases,omitempty"`
}

// Lease returns the lease stored under key, or nil.
func (s *Snapshot) Lease(key string) *Lease {
	for i := range s.Leases {
		if s.Leases[i].Key == key {
			return &s.Leases[i]
		}
	}
	return nil
}

// Snapshot reads the config and every lease in one consistent etcd read, and
// the TTL of each lease's etcd lease.
func (r *Registry) Snapshot(ctx context.Context) (*Snapshot, error) {
	log := logr.FromContextOrDiscard(ctx)
	res, err := r.kv.Get(ctx, r.prefix+"/", GetOptions{Prefix: true})
	if err != nil {
		return nil, fmt.Errorf("read flannel registry %s: %w", r.prefix, err)
	}
	s := &Snapshot{Prefix: r.prefix, Revision: res.Revision, Leases: []Lease{}}
	ttls := map[int64]*LeaseTTL{}
	for _, kv := range res.KVs {
		switch {
		case kv.Key == r.ConfigKey():
			s.Config = parseConfigEntry(kv)
		case strings.HasPrefix(kv.Key, r.prefix+"/subnets"):
			// flanneld lists <prefix>/subnets without a trailing slash and matches
			// its key pattern anywhere in the key, so <prefix>/subnets.bak/... keys
			// (a hand-made backup) are leases to it as well.
			name := strings.TrimPrefix(strings.TrimPrefix(kv.Key, r.prefix+"/subnets"), "/")
			k, err := ParseSubnetKey(name)
			if err != nil {
				s.BadLeases = append(s.BadLeases, BadLease{Key: kv.Key, Value: string(kv.Value), ModRevision: kv.ModRevision, LeaseID: kv.Lease, Error: err.Error()})
				continue
			}
			attrs, err := ParseLeaseAttrs(kv.Value)
			if err != nil {
				s.BadLeases = append(s.BadLeases, BadLease{Key: kv.Key, Value: string(kv.Value), ModRevision: kv.ModRevision, LeaseID: kv.Lease, Error: err.Error(), Subnet: k})
				continue
			}
			l := Lease{Key: kv.Key, Subnet: k, Attrs: attrs, Value: string(kv.Value), CreateRevision: kv.CreateRevision,
				ModRevision: kv.ModRevision, Version: kv.Version, LeaseID: kv.Lease}
			if kv.Lease != 0 {
				t, ok := ttls[kv.Lease]
				if !ok {
					if t, err = r.kv.TimeToLive(ctx, kv.Lease); err != nil {
						return nil, fmt.Errorf("read TTL of %s: %w", kv.Key, err)
					}
					ttls[kv.Lease] = t
				}
				l.TTLSeconds, l.GrantedTTLSeconds = t.TTLSeconds, t.GrantedTTLSeconds
			}
			s.Leases = append(s.Leases, l)
		default:
			log.V(1).Info("ignoring key that is not part of flannel's layout", "key", kv.Key)
		}
	}
	return s, nil
}

// ReadConfig reads <prefix>/config alone. It fails with ErrConfigNotFound when
// the key does not exist; a config flanneld would refuse is returned with its
// Error set (and Err typed), not as an error.
func (r *Registry) ReadConfig(ctx context.Context) (*ConfigEntry, error) {
	res, err := r.kv.Get(ctx, r.ConfigKey(), GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.ConfigKey(), err)
	}
	if len(res.KVs) == 0 {
		return nil, fmt.Errorf("%w: %s does not exist (flanneld: %q)", ErrConfigNotFound, r.ConfigKey(),
			"flannel config not found in etcd store. Did you create your config using etcdv3 API?")
	}
	return parseConfigEntry(res.KVs[0]), nil
}

func parseConfigEntry(kv KeyValue) *ConfigEntry {
	e := &ConfigEntry{Key: kv.Key, ModRevision: kv.ModRevision, Raw: string(kv.Value)}
	c, err := ParseConfig(kv.Value)
	if err != nil {
		e.err, e.Error = err, err.Error()
		return e
	}
	e.Config = c
	res, err := c.Resolve()
	if err != nil {
		e.err, e.Error = err, err.Error()
		return e
	}
	e.Resolved = res
	return e
}

// resolved returns the resolved config of a snapshot or an error saying why there is none.
func (s *Snapshot) resolved() (*Resolved, error) {
	if s.Config == nil {
		return nil, fmt.Errorf("%w: %s/config does not exist", ErrConfigNotFound, s.Prefix)
	}
	if s.Config.Resolved == nil {
		if s.Config.err != nil {
			return nil, s.Config.err
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, s.Config.Error)
	}
	return s.Config.Resolved, nil
}
