package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Component names one process of the cluster.
type Component string

// The components a Cluster runs, in start order.
const (
	Etcd              Component = "etcd"
	APIServer         Component = "kube-apiserver"
	ControllerManager Component = "kube-controller-manager"
	Scheduler         Component = "kube-scheduler"
	Kwok              Component = "kwok"
)

// AllComponents lists every component in start order.
var AllComponents = []Component{Etcd, APIServer, ControllerManager, Scheduler, Kwok}

// dependsOn maps a component to the one it cannot run without.
var dependsOn = map[Component]Component{
	APIServer:         Etcd,
	ControllerManager: APIServer,
	Scheduler:         APIServer,
	Kwok:              APIServer,
}

// Defaults applied by Start and New.
const (
	DefaultClusterCIDR     = "10.244.0.0/16"
	DefaultServiceCIDR     = "10.96.0.0/16"
	DefaultNodeMaskIPv4    = 24
	DefaultNodeMaskIPv6    = 64
	DefaultStartTimeout    = 90 * time.Second
	DefaultStopGracePeriod = 5 * time.Second
)

// KeepDirEnv names the environment variable that, when set to a non-empty
// value, keeps a cluster's temporary directory (certificates, kubeconfigs,
// etcd data, logs) after it is stopped.
const KeepDirEnv = "E2E_KEEP_DIR"

// Options configures a Cluster. The zero value runs every component with
// the defaults above.
type Options struct {
	// K8sVersion selects the Kubernetes release (default K8sVersionFromEnv()).
	K8sVersion string
	// CacheDir is the binary cache root (default DefaultCacheDir()).
	CacheDir string

	// ClusterCIDR is kube-controller-manager's --cluster-cidr: one CIDR or
	// two (one per family) separated by a comma. Parsed leniently like
	// kube-controller-manager does, so host bits may be set.
	ClusterCIDR string
	// NodeCIDRMaskSize is the IPv4 node mask (default 24).
	NodeCIDRMaskSize int
	// NodeCIDRMaskSizeIPv6 is the IPv6 node mask (default 64).
	NodeCIDRMaskSizeIPv6 int
	// DisableNodeIPAM runs kube-controller-manager without
	// --allocate-node-cidrs, so nodes get no podCIDR from it.
	DisableNodeIPAM bool
	// ServiceCIDR is --service-cluster-ip-range of kube-apiserver and
	// kube-controller-manager (default 10.96.0.0/16).
	ServiceCIDR string

	// Disable lists components not to run. A component whose dependency is
	// disabled must be disabled too (etcd <- kube-apiserver <- the rest).
	Disable []Component
	// ExtraFlags are added to a component's command line; a flag named
	// like a default one ("--name=value") replaces it.
	ExtraFlags map[Component][]string
	// EtcdTLS makes etcd serve HTTPS and require client certificates
	// signed by the cluster CA; see Cluster.EtcdTLS.
	EtcdTLS bool
	// ExtraServingIPs are added to the serving certificate of etcd and
	// kube-apiserver, for clients that reach them through a forwarder at
	// another address (the data-plane tests' underlay).
	ExtraServingIPs []net.IP

	// StartTimeout bounds the wait for one component to become healthy
	// (default 90s).
	StartTimeout time.Duration
	// StopGracePeriod is how long a component may take to exit after
	// SIGTERM before it is SIGKILLed (default 5s).
	StopGracePeriod time.Duration
	// Logf receives progress messages; Start sets it to t.Logf.
	Logf func(format string, args ...any)
}

// EtcdTLSFiles are the files an etcd client needs when Options.EtcdTLS is
// set: the CA that signed etcd's serving certificate and a client
// certificate etcd accepts.
type EtcdTLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// component is the state of one component.
type component struct {
	name    Component
	enabled bool
	binary  string
	ports   map[string]int
	extra   []string
	env     []string
	logPath string
	logFile *os.File
	proc    *process
	starts  int
	// runStart is the log offset where the current/last run begins.
	runStart int64
}

// Cluster is a running control plane on 127.0.0.1. Create one with Start
// (tests) or New; all methods are safe for concurrent use.
type Cluster struct {
	opts Options
	bins *Binaries
	dir  string
	pki  *pki
	logf func(format string, args ...any)

	adminKubeconfig string
	etcdTLS         *EtcdTLSFiles
	http            *http.Client

	mu         sync.Mutex
	comps      map[Component]*component
	restConfig *rest.Config
	userSeq    int
	closed     bool
}

