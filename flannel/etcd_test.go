package flannel

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cidrshift/cidrshift/flannel/internal/etcdtest"
)

// etcdStore does flanneld's writes with its own etcd client.
type etcdStore struct{ cli *clientv3.Client }

func (s *etcdStore) grant(t *testing.T, ttl time.Duration) int64 {
	resp, err := s.cli.Grant(context.Background(), int64(ttl/time.Second))
	require.NoError(t, err)
	return int64(resp.ID)
}

func (s *etcdStore) put(t *testing.T, key, value string, lease int64) {
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(lease)))
	}
	_, err := s.cli.Put(context.Background(), key, value, opts...)
	require.NoError(t, err)
}

func (s *etcdStore) get(t *testing.T, key string) *KeyValue {
	resp, err := s.cli.Get(context.Background(), key)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return nil
	}
	kv := resp.Kvs[0]
	return &KeyValue{Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}

func etcdConfig(srv *etcdtest.Server) EtcdConfig {
	return EtcdConfig{Endpoints: []string{srv.Endpoint}, CAFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile, RequestTimeout: 5 * time.Second}
}

// TestStoryEtcd runs the fourth story against a real etcd over TLS with
// client certificates, and stops etcd in the middle of a network change: a
// rerun after the restart on the same data directory finishes it.
func TestStoryEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real etcd")
	}
	ctx := context.Background()
	srv := etcdtest.Start(t)
	kv, err := DialEtcd(ctx, etcdConfig(srv))
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })
	reg, err := NewRegistry(kv, RegistryOptions{Prefix: pfx + "/"})
	require.NoError(t, err)
	store := &etcdStore{cli: srv.Client()}

	runStory(t, ctx, store, reg, crashHook{
		crash: func(t *testing.T) error {
			srv.Stop() // the write that follows meets a dead etcd
			return nil
		},
		resume: func(t *testing.T) *Registry {
			srv.Restart()
			_ = kv.Close()
			kv2, err := DialEtcd(ctx, etcdConfig(srv))
			require.NoError(t, err)
			t.Cleanup(func() { _ = kv2.Close() })
			store.cli = srv.Client()
			r, err := NewRegistry(kv2, RegistryOptions{})
			require.NoError(t, err)
			return r
		},
	})
}

// TestEtcdTLS checks the connection inputs: a client certificate is required
// by the server, half a key pair and bad files are refused with errors that
// name files and never their contents.
func TestEtcdTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real etcd")
	}
	ctx := context.Background()
	srv := etcdtest.Start(t)
	keyPEM, err := os.ReadFile(srv.KeyFile)
	require.NoError(t, err)
	secret := strings.Split(strings.TrimSpace(string(keyPEM)), "\n")[1]

	// No client certificate: the server refuses the handshake.
	kv, err := DialEtcd(ctx, EtcdConfig{Endpoints: []string{srv.Endpoint}, CAFile: srv.CAFile, RequestTimeout: 2 * time.Second})
	require.NoError(t, err)
	_, err = kv.Get(ctx, "/x", GetOptions{})
	assert.Error(t, err)
	_ = kv.Close()

	for name, cfg := range map[string]EtcdConfig{
		"cert without key": {Endpoints: []string{srv.Endpoint}, CertFile: srv.CertFile},
		"key without cert": {Endpoints: []string{srv.Endpoint}, KeyFile: srv.KeyFile},
		"key as cert":      {Endpoints: []string{srv.Endpoint}, CertFile: srv.KeyFile, KeyFile: srv.KeyFile},
		"cert as ca":       {Endpoints: []string{srv.Endpoint}, CAFile: srv.KeyFile},
		"missing ca":       {Endpoints: []string{srv.Endpoint}, CAFile: filepath.Join(t.TempDir(), "nope.pem")},
		"no endpoint":      {},
		"bad endpoint":     {Endpoints: []string{"127.0.0.1 2379"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DialEtcd(ctx, cfg)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidRequest)
			assert.NotContains(t, err.Error(), secret, "never print key material")
		})
	}

	// With the flanneld inputs it works, and TTLs of unknown leases read as -1.
	// At V(1) the connection says it uses TLS with a client certificate.
	var dialLog []string
	logCtx := logr.NewContext(ctx, funcr.New(func(_, args string) { dialLog = append(dialLog, args) }, funcr.Options{Verbosity: 1}))
	kv, err = DialEtcd(logCtx, etcdConfig(srv))
	require.NoError(t, err)
	defer kv.Close()
	require.Len(t, dialLog, 1)
	assert.Contains(t, dialLog[0], `"tls"=true "clientCert"=true "caFile"=`)
	ttl, err := kv.TimeToLive(ctx, 12345)
	require.NoError(t, err)
	assert.EqualValues(t, -1, ttl.TTLSeconds)
	_, err = kv.Txn(ctx, Txn{Then: []Op{{Type: OpPut, Key: "/x", Value: []byte("y"), Lease: 12345}}})
	assert.ErrorIs(t, err, ErrLeaseNotFound)
	_, err = kv.Txn(ctx, Txn{Then: []Op{{Type: 99, Key: "/x"}}})
	assert.ErrorIs(t, err, ErrInvalidRequest)

	// Wrapping a caller's client: Close leaves it open.
	cli := srv.Client()
	wrapped := NewEtcdKV(cli, 0)
	assert.Same(t, cli, wrapped.Client())
	require.NoError(t, wrapped.Close())
	_, err = wrapped.Get(ctx, "/x", GetOptions{Prefix: true})
	assert.NoError(t, err)
}

