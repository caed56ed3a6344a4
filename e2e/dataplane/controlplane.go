package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

// Ports of the forwarders in the control namespace.
const (
	APIServerPort = 6443
	EtcdPort      = 2379
)

// ControlPlane is a harness cluster reachable from the node namespaces at
// ControlIP through forwarders.
type ControlPlane struct {
	*harness.Cluster
	// NodeKubeconfig is an admin kubeconfig whose server is
	// https://198.51.100.1:6443, for processes in node namespaces.
	NodeKubeconfig string
	// EtcdEndpoint is etcd as node processes reach it.
	EtcdEndpoint string
}

// StartControlPlane starts a harness cluster (without kwok and the
// scheduler: the nodes here are real namespaces, not kwok's) whose serving
// certificate also names ControlIP, and the forwarders to etcd and (unless
// disabled) kube-apiserver.
func (e *Env) StartControlPlane(t testing.TB, opts harness.Options) *ControlPlane {
	t.Helper()
	opts.ExtraServingIPs = append(opts.ExtraServingIPs, net.IP(ControlIP.AsSlice()))
	opts.Disable = append(opts.Disable, harness.Kwok, harness.Scheduler)
	c := harness.Start(t, opts)
	cp := &ControlPlane{Cluster: c}
	etcdURL, err := url.Parse(c.EtcdEndpoint())
	if err != nil {
		t.Fatalf("etcd URL: %v", err)
	}
	if _, err := e.Forward(e.ControlNS, ControlIP, EtcdPort, etcdURL.Host); err != nil {
		t.Fatalf("forward etcd: %v", err)
	}
	cp.EtcdEndpoint = fmt.Sprintf("%s://%s", etcdURL.Scheme, netip.AddrPortFrom(ControlIP, EtcdPort))
	if slices.Contains(opts.Disable, harness.APIServer) {
		return cp
	}
	api, err := url.Parse(c.APIServerURL())
	if err != nil {
		t.Fatalf("apiserver URL: %v", err)
	}
	if _, err := e.Forward(e.ControlNS, ControlIP, APIServerPort, api.Host); err != nil {
		t.Fatalf("forward apiserver: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(c.AdminKubeconfig())
	if err != nil {
		t.Fatalf("load admin kubeconfig: %v", err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + net.JoinHostPort(ControlIP.String(), strconv.Itoa(APIServerPort))
	}
	cp.NodeKubeconfig = filepath.Join(e.Dir, "node.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, cp.NodeKubeconfig); err != nil {
		t.Fatalf("write node kubeconfig: %v", err)
	}
	return cp
}

// NodeUserKubeconfig writes a kubeconfig that authenticates as user in
// groups (harness.Cluster.UserKubeconfig: a client certificate, no
// permission granted) and reaches the apiserver at ControlIP, for
// processes in node namespaces, and returns its path.
func (cp *ControlPlane) NodeUserKubeconfig(user string, groups ...string) (string, error) {
	path, err := cp.UserKubeconfig(user, groups...)
	if err != nil {
		return "", err
	}
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + net.JoinHostPort(ControlIP.String(), strconv.Itoa(APIServerPort))
	}
	nodePath := strings.TrimSuffix(path, ".kubeconfig") + "-node.kubeconfig"
	if err := clientcmd.WriteToFile(*kc, nodePath); err != nil {
		return "", err
	}
	return nodePath, nil
}
