package flannel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Defaults of EtcdConfig.
const (
	// DefaultEtcdEndpoints is flanneld's default --etcd-endpoints.
	DefaultEtcdEndpoints = "http://127.0.0.1:4001,http://127.0.0.1:2379"
	// DefaultDialTimeout bounds connecting to etcd.
	DefaultDialTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds each etcd request, so a dead etcd fails a
	// call instead of hanging it.
	DefaultRequestTimeout = 10 * time.Second
)

// EtcdConfig says how to reach etcd. It takes the inputs flanneld takes
// (--etcd-endpoints, --etcd-cafile, --etcd-certfile, --etcd-keyfile,
// --etcd-username, --etcd-password), so the values can be copied from the
// flanneld unit or DaemonSet.
type EtcdConfig struct {
	// Endpoints are etcd client URLs, e.g. https://10.0.0.1:2379.
	Endpoints []string
	// CAFile is a PEM bundle of the CAs that sign etcd's serving certificate.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and key presented to
	// etcd (client certificate authentication). Set both or neither.
	CertFile string
	KeyFile  string
	// Username and Password authenticate with etcd's own auth, when enabled.
	Username string
	Password string
	// DialTimeout defaults to DefaultDialTimeout.
	DialTimeout time.Duration
	// RequestTimeout defaults to DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// ParseEndpoints splits a comma-separated --etcd-endpoints value.
func ParseEndpoints(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// tlsConfig builds the client TLS configuration. Unlike flanneld, which
// silently falls back to plain HTTP when --etcd-certfile or --etcd-keyfile is
// missing, it refuses half a key pair. Errors name files, never their
// contents.
func (c EtcdConfig) tlsConfig() (*tls.Config, error) {
	https := false
	for _, e := range c.Endpoints {
		if strings.HasPrefix(strings.ToLower(e), "https://") {
			https = true
		}
	}
	if c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" && !https {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return nil, fmt.Errorf("%w: etcd KeyFile is empty but CertFile %q is set; give both (--etcd-keyfile and --etcd-certfile) or neither", ErrInvalidRequest, c.CertFile)
	case c.KeyFile != "" && c.CertFile == "":
		return nil, fmt.Errorf("%w: etcd CertFile is empty but KeyFile %q is set; give both (--etcd-certfile and --etcd-keyfile) or neither", ErrInvalidRequest, c.KeyFile)
	case c.CertFile != "":
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			// The error from crypto/tls names the problem, never key bytes.
			return nil, fmt.Errorf("%w: etcd client certificate %q / key %q: %v", ErrInvalidRequest, c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd CAFile: %v", ErrInvalidRequest, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: etcd CAFile %q holds no PEM certificate", ErrInvalidRequest, c.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// withDefaults is the config with DefaultDialTimeout and
// DefaultRequestTimeout in place of unset (zero or negative) timeouts.
func (c EtcdConfig) withDefaults() EtcdConfig {
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return c
}

// EtcdKV is the KV over a real etcd v3 cluster.
type EtcdKV struct {
	cli            *clientv3.Client
	requestTimeout time.Duration
	owned          bool
}

// DialEtcd connects to etcd (over TLS with client certificates when the
// config names them). It does not wait for a connection: the first request
// reports an unreachable cluster. Close the returned EtcdKV when done.
func DialEtcd(ctx context.Context, cfg EtcdConfig) (*EtcdKV, error) {
	log := logr.FromContextOrDiscard(ctx)
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd Endpoints is empty; give at least one client URL such as https://127.0.0.1:2379", ErrInvalidRequest)
	}
	for _, e := range cfg.Endpoints {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" && u.Scheme != "unixs") || u.Host == "" && u.Path == "" {
			return nil, fmt.Errorf("%w: etcd endpoint %q is not a URL like https://10.0.0.1:2379", ErrInvalidRequest, e)
		}
	}
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log.V(1).Info("connecting to etcd", "endpoints", cfg.Endpoints, "tls", tlsCfg != nil,
		"clientCert", cfg.CertFile != "", "caFile", cfg.CAFile)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         tlsCfg,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: cfg.DialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
	}
	return &EtcdKV{cli: cli, requestTimeout: cfg.RequestTimeout, owned: true}, nil
}

// NewEtcdKV wraps an existing client; Close does not close it. A zero
// requestTimeout means DefaultRequestTimeout.
func NewEtcdKV(cli *clientv3.Client, requestTimeout time.Duration) *EtcdKV {
	if requestTimeout <= 0 {
		requestTimeout = DefaultRequestTimeout
	}
	return &EtcdKV{cli: cli, requestTimeout: requestTimeout}
}

// Client returns the underlying etcd client.
func (k *EtcdKV) Client() *clientv3.Client { return k.cli }

// Close closes the client if DialEtcd created it.
func (k *EtcdKV) Close() error {
	if k.owned {
		return k.cli.Close()
	}
	return nil
}

// Get implements KV.
func (k *EtcdKV) Get(ctx context.Context, key string, opts GetOptions) (*GetResult, error) {
	ctx, cancel := context.WithTimeout(ctx, k.requestTimeout)
	defer cancel()
	var ops []clientv3.OpOption
	if opts.Prefix {
		ops = append(ops, clientv3.WithPrefix())
	}
	resp, err := k.cli.Get(ctx, key, ops...)
	if err != nil {
		return nil, fmt.Errorf("etcd get %s: %w", key, err)
	}
	out := &GetResult{Revision: resp.Header.Revision, KVs: make([]KeyValue, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		out.KVs = append(out.KVs, KeyValue{
			Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision,
			ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease,
		})
	}
	return out, nil
}

// Txn implements KV.
func (k *EtcdKV) Txn(ctx context.Context, t Txn) (*TxnResult, error) {
	ctx, cancel := context.WithTimeout(ctx, k.requestTimeout)
	defer cancel()
	cmps := make([]clientv3.Cmp, 0, len(t.If))
	for _, c := range t.If {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.ModRevision))
	}
	ops := make([]clientv3.Op, 0, len(t.Then))
	var keys []string
	for _, o := range t.Then {
		keys = append(keys, o.Key)
		switch o.Type {
		case OpPut:
			var po []clientv3.OpOption
			if o.Lease != 0 {
				po = append(po, clientv3.WithLease(clientv3.LeaseID(o.Lease)))
			}
			ops = append(ops, clientv3.OpPut(o.Key, string(o.Value), po...))
		case OpDelete:
			ops = append(ops, clientv3.OpDelete(o.Key))
		default:
			return nil, fmt.Errorf("%w: unknown transaction operation %d on %s", ErrInvalidRequest, o.Type, o.Key)
		}
	}
	resp, err := k.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, fmt.Errorf("etcd txn on %s: %w: %v", strings.Join(keys, ", "), ErrLeaseNotFound, err)
		}
		return nil, fmt.Errorf("etcd txn on %s: %w", strings.Join(keys, ", "), err)
	}
	return &TxnResult{Succeeded: resp.Succeeded, Revision: resp.Header.Revision}, nil
}

// TimeToLive implements KV.
func (k *EtcdKV) TimeToLive(ctx context.Context, id int64) (*LeaseTTL, error) {
	ctx, cancel := context.WithTimeout(ctx, k.requestTimeout)
	defer cancel()
	resp, err := k.cli.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return &LeaseTTL{ID: id, TTLSeconds: -1}, nil
		}
		return nil, fmt.Errorf("etcd lease %x time to live: %w", id, err)
	}
	return &LeaseTTL{ID: id, TTLSeconds: resp.TTL, GrantedTTLSeconds: resp.GrantedTTL}, nil
}
