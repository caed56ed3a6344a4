package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the throw-away certificate authority of one cluster. Every
// component serves with one certificate for 127.0.0.1/localhost signed by the
// CA, and kube-apiserver (and etcd with TLS) trusts client certificates
// signed by it, so any user and group can be minted.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	caPEM  []byte

	// CAFile and CAKeyFile are the CA certificate and key (PEM).
	CAFile, CAKeyFile string
	// ServingCertFile and ServingKeyFile are used by every component.
	ServingCertFile, ServingKeyFile string
	// SAKeyFile and SAPubFile sign and verify service account tokens.
	SAKeyFile, SAPubFile string
}

// newPKI creates a CA, a serving certificate valid for 127.0.0.1, ::1,
// localhost, the in-cluster names of the kubernetes Service and extraIPs
// (such as the Service's ClusterIP), and a service-account key pair.
func newPKI(dir string, extraIPs ...net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	p := &pki{dir: dir}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: "cidrshift-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	p.caKey = key
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	p.CAFile = filepath.Join(dir, "ca.crt")
	p.CAKeyFile = filepath.Join(dir, "ca.key")
	if err := writeFiles(map[string][]byte{p.CAFile: p.caPEM, p.CAKeyFile: keyPEM}); err != nil {
		return nil, err
	}

	ips := append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, extraIPs...)
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	certPEM, servingKeyPEM, err := p.issue("cidrshift-e2e-serving", nil, dns, ips, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	p.ServingCertFile = filepath.Join(dir, "serving.crt")
	p.ServingKeyFile = filepath.Join(dir, "serving.key")

	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("encode service account public key: %w", err)
	}
	p.SAKeyFile = filepath.Join(dir, "sa.key")
	p.SAPubFile = filepath.Join(dir, "sa.pub")
	if err := writeFiles(map[string][]byte{
		p.ServingCertFile: certPEM,
		p.ServingKeyFile:  servingKeyPEM,
		p.SAKeyFile:       saKeyPEM,
		p.SAPubFile:       pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// issue signs a certificate for the given subject, names and usages and
// returns it and its new key, PEM-encoded.
func (p *pki) issue(cn string, orgs, dns []string, ips []net.IP, usages ...x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	if cn == "" {
		return nil, nil, fmt.Errorf("certificate common name must not be empty")
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usages,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %q: %w", cn, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// clientCert signs a client certificate: kube-apiserver maps the common
// name to the user and each organization to a group.
func (p *pki) clientCert(user string, groups []string) (certPEM, keyPEM []byte, err error) {
	return p.issue(user, groups, nil, nil, x509.ExtKeyUsageClientAuth)
}

// writeClientCertFiles writes a client certificate and key as name.crt and
// name.key in the pki directory and returns their paths.
func (p *pki) writeClientCertFiles(name, user string, groups []string) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := p.clientCert(user, groups)
	if err != nil {
		return "", "", err
	}
	certFile = filepath.Join(p.dir, name+".crt")
	keyFile = filepath.Join(p.dir, name+".key")
	if err := writeFiles(map[string][]byte{certFile: certPEM, keyFile: keyPEM}); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// kubeconfig builds a self-contained kubeconfig (certificates embedded).
func kubeconfig(server string, caPEM, certPEM, keyPEM []byte, user string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
	cfg.CurrentContext = "e2e"
	return cfg
}

// writeKubeconfig writes a kubeconfig for user/groups to path.
func (p *pki) writeKubeconfig(path, server, user string, groups []string) error {
	certPEM, keyPEM, err := p.clientCert(user, groups)
	if err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*kubeconfig(server, p.caPEM, certPEM, keyPEM, user), path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ECDSA key: %w", err)
	}
	return key, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode ECDSA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func newSerial() *big.Int {
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		// crypto/rand does not fail on Linux; fall back to the clock.
		return big.NewInt(time.Now().UnixNano())
	}
	return n.Add(n, big.NewInt(1))
}

func writeFiles(files map[string][]byte) error {
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
