// Command kubeadmcfg shows, checks and rewrites every place a kubeadm cluster
// writes its CIDRs down: the kubeadm-config ClusterConfiguration, the
// kube-controller-manager and kube-apiserver static-pod manifests, kube-proxy's
// clusterCIDR and the kubelets' clusterDNS.
//
//	kubeadmcfg show  [common flags]
//	kubeadmcfg check [common flags]
//	kubeadmcfg set   --pod-subnet CIDR | --service-subnet CIDR | --node-mask N [--apply [--dry-run=client|server]] [common flags]
//
// Without a kubeconfig (or with --offline) it reads only local files.
//
// It reads the cluster from a kubeconfig (--kubeconfig, --context, KUBECONFIG)
// and the manifests from --manifests (default /etc/kubernetes/manifests). It
// also works offline from files: --kubeadm-config, --kube-proxy-config and
// --kubelet-config take ConfigMaps as YAML (kubectl get cm -o yaml) or the bare
// documents, --nodes takes kubectl get nodes -o yaml, --pool NAME=CIDR adds a
// Calico pool and --flannel-network CIDR flannel's Network. Try:
//
//	go run ./examples/kubeadmcfg check --manifests examples/kubeadmcfg/testdata/manifests \
//	    --kubeadm-config examples/kubeadmcfg/testdata/kubeadm-config.yaml
//
// set prints the plan (every edit, in an order that keeps kube-controller-manager
// and kube-apiserver running) and the manifest diffs; with --apply it updates
// the ConfigMaps (with the resourceVersion it read, so a concurrent edit is
// refused), and --out DIR writes the rewritten manifests for the operator.
// set --apply holds the Lease cidrshift-kubeadmcfg in --lock-namespace (default
// kube-system) while it writes, so a second run is refused naming the holder
// (--steal-lock takes over an expired one, --no-lock takes none; RBAC: get,
// create, update on leases there).
// Exit status: 0 fine, 1 findings of severity error (or a failed apply),
// 2 bad input (including a --manifests directory that is missing or holds no
// manifest, a run that read nothing, a kubeconfig that cannot be loaded, and
// set --apply of a layout with errors), 4 cluster unreachable or forbidden.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
)

func main() {
	ctx, stop := cli.SignalContext()
	code := runWith(ctx, os.Args[1:], os.Stdout, os.Stderr, kubeClientWith(os.Stderr))
	stop()
	os.Exit(code)
}

// clientFunc builds a Kubernetes client from the kubeconfig flags.
type clientFunc func(kubeconfig, context string) (kubernetes.Interface, error)

// run is the whole program without a signal context; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runWith(context.Background(), args, stdout, stderr, kubeClientWith(stderr))
}

// kubeClientWith loads the kubeconfig the kubectl way and checks that the API
// server answers (within seconds, progress lines to progress): a kubeconfig
// that cannot be loaded is a *cli.UsageError (exit 2), a server that does
// not answer a *cli.UnreachableError (exit 4).
func kubeClientWith(progress io.Writer) clientFunc {
	return func(kubeconfig, kubeContext string) (kubernetes.Interface, error) {
		cfg, err := cli.RESTConfig(kubeconfig, kubeContext)
		if err != nil {
			return nil, err
		}
		// Reach gives up within cli.ReachTimeout on its own.
		if err := cli.Reach(context.Background(), cfg, progress); err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(cfg)
	}
}

// usageError is bad input: exit 2 with one line.
type usageError struct{ msg string }

// Error returns the message.
func (e usageError) Error() string { return e.msg }