// Start builds (first time only) and starts a cluster for a test, waits
// until every enabled component is healthy, and registers a cleanup that
// stops every process and removes every file, also when the test fails or
// panics. If the test failed, the last log lines of each component are
// logged first. Start fails the test if the cluster cannot start.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := New(t.Context(), opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, comp := range AllComponents {
				if logs := c.Logs(comp); logs != "" {
					t.Logf("last lines of %s (%s):\n%s", comp, c.Status(comp), tailLines(logs, 40))
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

// New builds (first time only) and starts a cluster and waits until every
// enabled component is healthy. The caller must call Close. ctx bounds the
// build and the start, not the life of the cluster.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	bins, err := EnsureBinaries(ctx, BuildOptions{K8sVersion: opts.K8sVersion, CacheDir: opts.CacheDir, Logf: opts.Logf})
	if err != nil {
		return nil, err
	}
	c, err := prepare(opts, bins)
	if err != nil {
		return nil, err
	}
	if err := c.startAll(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// prepare creates the cluster directory, certificates and component records
// without starting anything; opts must be complete.
func prepare(opts Options, bins *Binaries) (*Cluster, error) {
	if n := sweepStaleDirs(os.TempDir()); n > 0 {
		opts.Logf("harness: removed %d cluster dir(s) left behind by killed test processes", n)
	}
	dir, err := os.MkdirTemp("", clusterDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("write cluster dir owner: %w", err)
	}
	c := &Cluster{opts: opts, bins: bins, dir: dir, logf: opts.Logf, comps: map[Component]*component{}}
	if err := c.init(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// complete validates o and fills in defaults.
func (o *Options) complete() error {
	if o.K8sVersion == "" {
		o.K8sVersion = K8sVersionFromEnv()
	}
	if _, err := parseK8sVersion(o.K8sVersion); err != nil {
		return err
	}
	if o.ClusterCIDR == "" {
		o.ClusterCIDR = DefaultClusterCIDR
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = DefaultServiceCIDR
	}
	if o.NodeCIDRMaskSize == 0 {
		o.NodeCIDRMaskSize = DefaultNodeMaskIPv4
	}
	if o.NodeCIDRMaskSizeIPv6 == 0 {
		o.NodeCIDRMaskSizeIPv6 = DefaultNodeMaskIPv6
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.StopGracePeriod <= 0 {
		o.StopGracePeriod = DefaultStopGracePeriod
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if _, err := parseCIDRList("ClusterCIDR", o.ClusterCIDR); err != nil {
		return err
	}
	if _, err := parseCIDRList("ServiceCIDR", o.ServiceCIDR); err != nil {
		return err
	}
	if o.NodeCIDRMaskSize < 1 || o.NodeCIDRMaskSize > 32 {
		return fmt.Errorf("NodeCIDRMaskSize %d: want 1..32", o.NodeCIDRMaskSize)
	}
	if o.NodeCIDRMaskSizeIPv6 < 1 || o.NodeCIDRMaskSizeIPv6 > 128 {
		return fmt.Errorf("NodeCIDRMaskSizeIPv6 %d: want 1..128", o.NodeCIDRMaskSizeIPv6)
	}
	for _, d := range o.Disable {
		if !slices.Contains(AllComponents, d) {
			//lint:ignore ST1005 the message starts with the Options field it names
			return fmt.Errorf("Disable: unknown component %q (known: %v)", d, AllComponents)
		}
	}
	for comp := range o.ExtraFlags {
		if !slices.Contains(AllComponents, comp) {
			return fmt.Errorf("ExtraFlags: unknown component %q (known: %v)", comp, AllComponents)
		}
	}
	for _, comp := range AllComponents {
		dep, ok := dependsOn[comp]
		if ok && !slices.Contains(o.Disable, comp) && slices.Contains(o.Disable, dep) {
			//lint:ignore ST1005 the message starts with the Options field it names
			return fmt.Errorf("Disable: %s needs %s; disable %s too", comp, dep, comp)
		}
	}
	return nil
}

// parseCIDRList parses one or two comma-separated CIDRs the lenient way
// Kubernetes components do (net.ParseCIDR drops host bits).
func parseCIDRList(field, s string) ([]*net.IPNet, error) {
	parts := strings.Split(s, ",")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%s %q: at most two CIDRs (one per family)", field, s)
	}
	var out []*net.IPNet
	for _, p := range parts {
		_, n, err := net.ParseCIDR(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", field, s, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// init creates certificates, HTTP client and component records.
func (c *Cluster) init() error {
	svcNets, err := parseCIDRList("ServiceCIDR", c.opts.ServiceCIDR)
	if err != nil {
		return err
	}
	var svcIPs []net.IP
	for _, n := range svcNets {
		ip := slices.Clone(n.IP)
		ip[len(ip)-1]++
		svcIPs = append(svcIPs, ip)
	}
	svcIPs = append(svcIPs, c.opts.ExtraServingIPs...)
	if c.pki, err = newPKI(filepath.Join(c.dir, "pki"), svcIPs...); err != nil {
		return err
	}
	adminCert, adminKey, err := c.pki.writeClientCertFiles("admin", "kubernetes-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(adminCert, adminKey)
	if err != nil {
		return fmt.Errorf("load admin certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.pki.caCert)
	c.http = &http.Client{
		Timeout: 3 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
	if c.opts.EtcdTLS {
		cert, key, err := c.pki.writeClientCertFiles("etcd-client", "etcd-client", nil)
		if err != nil {
			return err
		}
		c.etcdTLS = &EtcdTLSFiles{CAFile: c.pki.CAFile, CertFile: cert, KeyFile: key}
	}
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	c.adminKubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	binaries := map[Component]string{
		Etcd:              c.bins.Etcd,
		APIServer:         c.bins.KubeAPIServer,
		ControllerManager: c.bins.KubeControllerManager,
		Scheduler:         c.bins.KubeScheduler,
		Kwok:              c.bins.Kwok,
	}
	for _, name := range AllComponents {
		comp := &component{
			name:    name,
			enabled: !slices.Contains(c.opts.Disable, name),
			binary:  binaries[name],
			extra:   mergeFlags(nil, c.opts.ExtraFlags[name]),
			env:     os.Environ(),
			logPath: filepath.Join(c.dir, "logs", string(name)+".log"),
		}
		if name == Kwok {
			// kwok reads ~/.kwok/kwok.yaml if present; point it elsewhere.
			comp.env = append(comp.env, "KWOK_WORKDIR="+filepath.Join(c.dir, "kwok"))
		}
		c.comps[name] = comp
		if err := c.assignPorts(comp); err != nil {
			return err
		}
	}
	return nil
}

// portNames lists the ports each component listens on.
var portNames = map[Component][]string{
	Etcd:              {"client", "peer"},
	APIServer:         {"secure"},
	ControllerManager: {"secure"},
	Scheduler:         {"secure"},
	Kwok:              {"server"},
}

// assignPorts gives comp fresh free ports on 127.0.0.1.
// Callers hold c.mu (or own c exclusively).
func (c *Cluster) assignPorts(comp *component) error {
	ports := map[string]int{}
	for _, name := range portNames[comp.name] {
		p, err := freePort()
		if err != nil {
			return fmt.Errorf("%s %s port: %w", comp.name, name, err)
		}
		ports[name] = p
	}
	comp.ports = ports
	return nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another
// process may take it before the component binds it; startAll retries
// with new ports when a component reports "address already in use".
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startAll starts the enabled components in dependency order.
func (c *Cluster) startAll(ctx context.Context) error {
	begin := time.Now()
	for _, name := range []Component{Etcd, APIServer} {
		if err := c.startWithPortRetry(ctx, name); err != nil {
			return err
		}
	}
	// The rest only depend on kube-apiserver: start them together.
	var wg sync.WaitGroup
	errs := make([]error, len(AllComponents))
	for i, name := range AllComponents[2:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startWithPortRetry(ctx, name)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if c.comps[ControllerManager].enabled {
		// Pods are refused until the ServiceAccount controller made the
		// "default" ServiceAccount; wait for it so tests need not.
		saBegin := time.Now()
		if err := c.waitForDefaultServiceAccount(ctx); err != nil {
			return err
		}
		c.logf("harness: ServiceAccount default/default present after %s", time.Since(saBegin).Round(time.Millisecond))
	}
	c.logf("harness: Kubernetes %s control plane ready in %s (dir %s)", c.bins.K8sVersion, time.Since(begin).Round(time.Millisecond), c.dir)
	return nil
}

// startWithPortRetry starts a component, retrying with new ports if a port
// it was given got taken in the meantime.
func (c *Cluster) startWithPortRetry(ctx context.Context, name Component) error {
	comp := c.comps[name]
	if !comp.enabled {
		return nil
	}
	for attempt := 1; ; attempt++ {
		if name == APIServer {
			if err := c.writeKubeconfigs(); err != nil {
				return err
			}
		}
		err := c.StartComponent(ctx, name)
		var exitErr *ExitError
		if err == nil || attempt == 3 || !errors.As(err, &exitErr) || !strings.Contains(c.RunLogs(name), "address already in use") {
			return err
		}
		c.logf("harness: %s lost a port race, retrying with new ports", name)
		c.mu.Lock()
		err = c.assignPorts(comp)
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// apiServerURL returns https://127.0.0.1:<port>; callers hold c.mu.
func (c *Cluster) apiServerURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", c.comps[APIServer].ports["secure"])
}

// writeKubeconfigs writes the admin, controller-manager and scheduler
// kubeconfigs and the admin rest.Config for the current apiserver port.
func (c *Cluster) writeKubeconfigs() error {
	server := c.APIServerURL()
	for path, id := range map[string][2]string{
		c.adminKubeconfig: {"kubernetes-admin", "system:masters"},
		// kube-controller-manager keeps its usual user name but is in
		// system:masters, so it can run every controller under its own
		// identity (--use-service-account-credentials=false): that starts
		// in about 1s instead of 5s, as no per-controller ServiceAccount
		// token has to be minted. Pass
		// --use-service-account-credentials=true for kubeadm's behaviour.
		filepath.Join(c.dir, "controller-manager.kubeconfig"): {"system:kube-controller-manager", "system:masters"},
		filepath.Join(c.dir, "scheduler.kubeconfig"):          {"system:kube-scheduler", ""},
	} {
		var groups []string
		if id[1] != "" {
			groups = []string{id[1]}
		}
		if err := c.pki.writeKubeconfig(path, server, id[0], groups); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.adminKubeconfig)
	if err != nil {
		return fmt.Errorf("load admin kubeconfig: %w", err)
	}
	tuneRESTConfig(cfg)
	c.mu.Lock()
	c.restConfig = cfg
	c.mu.Unlock()
	return nil
}

// tuneRESTConfig lifts client-side throttling, which only slows tests.
func tuneRESTConfig(cfg *rest.Config) {
	cfg.QPS = 500
	cfg.Burst = 1000
	cfg.Timeout = 30 * time.Second
}

// baseFlags returns the harness's flags for a component.
func (c *Cluster) baseFlags(comp *component) []string {
	p := c.pki
	switch comp.name {
	case Etcd:
		scheme := "http"
		if c.etcdTLS != nil {
			scheme = "https"
		}
		client := fmt.Sprintf("%s://127.0.0.1:%d", scheme, comp.ports["client"])
		peer := fmt.Sprintf("http://127.0.0.1:%d", comp.ports["peer"])
		flags := []string{
			"--name=e2e",
			"--data-dir=" + filepath.Join(c.dir, "etcd"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=e2e=" + peer,
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		}
		if c.etcdTLS != nil {
			flags = append(flags,
				"--cert-file="+p.ServingCertFile,
				"--key-file="+p.ServingKeyFile,
				"--trusted-ca-file="+p.CAFile,
				"--client-cert-auth=true",
			)
		}
		return flags
	case APIServer:
		flags := []string{
			"--advertise-address=127.0.0.1",
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", comp.ports["secure"]),
			"--etcd-servers=" + c.etcdEndpoint(),
			"--tls-cert-file=" + p.ServingCertFile,
			"--tls-private-key-file=" + p.ServingKeyFile,
			"--client-ca-file=" + p.CAFile,
			"--authorization-mode=RBAC,Node",
			"--enable-admission-plugins=NodeRestriction",
			"--service-cluster-ip-range=" + c.opts.ServiceCIDR,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.SAPubFile,
			"--service-account-signing-key-file=" + p.SAKeyFile,
			"--allow-privileged=true",
			"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
		}
		if c.etcdTLS != nil {
			flags = append(flags,
				"--etcd-cafile="+c.etcdTLS.CAFile,
				"--etcd-certfile="+c.etcdTLS.CertFile,
				"--etcd-keyfile="+c.etcdTLS.KeyFile,
			)
		}
		return flags
	case ControllerManager:
		flags := []string{
			"--kubeconfig=" + filepath.Join(c.dir, "controller-manager.kubeconfig"),
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", comp.ports["secure"]),
			"--tls-cert-file=" + p.ServingCertFile,
			"--tls-private-key-file=" + p.ServingKeyFile,
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			"--service-account-private-key-file=" + p.SAKeyFile,
			"--root-ca-file=" + p.CAFile,
			"--cluster-signing-cert-file=" + p.CAFile,
			"--cluster-signing-key-file=" + p.CAKeyFile,
			"--service-cluster-ip-range=" + c.opts.ServiceCIDR,
			// The default 20 QPS makes the node lifecycle controller take over
			// a minute to clear the not-ready taints of 300 new nodes.
			"--kube-api-qps=200",
			"--kube-api-burst=400",
			// kwok renews the node Leases; on a loaded two-core machine it
			// can fall behind the default 50 s, and the node lifecycle
			// controller then taints healthy nodes unreachable (and evicts
			// their pods). No test here is about node liveness.
			"--node-monitor-grace-period=5m",
		}
		if !c.opts.DisableNodeIPAM {
			flags = append(flags, "--allocate-node-cidrs=true", "--cluster-cidr="+c.opts.ClusterCIDR)
			flags = append(flags, c.nodeMaskFlags()...)
		}
		return flags
	case Scheduler:
		return []string{
			"--kubeconfig=" + filepath.Join(c.dir, "scheduler.kubeconfig"),
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", comp.ports["secure"]),
			"--tls-cert-file=" + p.ServingCertFile,
			"--tls-private-key-file=" + p.ServingKeyFile,
			"--leader-elect=false",
		}
	case Kwok:
		return []string{
			"--kubeconfig=" + c.adminKubeconfig,
			"--config=" + c.bins.KwokStages,
			"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeAnnotationValue,
			fmt.Sprintf("--server-address=127.0.0.1:%d", comp.ports["server"]),
			"--node-ip=127.0.0.1",
			// With --config holding only Stages, kwok's 40 s default is not
			// applied and it renews no node Lease: the node lifecycle
			// controller then marks every node unreachable after 50 s.
			"--node-lease-duration-seconds=40",
		}
	}
	return nil
}

// nodeMaskFlags returns the node mask flags kube-controller-manager accepts
// for the cluster CIDR's families: --node-cidr-mask-size for one family,
// the per-family flags for dual-stack.
func (c *Cluster) nodeMaskFlags() []string {
	nets, err := parseCIDRList("ClusterCIDR", c.opts.ClusterCIDR)
	if err != nil || len(nets) == 0 {
		return nil
	}
	if len(nets) == 2 {
		return []string{
			fmt.Sprintf("--node-cidr-mask-size-ipv4=%d", c.opts.NodeCIDRMaskSize),
			fmt.Sprintf("--node-cidr-mask-size-ipv6=%d", c.opts.NodeCIDRMaskSizeIPv6),
		}
	}
	if nets[0].IP.To4() == nil {
		return []string{fmt.Sprintf("--node-cidr-mask-size=%d", c.opts.NodeCIDRMaskSizeIPv6)}
	}
	return []string{fmt.Sprintf("--node-cidr-mask-size=%d", c.opts.NodeCIDRMaskSize)}
}

// Flags returns the command line a component gets at its next start: the
// harness's flags, Options.ExtraFlags and flags given to Restart or
// SetFlags, later ones replacing earlier ones of the same name.
func (c *Cluster) Flags(name Component) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	comp, ok := c.comps[name]
	if !ok {
		return nil
	}
	return mergeFlags(c.baseFlags(comp), comp.extra)
}

// SetFlags records flags for a component's next start; each replaces an
// earlier flag of the same name.
func (c *Cluster) SetFlags(name Component, flags ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	comp, err := c.lookup(name)
	if err != nil {
		return err
	}
	comp.extra = mergeFlags(comp.extra, flags)
	return nil
}

// lookup returns an enabled component; callers hold c.mu.
func (c *Cluster) lookup(name Component) (*component, error) {
	comp, ok := c.comps[name]
	if !ok {
		return nil, fmt.Errorf("unknown component %q (known: %v)", name, AllComponents)
	}
	if !comp.enabled {
		return nil, fmt.Errorf("component %s is disabled in Options", name)
	}
	if c.closed {
		return nil, fmt.Errorf("component %s: cluster is closed", name)
	}
	return comp, nil
}

// StartComponent starts a stopped component with its current flags and
// waits until it is healthy. If the process exits first, the error is an
// *ExitError carrying its status and last log lines.
func (c *Cluster) StartComponent(ctx context.Context, name Component) error {
	c.mu.Lock()
	comp, err := c.lookup(name)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	if comp.proc != nil && !comp.proc.exited() {
		c.mu.Unlock()
		return fmt.Errorf("start %s: already running (pid %d)", name, comp.proc.cmd.Process.Pid)
	}
	args := mergeFlags(c.baseFlags(comp), comp.extra)
	if comp.logFile == nil {
		f, err := os.OpenFile(comp.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			c.mu.Unlock()
			return fmt.Errorf("open %s log: %w", name, err)
		}
		comp.logFile = f
	}
	comp.starts++
	fmt.Fprintf(comp.logFile, "==== harness: start #%d of %s at %s\n==== %s %s\n",
		comp.starts, name, time.Now().Format(time.RFC3339Nano), comp.binary, strings.Join(args, " "))
	if off, err := comp.logFile.Seek(0, io.SeekEnd); err == nil {
		comp.runStart = off
	}
	proc, err := startProcess(comp.binary, args, comp.env, comp.logFile)
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("start %s: %w", name, err)
	}
	comp.proc = proc
	c.mu.Unlock()
	begin := time.Now()
	if err := c.waitHealthy(ctx, name, proc); err != nil {
		return err
	}
	c.logf("harness: %s healthy in %s", name, time.Since(begin).Round(time.Millisecond))
	return nil
}

// waitHealthy polls a component's health endpoint until it answers, the
// process exits, the start timeout passes or ctx ends.
func (c *Cluster) waitHealthy(ctx context.Context, name Component, proc *process) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	var lastErr error
	for {
		if proc.exited() {
			return c.exitError(name, proc)
		}
		if lastErr = c.healthy(ctx, name); lastErr == nil {
			if lastErr = c.checkOwnPort(name, proc); lastErr == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy after %s: %w (last check: %v); last log lines:\n%s",
				name, c.opts.StartTimeout, ctx.Err(), lastErr, tailLines(c.RunLogs(name), 30))
		case <-proc.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// exitError builds the *ExitError for a process that ended.
func (c *Cluster) exitError(name Component, proc *process) error {
	c.mu.Lock()
	st := proc.status()
	st.Starts = c.comps[name].starts
	c.mu.Unlock()
	return &ExitError{Component: name, Status: st, LogTail: tailLines(c.RunLogs(name), 30)}
}

// healthy performs one health check of a component.
func (c *Cluster) healthy(ctx context.Context, name Component) error {
	c.mu.Lock()
	ports := c.comps[name].ports
	etcdURL, apiURL := c.etcdEndpoint(), c.apiServerURL()
	c.mu.Unlock()
	var url string
	switch name {
	case Etcd:
		url = etcdURL + "/health"
	case APIServer:
		url = apiURL + "/readyz"
	case ControllerManager, Scheduler:
		url = fmt.Sprintf("https://127.0.0.1:%d/healthz", ports["secure"])
	case Kwok:
		url = fmt.Sprintf("http://127.0.0.1:%d/healthz", ports["server"])
	default:
		return fmt.Errorf("unknown component %q", name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	if name == Etcd && !bytes.Contains(body, []byte(`"health":"true"`)) {
		return fmt.Errorf("GET %s: %s", url, bytes.TrimSpace(body))
	}
	return nil
}

// waitForDefaultServiceAccount waits for default/default.
func (c *Cluster) waitForDefaultServiceAccount(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ServiceAccount default/default not created by %s within %s (last error: %w)", ControllerManager, c.opts.StartTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends a component: SIGTERM, then SIGKILL after the grace period. It
// does nothing if the component is not running.
func (c *Cluster) Stop(name Component) error {
	proc, err := c.currentProcess(name)
	if err != nil {
		return err
	}
	if proc == nil {
		return nil
	}
	if err := proc.stop(c.opts.StopGracePeriod); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// Kill SIGKILLs a running component and waits until it is gone. It returns
// an error wrapping ErrNotRunning if the component was not running.
func (c *Cluster) Kill(name Component) error {
	proc, err := c.currentProcess(name)
	if err != nil {
		return err
	}
	if proc == nil || proc.exited() {
		return fmt.Errorf("kill %s: %w", name, ErrNotRunning)
	}
	if err := proc.kill(); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	return nil
}

// Signal sends sig to a running component's process group, e.g. SIGSTOP and
// SIGCONT to freeze it. Use Kill and Stop to end it.
func (c *Cluster) Signal(name Component, sig syscall.Signal) error {
	proc, err := c.currentProcess(name)
	if err != nil {
		return err
	}
	if proc == nil || proc.exited() {
		return fmt.Errorf("signal %s: %w", name, ErrNotRunning)
	}
	return proc.signal(sig)
}

// currentProcess returns the component's current or last process (nil if
// never started).
func (c *Cluster) currentProcess(name Component) (*process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	comp, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	return comp.proc, nil
}

// Restart stops a component (gracefully), applies flags as SetFlags does
// and starts it again, waiting until it is healthy. A component that exits
// before it is healthy yields an *ExitError; one that exits later (such as
// kube-controller-manager failing in a controller) is seen with WaitExit.
func (c *Cluster) Restart(ctx context.Context, name Component, flags ...string) error {
	if err := c.Stop(name); err != nil {
		return err
	}
	if err := c.SetFlags(name, flags...); err != nil {
		return err
	}
	return c.StartComponent(ctx, name)
}

// Status reports a component's process state.
func (c *Cluster) Status(name Component) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	comp, ok := c.comps[name]
	if !ok || comp.proc == nil {
		st := Status{ExitCode: -1}
		if ok {
			st.Starts = comp.starts
		}
		return st
	}
	st := comp.proc.status()
	st.Starts = comp.starts
	return st
}

// WaitExit waits until a component's current process exits and returns
// its final status, or returns ctx's error if it is still running when ctx
// ends. It returns an error wrapping ErrNotRunning if never started.
func (c *Cluster) WaitExit(ctx context.Context, name Component) (Status, error) {
	proc, err := c.currentProcess(name)
	if err != nil {
		return Status{}, err
	}
	if proc == nil {
		return Status{}, fmt.Errorf("wait for %s: %w", name, ErrNotRunning)
	}
	select {
	case <-proc.done:
		return c.Status(name), nil
	case <-ctx.Done():
		return c.Status(name), fmt.Errorf("wait for %s to exit: %w", name, ctx.Err())
	}
}

// LogPath returns the file a component logs to (all runs, appended; each
// run starts with a "==== harness: start #N" header).
func (c *Cluster) LogPath(name Component) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if comp, ok := c.comps[name]; ok {
		return comp.logPath
	}
	return ""
}

// Logs returns everything a component logged, over all its runs, or "" if
// it never ran.
func (c *Cluster) Logs(name Component) string {
	return c.readLog(name, false)
}

// RunLogs returns what the current or last run of a component logged.
func (c *Cluster) RunLogs(name Component) string {
	return c.readLog(name, true)
}

func (c *Cluster) readLog(name Component, lastRun bool) string {
	c.mu.Lock()
	comp, ok := c.comps[name]
	var path string
	var off int64
	if ok {
		path, off = comp.logPath, comp.runStart
	}
	c.mu.Unlock()
	if !ok {
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if lastRun && off <= int64(len(data)) {
		data = data[off:]
	}
	return string(data)
}

// Dir returns the cluster's temporary directory (removed by Close).
func (c *Cluster) Dir() string { return c.dir }

// Binaries returns the programs the cluster runs, e.g. Binaries().Kubectl.
func (c *Cluster) Binaries() *Binaries { return c.bins }

// Options returns the options the cluster was started with, defaults
// filled in.
func (c *Cluster) Options() Options { return c.opts }

// CAFile returns the cluster CA certificate (PEM).
func (c *Cluster) CAFile() string { return c.pki.CAFile }

// APIServerURL returns kube-apiserver's URL, https://127.0.0.1:<port>.
func (c *Cluster) APIServerURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiServerURL()
}

// AdminKubeconfig returns the path of a kubeconfig for user
// kubernetes-admin in group system:masters.
func (c *Cluster) AdminKubeconfig() string { return c.adminKubeconfig }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restConfig == nil {
		return nil
	}
	return rest.CopyConfig(c.restConfig)
}

// Client returns an admin clientset.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg := c.RESTConfig()
	if cfg == nil {
		return nil, fmt.Errorf("client: %s is disabled", APIServer)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin clientset: %w", err)
	}
	return cs, nil
}

// EtcdEndpoint returns etcd's client URL, http(s)://127.0.0.1:<port>.
func (c *Cluster) EtcdEndpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcdEndpoint()
}

// etcdEndpoint is EtcdEndpoint for callers holding c.mu.
func (c *Cluster) etcdEndpoint() string {
	scheme := "http"
	if c.etcdTLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d", scheme, c.comps[Etcd].ports["client"])
}

// EtcdTLS returns the client TLS files for etcd, or nil unless
// Options.EtcdTLS is set.
func (c *Cluster) EtcdTLS() *EtcdTLSFiles {
	if c.etcdTLS == nil {
		return nil
	}
	f := *c.etcdTLS
	return &f
}

// UserKubeconfig writes a kubeconfig whose client certificate authenticates
// as user in groups, and returns its path. Nothing grants the user any
// permission: bind roles as the test needs.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, error) {
	if err := validateIdentity(user, groups); err != nil {
		return "", err
	}
	c.mu.Lock()
	c.userSeq++
	path := filepath.Join(c.dir, "users", fmt.Sprintf("%03d-%s.kubeconfig", c.userSeq, fileSafe(user)))
	server := c.apiServerURL()
	c.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create users dir: %w", err)
	}
	if err := c.pki.writeKubeconfig(path, server, user, groups); err != nil {
		return "", err
	}
	return path, nil
}

// UserConfig returns a client configuration authenticating as user in
// groups with a client certificate.
func (c *Cluster) UserConfig(user string, groups ...string) (*rest.Config, error) {
	if err := validateIdentity(user, groups); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := c.pki.clientCert(user, groups)
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{
		Host: c.APIServerURL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.caPEM,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
	}
	tuneRESTConfig(cfg)
	return cfg, nil
}

func validateIdentity(user string, groups []string) error {
	if strings.TrimSpace(user) == "" {
		return fmt.Errorf("user name must not be empty")
	}
	for i, g := range groups {
		if strings.TrimSpace(g) == "" {
			return fmt.Errorf("group %d of user %q is empty", i, user)
		}
	}
	return nil
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileSafe(s string) string { return unsafeFileChars.ReplaceAllString(s, "_") }

// Kubectl runs the cluster's kubectl as admin with args and returns its
// standard output; on failure the error includes standard error.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bins.Kubectl, append([]string{"--kubeconfig=" + c.adminKubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Close stops every component (in reverse start order: SIGTERM, then
// SIGKILL after the grace period) and removes the cluster directory unless
// E2E_KEEP_DIR is set. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	for _, name := range slices.Backward(AllComponents) {
		comp := c.comps[name]
		if comp == nil {
			continue
		}
		if comp.proc != nil {
			if err := comp.proc.stop(c.opts.StopGracePeriod); err != nil {
				errs = append(errs, fmt.Errorf("stop %s: %w", name, err))
			}
		}
		if comp.logFile != nil {
			_ = comp.logFile.Close()
		}
	}
	if os.Getenv(KeepDirEnv) != "" {
		c.logf("harness: %s set, keeping %s", KeepDirEnv, c.dir)
		if err := os.WriteFile(filepath.Join(c.dir, keepFile), nil, 0o644); err != nil {
			errs = append(errs, fmt.Errorf("mark %s as kept: %w", c.dir, err))
		}
	} else if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", c.dir, err))
	}
	return errors.Join(errs...)
}

// mergeFlags returns base with overrides applied in order: an override
// "--name=value" (or "--name") removes every earlier flag of that name and
// is appended. Arguments that are not flags are appended as they are.
func mergeFlags(base, overrides []string) []string {
	out := slices.Clone(base)
	for _, o := range overrides {
		if name := flagName(o); name != "" {
			out = slices.DeleteFunc(out, func(f string) bool { return flagName(f) == name })
		}
		out = append(out, o)
	}
	return out
}

// flagName returns "name" for "--name=value", "-name" or "--name", and ""
// for arguments that are not flags.
func flagName(arg string) string {
	if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
		return ""
	}
	name := strings.TrimLeft(arg, "-")
	name, _, _ = strings.Cut(name, "=")
	return name
}

// Cluster directories are named <TMPDIR>/cidrshift-e2e-*; ownerFile holds
// the PID of the process that made one, keepFile marks one kept on purpose.
const (
	clusterDirPrefix = "cidrshift-e2e-"
	ownerFile        = "owner.pid"
	keepFile         = "kept"
)

// sweepStaleDirs removes cluster directories whose owner process is gone
// (a test binary that was SIGKILLed, or timed out, cannot clean up; its
// components die with it through Pdeathsig, its files do not). Kept
// directories and those of live processes are left alone. It returns the
// number removed; failures are ignored, the sweep is best effort.
func sweepStaleDirs(tmp string) int {
	dirs, err := filepath.Glob(filepath.Join(tmp, clusterDirPrefix+"*"))
	if err != nil {
		return 0
	}
	removed := 0
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, keepFile)); err == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || processExists(pid) {
			continue
		}
		if os.RemoveAll(dir) == nil {
			removed++
		}
	}
	return removed
}

// processExists reports whether a process with pid exists (signal 0).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
