// Package etcdtest starts a real, single-member etcd (go.etcd.io/etcd/server/v3
// embed) on 127.0.0.1 for tests, serving clients over TLS with client
// certificate authentication. The CA, server and client certificates are
// generated per test. The server can be stopped and restarted on the same data
// directory and port, to test what survives an etcd outage.
package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running (or stopped) embedded etcd.
type Server struct {
	t *testing.T
	// Endpoint is the client URL, https://127.0.0.1:<port>.
	Endpoint string
	// CAFile, CertFile and KeyFile are the client's TLS inputs (flanneld's
	// --etcd-cafile, --etcd-certfile, --etcd-keyfile).
	CAFile, CertFile, KeyFile string
	// DataDir is the member's data directory.
	DataDir string

	serverCert, serverKey string
	clientPort, peerPort  int
	etcd                  *embed.Etcd
}

// Start starts etcd and registers its shutdown with t.Cleanup.
func Start(t *testing.T) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{t: t, DataDir: filepath.Join(dir, "data"), clientPort: freePort(t), peerPort: freePort(t)}
	s.Endpoint = fmt.Sprintf("https://127.0.0.1:%d", s.clientPort)
	s.writeCerts(dir)
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Stop stops etcd gracefully, keeping its data directory. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	if s.etcd == nil {
		return
	}
	s.etcd.Close()
	s.etcd = nil
}

// Restart starts etcd again on the same data directory and ports.
func (s *Server) Restart() {
	s.t.Helper()
	if s.etcd != nil {
		s.t.Fatal("etcdtest: Restart while running")
	}
	cfg := embed.NewConfig()
	cfg.Name = "flanneltest"
	cfg.Dir = s.DataDir
	cu := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", s.clientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", s.peerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: s.serverCert, KeyFile: s.serverKey, TrustedCAFile: s.CAFile, ClientCertAuth: true}
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(filepath.Dir(s.DataDir), "etcd.log")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		s.t.Fatalf("etcdtest: start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		s.t.Fatalf("etcdtest: etcd failed: %v", err)
	case <-time.After(60 * time.Second):
		e.Close()
		s.t.Fatal("etcdtest: etcd not ready after 60s")
	}
	s.etcd = e
}

// Client returns a new TLS client of the server, closed at the end of the test.
func (s *Server) Client() *clientv3.Client {
	s.t.Helper()
	pair, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		s.t.Fatal(err)
	}
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		s.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, RootCAs: pool},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeCerts creates a CA, a server certificate for 127.0.0.1 and a client
// certificate, as PEM files in dir.
func (s *Server) writeCerts(dir string) {
	t := s.t
	t.Helper()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdtest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	s.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	issue := func(serial int64, cn string, usage []x509.ExtKeyUsage, ips []net.IP, name string) (string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usage, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	s.serverCert, s.serverKey = issue(2, "etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		[]net.IP{net.ParseIP("127.0.0.1")}, "server")
	s.CertFile, s.KeyFile = issue(3, "flanneld", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, "client")
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