func badInput(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

const usage = `usage: kubeadmcfg show|check|set [flags]
  set: --pod-subnet CIDR, --service-subnet CIDR, --node-mask N, --node-mask-ipv6 N, --keep-node-ipam,
       --apply, --dry-run=none|client|server, --out DIR
  common: --kubeconfig FILE, --context NAME, --offline, --manifests DIR, --kubeadm-config FILE, --kube-proxy-config FILE,
          --kubelet-config FILE, --nodes FILE, --pool NAME=CIDR, --flannel-network CIDR, -o text|json|yaml`

type options struct {
	cmd                                 string
	kubeconfig, kubeContext             string
	manifests                           string
	kubeadmFile, proxyFile, kubeletFile string
	nodesFile                           string
	pools                               []kubeadmcfg.PodPool
	output                              string
	podSubnet, serviceSubnet            string
	nodeMask, nodeMaskIPv6              int
	keepIPAM, apply                     bool
	dryRun                              kubeadmcfg.DryRun
	outDir                              string
	setFlags                            map[string]bool
	offline                             bool
	kubeconfigGiven                     bool
	lock                                cli.LockFlags
}

func parseArgs(args []string) (*options, error) {
	if len(args) == 0 {
		return nil, badInput("missing command\n%s", usage)
	}
	o := &options{cmd: args[0], setFlags: map[string]bool{}}
	switch o.cmd {
	case "show", "check", "set":
	case "-h", "--help", "help":
		return nil, badInput("%s", usage)
	default:
		return nil, badInput("unknown command %q: use show, check or set", o.cmd)
	}
	fs := flag.NewFlagSet("kubeadmcfg "+o.cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context")
	fs.StringVar(&o.manifests, "manifests", kubeadmcfg.DefaultManifestDir, "static-pod manifest directory (\"\" to skip)")
	fs.StringVar(&o.kubeadmFile, "kubeadm-config", "", "kubeadm-config ConfigMap or ClusterConfiguration file (offline)")
	fs.StringVar(&o.proxyFile, "kube-proxy-config", "", "kube-proxy ConfigMap or KubeProxyConfiguration file (offline)")
	fs.StringVar(&o.kubeletFile, "kubelet-config", "", "kubelet-config ConfigMap or KubeletConfiguration file (offline)")
	fs.StringVar(&o.nodesFile, "nodes", "", "kubectl get nodes -o yaml output (offline)")
	fs.Func("pool", "Calico pool NAME=CIDR (repeatable)", func(v string) error {
		name, c, ok := strings.Cut(v, "=")
		if !ok || name == "" || c == "" {
			return fmt.Errorf("--pool %q: want NAME=CIDR", v)
		}
		if _, err := cidr.ParseList(c); err != nil {
			return fmt.Errorf("--pool %q: %v", v, err)
		}
		o.pools = append(o.pools, kubeadmcfg.PodPool{Name: name, Kind: cidr.KindCalicoPool, CIDR: c})
		return nil
	})
	fs.Func("flannel-network", "flannel Network CIDR", func(v string) error {
		if _, err := cidr.ParseList(v); err != nil {
			return fmt.Errorf("--flannel-network %q: %v", v, err)
		}
		o.pools = append(o.pools, kubeadmcfg.PodPool{Name: "net-conf.json", Kind: cidr.KindFlannelNetwork, CIDR: v})
		return nil
	})
	fs.BoolVar(&o.offline, "offline", false, "do not contact a cluster; read only the files given")
	fs.StringVar(&o.output, "o", "text", "output format: text, json or yaml")
	var dry string
	if o.cmd == "set" {
		fs.StringVar(&o.podSubnet, "pod-subnet", "", "new pod CIDR (one, or a dual-stack pair)")
		fs.StringVar(&o.serviceSubnet, "service-subnet", "", "new Service CIDR (one, or a dual-stack pair)")
		fs.IntVar(&o.nodeMask, "node-mask", 0, "new node mask (single stack, or IPv4 of dual stack)")
		fs.IntVar(&o.nodeMaskIPv6, "node-mask-ipv6", 0, "new IPv6 node mask of a dual-stack cluster")
		fs.BoolVar(&o.keepIPAM, "keep-node-ipam", false, "do not pause kube-controller-manager's node IPAM while nodes move")
		fs.BoolVar(&o.apply, "apply", false, "update the ConfigMaps")
		fs.StringVar(&dry, "dry-run", "none", "none, client or server")
		fs.StringVar(&o.outDir, "out", "", "write the rewritten manifests into this directory")
		o.lock.Register(fs)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, badInput("%s", usage)
		}
		return nil, badInput("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, badInput("unexpected argument %q: %s takes only flags", fs.Arg(0), fs.Name())
	}
	fs.Visit(func(f *flag.Flag) { o.setFlags[f.Name] = true })
	if o.setFlags["manifests"] && o.manifests != "" {
		// A directory named on the command line must be there: reading
		// nothing from it must not pass for "no findings".
		if st, err := os.Stat(o.manifests); err != nil || !st.IsDir() {
			return nil, badInput("--manifests %s: not a directory; give the static-pod manifest directory, or --manifests \"\" to skip the manifests", o.manifests)
		}
	}
	if o.outDir != "" && o.manifests != "" {
		a, _ := filepath.Abs(o.outDir)
		b, _ := filepath.Abs(o.manifests)
		if a == b {
			return nil, badInput("--out %s is the --manifests directory %s: the rewritten manifests go elsewhere, for the operator to copy", o.outDir, o.manifests)
		}
	}
	switch o.output {
	case "text", "json", "yaml":
	default:
		return nil, badInput("-o %q: use text, json or yaml", o.output)
	}
	d, err := kubeadmcfg.ParseDryRun(dry)
	if err != nil {
		return nil, badInput("%v", err)
	}
	o.dryRun = d
	if o.dryRun != kubeadmcfg.DryRunNone && !o.apply {
		return nil, badInput("--dry-run=%s needs --apply", dry)
	}
	if o.cmd == "set" && o.podSubnet == "" && o.serviceSubnet == "" && o.nodeMask == 0 && o.nodeMaskIPv6 == 0 {
		return nil, badInput("set needs --pod-subnet, --service-subnet or --node-mask")
	}
	for _, m := range []struct {
		name string
		v    int
	}{{"node-mask", o.nodeMask}, {"node-mask-ipv6", o.nodeMaskIPv6}} {
		if o.setFlags[m.name] && (m.v < 1 || m.v > 128) {
			return nil, badInput("--%s %d: want 1-32 for IPv4 or 1-128 for IPv6", m.name, m.v)
		}
	}
	o.kubeconfigGiven = o.setFlags["kubeconfig"] || o.setFlags["context"]
	if o.offline && o.kubeconfigGiven {
		return nil, badInput("--offline contradicts --kubeconfig/--context")
	}
	if (o.kubeadmFile != "" || o.proxyFile != "" || o.kubeletFile != "" || o.nodesFile != "") && !o.kubeconfigGiven {
		o.offline = true
	}
	if o.apply && o.offline {
		return nil, badInput("--apply updates ConfigMaps in a cluster: give --kubeconfig/--context instead of ConfigMap files")
	}
	if o.cmd == "set" {
		if err := o.lock.Check(); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, newClient clientFunc) int {
	o, err := parseArgs(args)
	if err == nil {
		var s *kubeadmcfg.Snapshot
		var client kubernetes.Interface
		s, client, err = load(ctx, o, newClient, stderr)
		if err == nil {
			var code int
			code, err = o.exec(ctx, s, client, stdout)
			if err == nil {
				return code
			}
		}
	}
	var ue usageError
	if errors.As(err, &ue) {
		if strings.HasPrefix(ue.msg, "usage:") || strings.HasPrefix(ue.msg, "missing command") {
			fmt.Fprintln(stderr, "kubeadmcfg:", ue.msg)
			return cli.ExitBadInput
		}
		err = cli.Usagef("%s", ue.msg)
	}
	var fe *kubeadmcfg.FieldError
	var ve *kubeadmcfg.VersionError
	if errors.As(err, &fe) || errors.As(err, &ve) {
		err = cli.Usagef("%s", oneLine(err.Error()))
	}
	return cli.Fail(stderr, "kubeadmcfg", err, kubeadmcfg.ErrInvalid, kubeadmcfg.ErrUnsupportedVersion, kubeadmcfg.ErrNothingToDo)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// load builds the snapshot from files and/or the cluster.
func load(ctx context.Context, o *options, newClient clientFunc, stderr io.Writer) (*kubeadmcfg.Snapshot, kubernetes.Interface, error) {
	s := &kubeadmcfg.Snapshot{}
	var client kubernetes.Interface
	if !o.offline {
		c, err := newClient(o.kubeconfig, o.kubeContext)
		if err != nil {
			var ue *cli.UsageError
			if o.kubeconfigGiven || o.apply || !errors.As(err, &ue) {
				// A kubeconfig given (or found) that does not work is an
				// error: 2 when it cannot be loaded, 4 when the server
				// does not answer.
				return nil, nil, fmt.Errorf("kubeconfig: %w", err)
			}
			// No kubeconfig anywhere: a control-plane node without one can still check its manifests.
			fmt.Fprintln(stderr, "kubeadmcfg: no kubeconfig found; reading local files only (--offline silences this)")
			o.offline = true
		}
		client = c
	}
	if !o.offline {
		c := client
		rs, err := kubeadmcfg.Read(ctx, c, kubeadmcfg.ReadOptions{Nodes: o.nodesFile == ""})
		if err != nil {
			return nil, nil, err
		}
		s = rs
	}
	for _, f := range []struct{ flag, path string }{
		{"--kubeadm-config", o.kubeadmFile}, {"--kube-proxy-config", o.proxyFile}, {"--kubelet-config", o.kubeletFile},
	} {
		if f.path == "" {
			continue
		}
		if err := addFile(s, f.flag, f.path); err != nil {
			return nil, nil, err
		}
	}
	if o.nodesFile != "" {
		nodes, err := readNodes(o.nodesFile)
		if err != nil {
			return nil, nil, err
		}
		s.Nodes = nodes
	}
	if o.manifests != "" {
		if err := s.LoadManifests(o.manifests); err != nil {
			return nil, nil, err
		}
		if o.setFlags["manifests"] && s.ControllerManager == nil && s.APIServer == nil {
			return nil, nil, badInput("--manifests %s: holds neither %s nor %s", o.manifests, kubeadmcfg.ControllerManagerManifest, kubeadmcfg.APIServerManifest)
		}
	}
	s.Pools = append(s.Pools, o.pools...)
	noConfigMaps := s.Kubeadm == nil && s.KubeProxy == nil && s.Kubelet == nil
	if noConfigMaps && s.ControllerManager == nil && s.APIServer == nil {
		// A run that read nothing must not pass for "no findings".
		where := "no kubeadm-config, kube-proxy or kubelet-config ConfigMap in kube-system"
		if o.offline {
			where = "no kubeadm-config, kube-proxy or kubelet-config file given"
		}
		return nil, nil, badInput("nothing to check: %s and no static-pod manifest read (--manifests %q); give the kubeconfig of a kubeadm cluster, --manifests DIR or the offline files", where, o.manifests)
	}
	if o.apply && noConfigMaps {
		return nil, nil, badInput("--apply: nothing to update: the cluster has no kubeadm-config, kube-proxy or kubelet-config ConfigMap in kube-system")
	}
	return s, client, nil
}

// addFile reads a ConfigMap file, or a bare ClusterConfiguration,
// KubeProxyConfiguration or KubeletConfiguration.
func addFile(s *kubeadmcfg.Snapshot, flagName, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return badInput("%s: %v", flagName, err)
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		// A multi-document kubeadm config file does not decode as one object; try it as a ClusterConfiguration.
		head.Kind = kubeadmcfg.KindClusterConfiguration
	}
	switch head.Kind {
	case "ConfigMap":
		cm, err := kubeadmcfg.DecodeConfigMap(data)
		if err != nil {
			return err
		}
		if cm.Namespace == "" {
			cm.Namespace = kubeadmcfg.Namespace
		}
		return s.AddConfigMap(cm)
	case "KubeProxyConfiguration":
		return s.AddConfigMap(&corev1.ConfigMap{Data: map[string]string{kubeadmcfg.KubeProxyConfigKey: string(data)}, ObjectMeta: objMeta(kubeadmcfg.KubeProxyConfigMap)})
	case "KubeletConfiguration":
		return s.AddConfigMap(&corev1.ConfigMap{Data: map[string]string{kubeadmcfg.KubeletConfigKey: string(data)}, ObjectMeta: objMeta(kubeadmcfg.KubeletConfigMap)})
	default:
		return s.AddConfigMap(&corev1.ConfigMap{Data: map[string]string{kubeadmcfg.KubeadmConfigKey: string(data)}, ObjectMeta: objMeta(kubeadmcfg.KubeadmConfigMap)})
	}
}

func readNodes(path string) ([]cidr.NodePodCIDRs, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, badInput("--nodes: %v", err)
	}
	var list corev1.NodeList
	if err := yaml.Unmarshal(data, &list); err != nil {
		return nil, badInput("--nodes %s: not a node list: %v", path, err)
	}
	if len(list.Items) == 0 {
		var n corev1.Node
		if err := yaml.Unmarshal(data, &n); err == nil && n.Kind == "Node" {
			list.Items = []corev1.Node{n}
		}
	}
	out := make([]cidr.NodePodCIDRs, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, kubeadmcfg.NodePodCIDRs(&list.Items[i]))
	}
	return out, nil
}

func (o *options) exec(ctx context.Context, s *kubeadmcfg.Snapshot, client kubernetes.Interface, w io.Writer) (int, error) {
	switch o.cmd {
	case "show":
		vals := s.Values()
		if o.output != "text" {
			return 0, emit(w, o.output, map[string]any{"values": vals})
		}
		if len(vals) == 0 {
			fmt.Fprintln(w, "nothing found: give --kubeconfig, --manifests or the offline files")
			return 0, nil
		}
		for _, v := range vals {
			fmt.Fprintf(w, "%s\n    %s\n", v.Where, v.Value)
		}
		return 0, nil
	case "check":
		rep := kubeadmcfg.Check(s)
		code := 0
		if rep.Count(cidr.SeverityError) > 0 {
			code = 1
		}
		if o.output != "text" {
			return code, emit(w, o.output, rep)
		}
		printReport(w, rep)
		return code, nil
	}
	return o.set(ctx, s, client, w)
}

func emit(w io.Writer, format string, v any) error { return cli.Write(w, format, v) }

func printFindings(w io.Writer, fs []kubeadmcfg.Finding) {
	for _, f := range fs {
		fmt.Fprintf(w, "%-7s %s: %s\n", strings.ToUpper(string(f.Severity)), f.Code, f.Message)
		for _, s := range f.Sources {
			fmt.Fprintf(w, "        - %s = %s\n", s.Where, s.Value)
		}
	}
}

func printPreflight(w io.Writer, label string, p *cidr.PreflightResult) {
	if p == nil {
		return
	}
	switch {
	case p.IPAMDisabled:
		fmt.Fprintf(w, "%s: node IPAM is off (--allocate-node-cidrs=false), nothing can crash it\n", label)
	case p.WouldStart:
		fmt.Fprintf(w, "%s: kube-controller-manager would start\n", label)
	default:
		fmt.Fprintf(w, "%s: kube-controller-manager would NOT start (%d flag errors, %d nodes would crash it)\n", label, len(p.FlagErrors), len(p.Crashes))
		for _, c := range p.Crashes {
			fmt.Fprintf(w, "    node %s: %s\n", c.Node, c.Message)
		}
		for _, e := range p.FlagErrors {
			fmt.Fprintf(w, "    %s\n", e)
		}
	}
}

func printReport(w io.Writer, rep kubeadmcfg.Report) {
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "no findings: every place agrees")
	}
	printFindings(w, rep.Findings)
	printPreflight(w, "preflight ("+rep.PreflightSource+")", rep.Preflight)
	fmt.Fprintf(w, "%d errors, %d warnings, %d values read\n", rep.Count(cidr.SeverityError), rep.Count(cidr.SeverityWarning), len(rep.Values))
}