func TestParseEndpoints(t *testing.T) {
	assert.Equal(t, []string{"http://127.0.0.1:4001", "http://127.0.0.1:2379"}, ParseEndpoints(DefaultEtcdEndpoints))
	assert.Equal(t, []string{"https://a:2379"}, ParseEndpoints(" https://a:2379, ,"))
	assert.Empty(t, ParseEndpoints(""))
}

// TestEtcdPlainHTTPUsesNoTLS: plain http endpoints with no CA, certificate
// or key get no TLS configuration (as etcdctl and flanneld connect).
func TestEtcdPlainHTTPUsesNoTLS(t *testing.T) {
	cfg, err := EtcdConfig{Endpoints: []string{"http://127.0.0.1:2379"}}.tlsConfig()
	require.NoError(t, err)
	assert.Nil(t, cfg)
}

// TestDialEtcdRefusesAnEndpointWithoutHostOrPath: "https://" names no
// server; it is refused before any dial.
func TestDialEtcdRefusesAnEndpointWithoutHostOrPath(t *testing.T) {
	_, err := DialEtcd(t.Context(), EtcdConfig{Endpoints: []string{"https://"}})
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.ErrorContains(t, err, `etcd endpoint "https://" is not a URL`)
}

// TestEtcdConfigUnsetTimeoutsGetTheirDefaults: a zero or negative timeout
// means the default (a zero request timeout would fail every request at
// once, a zero dial timeout would let an authenticating dial to a dead etcd
// hang), and a timeout the caller gave is kept.
func TestEtcdConfigUnsetTimeoutsGetTheirDefaults(t *testing.T) {
	for _, tc := range []struct {
		name                string
		dial, request       time.Duration
		wantDial, wantRqust time.Duration
	}{
		{"unset", 0, 0, DefaultDialTimeout, DefaultRequestTimeout},
		{"negative", -time.Second, -time.Second, DefaultDialTimeout, DefaultRequestTimeout},
		{"given", 2 * time.Second, 3 * time.Second, 2 * time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := EtcdConfig{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: tc.dial, RequestTimeout: tc.request}
			got := cfg.withDefaults()
			assert.Equal(t, tc.wantDial, got.DialTimeout, "DialTimeout")
			assert.Equal(t, tc.wantRqust, got.RequestTimeout, "RequestTimeout")
			assert.Positive(t, got.DialTimeout, "a dial is always bounded")
			assert.Positive(t, got.RequestTimeout, "a request is always bounded")

			kv, err := DialEtcd(t.Context(), cfg)
			require.NoError(t, err)
			defer kv.Close()
			assert.Equal(t, tc.wantRqust, kv.requestTimeout, "the request timeout DialEtcd's KV uses")
		})
	}
}