func (o *options) set(ctx context.Context, s *kubeadmcfg.Snapshot, client kubernetes.Interface, w io.Writer) (int, error) {
	p, err := kubeadmcfg.NewPlan(s, kubeadmcfg.Intent{
		PodSubnet: o.podSubnet, ServiceSubnet: o.serviceSubnet, NodeMask: o.nodeMask, NodeMaskIPv6: o.nodeMaskIPv6,
	}, kubeadmcfg.PlanOptions{KeepNodeIPAM: o.keepIPAM})
	if errors.Is(err, kubeadmcfg.ErrNothingToDo) {
		return 0, badInput("%v", err)
	}
	var fe *kubeadmcfg.FieldError
	if errors.As(err, &fe) && fe.Source == "intent" {
		// Name the flag the user typed.
		flagName := map[string]string{"podSubnet": "--pod-subnet", "serviceSubnet": "--service-subnet", "nodeMask": "--node-mask", "nodeMaskIPv6": "--node-mask-ipv6"}[fe.Field]
		if flagName != "" {
			return 2, badInput("%s %s: %s", flagName, fe.Value, oneLine(fe.Reason))
		}
	}
	if err != nil {
		return 0, err
	}
	code := 0
	if p.Blocked() {
		code = 1
		if o.apply {
			// Refused: the requested layout is bad input; nothing is written.
			var first kubeadmcfg.Finding
			n := 0
			for _, f := range p.Findings {
				if f.Severity == cidr.SeverityError {
					if n == 0 {
						first = f
					}
					n++
				}
			}
			return 2, badInput("not applied: %s gives a layout with %d error(s): %s: %s", o.intentFlags(), n, first.Code, oneLine(first.Message))
		}
	}
	var res *kubeadmcfg.ApplyResult
	var applyErr error
	if o.apply && !p.Blocked() {
		ao := kubeadmcfg.ApplyOptions{DryRun: o.dryRun}
		if o.dryRun == kubeadmcfg.DryRunNone {
			// One rewrite at a time per cluster (Lease cidrshift-kubeadmcfg),
			// checked before each edit.
			l, err := o.lock.Lease(client, kubeadmcfg.LockScope)
			if err != nil {
				return 1, err
			}
			if l != nil {
				ao.Lock = l
			}
		}
		r, err := kubeadmcfg.Apply(ctx, client, p, ao)
		res, applyErr = &r, err
	}
	var written []string
	if o.outDir != "" {
		for _, e := range p.FileEdits {
			if e.After == "" {
				continue
			}
			// Later edits of the same file hold the final content.
			path := filepath.Join(o.outDir, filepath.Base(e.Path))
			if err := kubeadmcfg.WriteFileAtomic(path, []byte(e.After)); err != nil {
				return 1, err
			}
			written = append(written, path)
		}
	}
	if o.output != "text" {
		out := map[string]any{"plan": p}
		if res != nil {
			out["apply"] = res
		}
		if err := emit(w, o.output, out); err != nil {
			return 1, err
		}
		if applyErr != nil {
			return 1, applyErr
		}
		return code, nil
	}
	printPlan(w, p)
	for _, path := range uniq(written) {
		fmt.Fprintf(w, "wrote %s\n", path)
	}
	switch {
	case o.apply && p.Blocked():
		fmt.Fprintln(w, "not applied: the target layout has errors")
	case res != nil:
		for _, ev := range res.Events {
			fmt.Fprintf(w, "applied %s: %s (%s)", ev.Edit, ev.Outcome, ev.ConfigMap)
			if ev.DryRun != "" {
				fmt.Fprintf(w, " [dry-run=%s]", ev.DryRun)
			}
			fmt.Fprintln(w)
		}
	case !o.apply && len(p.ConfigMapEdits) > 0:
		fmt.Fprintln(w, "nothing applied: run again with --apply to update the ConfigMaps")
	}
	if applyErr != nil {
		return 1, applyErr
	}
	return code, nil
}

// intentFlags names the set flags given, with their values.
func (o *options) intentFlags() string {
	var out []string
	for _, f := range []struct {
		name, v string
	}{{"pod-subnet", o.podSubnet}, {"service-subnet", o.serviceSubnet}, {"node-mask", fmt.Sprint(o.nodeMask)}, {"node-mask-ipv6", fmt.Sprint(o.nodeMaskIPv6)}} {
		if o.setFlags[f.name] {
			out = append(out, "--"+f.name+" "+f.v)
		}
	}
	return strings.Join(out, " ")
}

func uniq(v []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range v {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func printPlan(w io.Writer, p *kubeadmcfg.Plan) {
	fmt.Fprintf(w, "current: pod %s, service %s, node masks %v, clusterDNS %v\n", p.Current.PodSubnet, p.Current.ServiceSubnet, p.Current.NodeMasks, p.Current.ClusterDNS)
	fmt.Fprintf(w, "target:  pod %s, service %s, node masks %v, clusterDNS %v\n", p.Target.PodSubnet, p.Target.ServiceSubnet, p.Target.NodeMasks, p.Target.ClusterDNS)
	if len(p.Findings) > 0 {
		fmt.Fprintln(w, "\nproblems with the target:")
		printFindings(w, p.Findings)
	}
	fmt.Fprintln(w, "\nsteps:")
	for _, st := range p.Steps {
		edit := ""
		if st.Edit != "" {
			edit = " [" + st.Edit + "]"
		}
		fmt.Fprintf(w, "%2d. (%s) %s%s\n", st.Number, st.Kind, st.Title, edit)
		if st.Detail != "" {
			fmt.Fprintf(w, "    %s\n", st.Detail)
		}
	}
	if p.ProposedFlags != nil {
		fmt.Fprintf(w, "\nproposed kube-controller-manager flags: %s\n", strings.Join(p.ProposedFlags.Args(), " "))
	}
	printPreflight(w, "preflight with the nodes as they are", p.PreflightNow)
	printPreflight(w, "preflight once the nodes are moved", p.PreflightAfterMove)
	for _, e := range p.FileEdits {
		fmt.Fprintf(w, "\n# %s: on every control-plane node, %s\n", e.ID, changesText(e.Changes))
		if e.Diff != "" {
			fmt.Fprint(w, e.Diff)
		} else {
			fmt.Fprintf(w, "# (%s was not read: make the change by hand)\n", e.Path)
		}
	}
	for _, e := range p.ConfigMapEdits {
		fmt.Fprintf(w, "\n# %s: %s\n", e.ID, strings.Join(e.Changes, "; "))
		fmt.Fprint(w, e.Diff)
	}
}

func changesText(cs []kubeadmcfg.FlagChange) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, " ")
}

func objMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: kubeadmcfg.Namespace}
}
