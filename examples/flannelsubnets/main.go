// Command flannelsubnets shows, checks and changes flannel's subnets: the
// etcd subnet registry (flanneld's default mode) or, with --kube-subnet-mgr,
// net-conf.json and the nodes' flannel annotations.
//
//	flannelsubnets --etcd-endpoints https://10.0.0.1:2379 --etcd-cafile ca.pem \
//	    --etcd-certfile client.pem --etcd-keyfile client-key.pem check
//	flannelsubnets [flags] show
//	flannelsubnets [flags] check [--subnet-env FILE [--node NAME | --public-ip IP]]
//	flannelsubnets [flags] rm KEY... | rm --stale
//	flannelsubnets [flags] move KEY [SUBNET[,IPV6SUBNET]]
//	flannelsubnets [flags] set-network CIDR[,IPV6CIDR] [--move-leases]
//	flannelsubnets [flags] resume
//
// The etcd flags are flanneld's own, so they can be copied from its unit or
// DaemonSet. In etcd mode --kubeconfig (or $KUBECONFIG) adds the node list,
// which names each lease's node and finds stale leases. Changes print their
// plan and the host clean-up each moved node needs; nothing is written
// without --apply, and --dry-run=client (or server, kube mode) rehearses the
// write against the live store.
//
// Every flag and argument (etcd URLs, prefix and TLS files, names, subnets,
// networks) is checked before etcd or the cluster is read, and every change
// is planned and checked whole before its first write: a move or rm of a
// subnet no lease holds, a destination outside the network or over another
// lease, set-network to the network in use, or (kube mode) to one that
// leaves a node's podCIDR outside it, is refused.
//
// Exit codes (internal/cli): 0 fine, 1 problems found or a change refused by
// the store, 2 bad input, 4 etcd or the API server unreachable or refusing
// the credentials, 130 interrupted.
//
// --apply holds the Lease cidrshift-flannel in --lock-namespace (default
// kube-system) while it writes: a second run is refused naming the holder.
// --steal-lock takes over an expired Lease, --no-lock takes none (RBAC: get,
// create, update on leases there). In etcd mode the Lease needs a cluster:
// --apply is refused (exit 2) without --kubeconfig or $KUBECONFIG, unless
// --no-lock is given.
//
// In etcd mode an --apply run is also kept in etcd, under
// <prefix>/cidrshift/run/<plan ID>, with each key as it was before the run
// wrote it (flannel.Registry.RunKey). A run killed on one machine is
// finished from any other with `resume --apply`, whatever --journal-dir;
// `resume` alone prints the unfinished change's plan.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/internal/cli"
)

func main() {
	ctx, stop := cli.SignalContext()
	code := runWith(ctx, realDeps(ctx), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// deps are the connections run makes; tests replace them.
type deps struct {
	dialEtcd func(ctx context.Context, cfg flannel.EtcdConfig) (flannel.KV, io.Closer, error)
	kube     func(kubeconfig, kubeContext string) (kubernetes.Interface, error)
	getenv   func(string) string
}

func realDeps(ctx context.Context) deps {
	return deps{
		dialEtcd: func(ctx context.Context, cfg flannel.EtcdConfig) (flannel.KV, io.Closer, error) {
			kv, err := flannel.DialEtcd(ctx, cfg)
			if err != nil {
				return nil, nil, err
			}
			return kv, kv, nil
		},
		kube: func(kubeconfig, kubeContext string) (kubernetes.Interface, error) {
			// An unreachable API server is exit 4 within cli.ReachTimeout.
			cfg, err := cli.Connect(ctx, kubeconfig, kubeContext, os.Stderr)
			if err != nil {
				return nil, err
			}
			return kubernetes.NewForConfig(cfg)
		},
		getenv: os.Getenv,
	}
}

type options struct {
	endpoints, caFile, certFile, keyFile, prefix, username, password string
	kubeSubnetMgr                                                    bool
	kubeconfig, kubeContext, namespace, configMap, annotationPrefix  string
	output, dryRun, journalDir                                       string
	apply, moveLeases, stale                                         bool
	subnetEnv, node, publicIP                                        string
	lock                                                             cli.LockFlags
}

// usagef is bad input: exit 2 with one line naming the flag and the value.
func usagef(format string, a ...any) error { return cli.Usagef(format, a...) }

const usage = `Usage: flannelsubnets [flags] COMMAND [ARGS]

Commands:
  show                          print the network config and every lease (or node)
  check                         audit; exit 1 when an error is found
  rm KEY... | rm --stale        delete leases (etcd mode)
  move KEY [SUBNET[,SUBNET6]]   move a lease, to the lowest free subnet by default (etcd mode)
  set-network CIDR[,CIDR6]      rewrite the network config (and, with --move-leases, the leases)
  resume                        finish the oldest unfinished change kept in etcd (etcd mode)

KEY is a lease key or its name, e.g. 172.7.3.0-24. Changes print a plan; --apply writes it,
holding the Lease cidrshift-flannel: in etcd mode give --kubeconfig (or set KUBECONFIG) for
it, or --no-lock to write without a lock.

Flags:
`

func run(args []string, stdout, stderr io.Writer) int {
	return runWith(context.Background(), realDeps(context.Background()), args, stdout, stderr)
}

// badInput are the library sentinels that mean bad input (exit 2).
var badInput = []error{flannel.ErrInvalidRequest, flannel.ErrBadSubnetEnv}

func runWith(ctx context.Context, d deps, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flannelsubnets", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	fs.StringVar(&o.endpoints, "etcd-endpoints", flannel.DefaultEtcdEndpoints, "a comma-delimited list of etcd endpoints (flanneld's flag)")
	fs.StringVar(&o.caFile, "etcd-cafile", "", "SSL Certificate Authority file used to secure etcd communication")
	fs.StringVar(&o.certFile, "etcd-certfile", "", "SSL certification file used to secure etcd communication")
	fs.StringVar(&o.keyFile, "etcd-keyfile", "", "SSL key file used to secure etcd communication")
	fs.StringVar(&o.prefix, "etcd-prefix", flannel.DefaultPrefix, "etcd prefix")
	fs.StringVar(&o.username, "etcd-username", "", "username for BasicAuth to etcd")
	fs.StringVar(&o.password, "etcd-password", "", "password for BasicAuth to etcd")
	fs.BoolVar(&o.kubeSubnetMgr, "kube-subnet-mgr", false, "work on net-conf.json and the nodes (kube subnet manager mode) instead of etcd")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, then ~/.kube/config); in etcd mode it adds the node list")
	fs.StringVar(&o.kubeContext, "context", "", "kubeconfig context")
	fs.StringVar(&o.namespace, "namespace", flannel.DefaultNetConfNamespace, "namespace of the flannel ConfigMap (kube mode)")
	fs.StringVar(&o.configMap, "configmap", flannel.DefaultNetConfName, "ConfigMap holding net-conf.json (kube mode)")
	fs.StringVar(&o.annotationPrefix, "kube-annotation-prefix", flannel.DefaultAnnotationPrefix, "flanneld's node annotation prefix")
	fs.StringVar(&o.output, "o", "text", "output format: text, json or yaml")
	fs.BoolVar(&o.apply, "apply", false, "write the changes (without it, changes print their plan only)")
	fs.StringVar(&o.dryRun, "dry-run", "", "rehearse the change against the live store: client, or server (kube mode)")
	fs.StringVar(&o.journalDir, "journal-dir", "", "directory where --apply records each etcd step before writing it")
	fs.BoolVar(&o.moveLeases, "move-leases", false, "set-network: also move each lease to the same offset in the new network (etcd mode)")
	fs.BoolVar(&o.stale, "stale", false, "rm: delete every lease whose PublicIP belongs to no node (needs the node list)")
	fs.StringVar(&o.subnetEnv, "subnet-env", "", "check: a node's subnet.env file to check against its lease or podCIDR")
	fs.StringVar(&o.node, "node", "", "check: the node the --subnet-env file comes from")
	fs.StringVar(&o.publicIP, "public-ip", "", "check: the PublicIP of the node the --subnet-env file comes from (etcd mode)")
	o.lock.Register(fs)

	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	if err != nil {
		err = usagef("%v", err)
	} else {
		err = o.validate(pos, o.hasKubeconfig(d))
	}
	if err == nil {
		err = execute(ctx, d, o, pos, stdout)
	}
	if errors.Is(err, errProblemsFound) {
		return cli.ExitProblems
	}
	return cli.Fail(stderr, "flannelsubnets", err, badInput...)
}

// errProblemsFound makes check exit 1 after printing its report.
var errProblemsFound = errors.New("problems found")

// parseInterspersed parses flags given before or after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// hasKubeconfig reports whether a kubeconfig is at hand: --kubeconfig or
// $KUBECONFIG. Etcd mode then reads the node list and takes the Lease there.
func (o options) hasKubeconfig(d deps) bool {
	return o.kubeconfig != "" || d.getenv("KUBECONFIG") != ""
}

// validate checks the flags and arguments; cluster says whether a
// kubeconfig is at hand (hasKubeconfig).
func (o options) validate(pos []string, cluster bool) error {
	if err := cli.CheckFormat(o.output); err != nil {
		return usagef("%v", err)
	}
	if len(pos) == 0 {
		return usagef("missing command: show, check, rm, move, set-network or resume (see -h)")
	}
	switch o.dryRun {
	case "", "client":
	case "server":
		if !o.kubeSubnetMgr {
			return usagef("--dry-run=server: etcd has no server-side dry run; use --dry-run=client")
		}
	default:
		return usagef("--dry-run=%q: want client or server", o.dryRun)
	}
	cmd, args := pos[0], pos[1:]
	switch cmd {
	case "show", "check":
		if len(args) > 0 {
			return usagef("%s takes no arguments, got %q", cmd, args)
		}
		if o.subnetEnv == "" && (o.node != "" || o.publicIP != "") {
			return usagef("--node and --public-ip go with --subnet-env")
		}
		if o.subnetEnv != "" && o.kubeSubnetMgr && o.node == "" {
			return usagef("--subnet-env in kube mode needs --node, the node whose podCIDR the file must match")
		}
	case "rm":
		if o.kubeSubnetMgr {
			return usagef("rm works on the etcd registry; in kube subnet manager mode node subnets are podCIDRs (see examples/noderecreate)")
		}
		if len(args) == 0 && !o.stale {
			return usagef("rm needs lease keys, or --stale")
		}
		if len(args) > 0 && o.stale {
			return usagef("rm takes lease keys or --stale, not both")
		}
	case "move":
		if o.kubeSubnetMgr {
			return usagef("move works on the etcd registry; in kube subnet manager mode a node's subnet is its podCIDR (see examples/noderecreate)")
		}
		if len(args) < 1 || len(args) > 2 {
			return usagef("move needs KEY and optionally SUBNET[,IPV6SUBNET]")
		}
	case "resume":
		if o.kubeSubnetMgr {
			return usagef("resume works on the etcd registry; in kube subnet manager mode a change is one ConfigMap update")
		}
		if len(args) > 0 {
			return usagef("resume takes no arguments, got %q", args)
		}
	case "set-network":
		if len(args) != 1 {
			return usagef("set-network needs one argument, CIDR or CIDR,IPV6CIDR")
		}
		if o.moveLeases && o.kubeSubnetMgr {
			return usagef("--move-leases is for etcd mode; in kube mode node subnets are podCIDRs")
		}
	default:
		return usagef("unknown command %q: want show, check, rm, move, set-network or resume", cmd)
	}
	if cmd != "rm" && o.stale {
		return usagef("--stale goes with rm")
	}
	if err := o.lock.Check(); err != nil {
		return err
	}
	if cmd != "set-network" && o.moveLeases {
		return usagef("--move-leases goes with set-network")
	}
	if cmd == "show" || cmd == "check" {
		switch {
		case o.apply:
			return usagef("--apply goes with rm, move or set-network; %s only reads", cmd)
		case o.dryRun != "":
			return usagef("--dry-run=%s goes with rm, move or set-network; %s only reads", o.dryRun, cmd)
		}
	}
	if !o.kubeSubnetMgr && o.apply && o.dryRun == "" && !o.lock.Off && !cluster {
		return usagef("--apply in etcd mode holds the Lease %s, which needs a cluster: give --kubeconfig (or set KUBECONFIG), or --no-lock to write without a lock (nothing then stops a second run)", flannel.LockScope)
	}
	if o.kubeSubnetMgr {
		if o.journalDir != "" {
			return usagef("--journal-dir %s is for etcd mode; in kube mode the ConfigMap write is one update", o.journalDir)
		}
		if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
			return usagef("--namespace %q is not a namespace name: %s", o.namespace, strings.Join(errs, "; "))
		}
		if errs := validation.IsDNS1123Subdomain(o.configMap); len(errs) > 0 {
			return usagef("--configmap %q is not a ConfigMap name: %s", o.configMap, strings.Join(errs, "; "))
		}
	} else if err := o.validateEtcd(); err != nil {
		return err
	}
	if _, err := flannel.NewAnnotationKeys(o.annotationPrefix); err != nil {
		return usagef("--kube-annotation-prefix %q: %v", o.annotationPrefix, err)
	}
	if o.publicIP != "" {
		if ip, err := netip.ParseAddr(o.publicIP); err != nil || !ip.Is4() {
			return usagef("--public-ip %q is not an IPv4 address", o.publicIP)
		}
	}
	if o.subnetEnv != "" {
		if st, err := os.Stat(o.subnetEnv); err != nil {
			return usagef("--subnet-env %s: %v", o.subnetEnv, err)
		} else if st.IsDir() {
			return usagef("--subnet-env %s is a directory; give the node's subnet.env file", o.subnetEnv)
		}
	}
	// The positional arguments are parsed here, before anything is read.
	switch {
	case cmd == "move" && len(args) == 2:
		if _, err := parseSubnetArg(args[1]); err != nil {
			return err
		}
	case cmd == "set-network":
		if _, err := parseNetworkArg(args[0]); err != nil {
			return err
		}
	}
	return nil
}

// validateEtcd checks the etcd flags before anything is dialled: URLs, a
// prefix flanneld can use, and TLS files that exist.
func (o options) validateEtcd() error {
	eps := flannel.ParseEndpoints(o.endpoints)
	if len(eps) == 0 {
		return usagef("--etcd-endpoints %q: give at least one client URL such as https://127.0.0.1:2379", o.endpoints)
	}
	for _, e := range eps {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" && u.Scheme != "unixs") || (u.Host == "" && u.Path == "") {
			return usagef("--etcd-endpoints: %q is not a URL like https://10.0.0.1:2379", e)
		}
	}
	if !strings.HasPrefix(o.prefix, "/") || strings.Trim(o.prefix, "/") == "" {
		return usagef("--etcd-prefix %q: want an absolute etcd path below the root, like %s", o.prefix, flannel.DefaultPrefix)
	}
	if (o.certFile == "") != (o.keyFile == "") {
		return usagef("--etcd-certfile %q and --etcd-keyfile %q: give both or neither", o.certFile, o.keyFile)
	}
	for _, f := range []struct{ flag, path string }{{"etcd-cafile", o.caFile}, {"etcd-certfile", o.certFile}, {"etcd-keyfile", o.keyFile}} {
		if f.path == "" {
			continue
		}
		st, err := os.Stat(f.path)
		if err != nil {
			return usagef("--%s %s: %v", f.flag, f.path, errors.Unwrap(err))
		}
		if !st.Mode().IsRegular() {
			return usagef("--%s %s: not a regular file", f.flag, f.path)
		}
	}
	if o.password != "" && o.username == "" {
		return usagef("--etcd-password needs --etcd-username")
	}
	return nil
}

func execute(ctx context.Context, d deps, o options, pos []string, w io.Writer) error {
	if o.kubeSubnetMgr {
		return executeKube(ctx, d, o, pos, w)
	}
	return executeEtcd(ctx, d, o, pos, w)
}

// ---- etcd mode ----

type etcdEnv struct {
	reg    *flannel.Registry
	snap   *flannel.Snapshot
	nodes  []flannel.Node // nil when no kubeconfig
	byAddr map[netip.Addr]string
	kube   kubernetes.Interface // nil when no kubeconfig
}

func loadEtcd(ctx context.Context, d deps, o options) (*etcdEnv, io.Closer, error) {
	kv, closer, err := d.dialEtcd(ctx, flannel.EtcdConfig{
		Endpoints: flannel.ParseEndpoints(o.endpoints), CAFile: o.caFile, CertFile: o.certFile, KeyFile: o.keyFile,
		Username: o.username, Password: o.password,
	})
	if err != nil {
		return nil, nil, err
	}
	reg, err := flannel.NewRegistry(kv, flannel.RegistryOptions{Prefix: o.prefix})
	if err != nil {
		_ = closer.Close()
		return nil, nil, err
	}
	snap, err := reg.Snapshot(ctx)
	if err != nil {
		_ = closer.Close()
		return nil, nil, etcdError(o, err)
	}
	env := &etcdEnv{reg: reg, snap: snap, byAddr: map[netip.Addr]string{}}
	if o.hasKubeconfig(d) {
		kc, err := d.kube(o.kubeconfig, o.kubeContext)
		if err == nil {
			env.kube = kc
			env.nodes, err = flannel.ReadNodes(ctx, kc, flannel.KubeOptions{AnnotationPrefix: o.annotationPrefix})
		}
		if err != nil {
			_ = closer.Close()
			return nil, nil, fmt.Errorf("reading the node list: %w", err)
		}
		if env.nodes == nil {
			env.nodes = []flannel.Node{}
		}
		for _, na := range flannel.NodeAddressList(env.nodes) {
			for _, a := range na.Addrs {
				env.byAddr[a] = na.Name
			}
		}
	}
	return env, closer, nil
}

// etcdError marks an etcd that did not answer, or refused the credentials,
// as unreachable (exit 4).
func etcdError(o options, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) ||
		errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrAuthNotEnabled) {
		return &cli.UnreachableError{Host: "etcd " + o.endpoints, Err: err}
	}
	return err
}

func (e *etcdEnv) nodeOf(ip netip.Addr) string { return e.byAddr[ip] }

func executeEtcd(ctx context.Context, d deps, o options, pos []string, w io.Writer) error {
	env, closer, err := loadEtcd(ctx, d, o)
	if err != nil {
		return err
	}
	defer closer.Close()
	cmd, args := pos[0], pos[1:]
	switch cmd {
	case "show":
		return showEtcd(env, o, w)
	case "check":
		return checkEtcd(env, o, w)
	case "rm":
		keys := args
		if o.stale {
			if env.nodes == nil {
				return usagef("rm --stale needs the node list: give --kubeconfig (or set KUBECONFIG)")
			}
			keys = flannel.Audit(env.snap, flannel.AuditOptions{Nodes: flannel.NodeAddressList(env.nodes)}).Keys(flannel.FindingUnknownNode)
			if len(keys) == 0 {
				fmt.Fprintln(w, "no stale lease: every lease's PublicIP belongs to a node")
				return nil
			}
		}
		p, err := flannel.PlanDelete(env.snap, keys, "deleted with flannelsubnets rm")
		if err != nil {
			return badRequest(err)
		}
		return change(ctx, env, o, p, w)
	case "move":
		req := flannel.MoveRequest{Key: args[0]}
		if len(args) == 2 {
			if req.To, err = parseSubnetArg(args[1]); err != nil {
				return err
			}
		}
		p, err := flannel.PlanMove(env.snap, []flannel.MoveRequest{req})
		if err != nil {
			return badRequest(err)
		}
		return change(ctx, env, o, p, w)
	case "resume":
		// A run of --apply killed on any machine is kept under
		// <prefix>/cidrshift/run/ until its plan is applied to the end.
		runs, err := env.reg.UnfinishedRuns(ctx)
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			fmt.Fprintf(w, "no unfinished change under %s/cidrshift/run/\n", env.reg.Prefix())
			return nil
		}
		if o.output == "text" {
			fmt.Fprintf(w, "Unfinished change %s, started by %s at %s (%d in all):\n", runs[0].Key, runs[0].StartedBy, runs[0].Started.Format(time.RFC3339), len(runs))
		}
		return change(ctx, env, o, runs[0].Plan, w)
	default: // set-network
		req, err := parseNetworkArg(args[0])
		if err != nil {
			return err
		}
		req.MoveLeases = o.moveLeases
		p, err := flannel.PlanSetNetwork(env.snap, req)
		if err != nil {
			return badRequest(err)
		}
		return change(ctx, env, o, p, w)
	}
}

// badRequest marks plan-building errors caused by the arguments as bad input.
func badRequest(err error) error {
	if errors.Is(err, flannel.ErrNotFound) || errors.Is(err, flannel.ErrInvalidConfig) || errors.Is(err, cidr.ErrOccupied) {
		return fmt.Errorf("%w: %w", flannel.ErrInvalidRequest, err)
	}
	return err
}

// parseSubnetArg reads "172.7.5.0/24", "172.7.5.0/24,fd00::/64" or a key name "172.7.5.0-24".
func parseSubnetArg(s string) (flannel.SubnetKey, error) {
	if !strings.Contains(s, "/") {
		k, err := flannel.ParseSubnetKey(s)
		if err != nil || !k.Canonical(s) {
			return flannel.SubnetKey{}, usagef("subnet %q: write it as 172.7.5.0/24 (or a key name such as 172.7.5.0-24)", s)
		}
		return k, nil
	}
	ps, err := cidr.ParseList(s)
	if err != nil {
		return flannel.SubnetKey{}, usagef("subnet %q: %v", s, err)
	}
	k := flannel.SubnetKey{}
	for _, p := range ps {
		if p.Addr().Is4() {
			k.IPv4 = p
		} else {
			k.IPv6 = p
		}
	}
	return k, nil
}

func parseNetworkArg(s string) (flannel.SetNetworkRequest, error) {
	ps, err := cidr.ParseList(s)
	if err != nil {
		return flannel.SetNetworkRequest{}, usagef("network %q: %v", s, err)
	}
	var req flannel.SetNetworkRequest
	for _, p := range ps {
		if p.Addr().Is4() {
			req.Network = p
		} else {
			req.IPv6Network = p
		}
	}
	return req, nil
}

func showEtcd(env *etcdEnv, o options, w io.Writer) error {
	if o.output != "text" {
		return cli.Write(w, o.output, env.snap)
	}
	s := env.snap
	fmt.Fprintf(w, "etcd prefix %s (revision %d)\n", s.Prefix, s.Revision)
	switch {
	case s.Config == nil:
		fmt.Fprintf(w, "config: %s/config does not exist\n", s.Prefix)
	default:
		fmt.Fprintf(w, "config: %s\n", strings.TrimSpace(s.Config.Raw))
		if s.Config.Resolved == nil {
			fmt.Fprintf(w, "  refused by flanneld: %s\n", s.Config.Error)
		} else {
			printLayouts(w, s.Config.Resolved)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tPUBLIC IP\tNODE\tBACKEND\tTTL")
	for _, l := range s.Leases {
		node := env.nodeOf(l.Attrs.PublicIP)
		if node == "" {
			node = "-"
			if env.nodes != nil {
				node = "(none)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Subnet, orDash(l.Attrs.PublicIP.String(), l.Attrs.PublicIP.IsValid()), node, orDash(l.Attrs.BackendType, l.Attrs.BackendType != ""), ttlText(l))
	}
	_ = tw.Flush()
	for _, b := range s.BadLeases {
		fmt.Fprintf(w, "unreadable: %s: %s\n", b.Key, b.Error)
	}
	return nil
}

func printLayouts(w io.Writer, r *flannel.Resolved) {
	for _, l := range []*flannel.Layout{r.IPv4, r.IPv6} {
		if l != nil {
			fmt.Fprintf(w, "  %s: network %s, /%d subnets from %s to %s (%s subnets)\n", l.Family, l.Network, l.SubnetLen, l.SubnetMin, l.SubnetMax, l.Subnets)
		}
	}
	fmt.Fprintf(w, "  backend: %s\n", r.BackendType)
}

func orDash(s string, ok bool) string {
	if !ok {
		return "-"
	}
	return s
}

func ttlText(l flannel.Lease) string {
	switch {
	case l.LeaseID == 0:
		return "never (reservation)"
	case l.TTLSeconds < 0:
		return "expired"
	}
	return (time.Duration(l.TTLSeconds) * time.Second).String()
}

// checkOutput is check's -o json|yaml output.
type checkOutput struct {
	Report    *flannel.Report   `json:"report"`
	SubnetEnv []flannel.Finding `json:"subnetEnv,omitempty"`
}

func checkEtcd(env *etcdEnv, o options, w io.Writer) error {
	var opts flannel.AuditOptions
	if env.nodes != nil {
		opts.Nodes = flannel.NodeAddressList(env.nodes)
	}
	out := checkOutput{Report: flannel.Audit(env.snap, opts)}
	if o.subnetEnv != "" {
		fs, err := checkSubnetEnvEtcd(env, o)
		if err != nil {
			return err
		}
		out.SubnetEnv = fs
	}
	return printCheck(w, o, out, env)
}

func readSubnetEnv(path string) (*flannel.SubnetEnv, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--subnet-env: %v", err)
	}
	e, err := flannel.ParseSubnetEnv(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

func checkSubnetEnvEtcd(env *etcdEnv, o options) ([]flannel.Finding, error) {
	e, err := readSubnetEnv(o.subnetEnv)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	who := ""
	switch {
	case o.publicIP != "":
		ip, err := netip.ParseAddr(o.publicIP)
		if err != nil {
			return nil, usagef("--public-ip %q is not an IP address", o.publicIP)
		}
		ips, who = []netip.Addr{ip}, "PublicIP "+ip.String()
	case o.node != "":
		if env.nodes == nil {
			return nil, usagef("--node needs the node list: give --kubeconfig, or use --public-ip")
		}
		for _, na := range flannel.NodeAddressList(env.nodes) {
			if na.Name == o.node {
				ips = na.Addrs
			}
		}
		if ips == nil {
			return nil, usagef("--node %q: no such node", o.node)
		}
		who = "node " + o.node
	}
	var lease *flannel.Lease
	for i, l := range env.snap.Leases {
		match := l.Subnet.IPv4 == e.Lease().IPv4
		if ips != nil {
			match = false
			for _, ip := range ips {
				match = match || l.Attrs.PublicIP == ip
			}
		}
		if match {
			lease = &env.snap.Leases[i]
			break
		}
	}
	want := flannel.SubnetEnvExpectation{Node: o.node}
	if c := env.snap.Config; c != nil && c.Config != nil {
		want.Network, want.IPv6Network = c.Config.Network, c.Config.IPv6Network
	}
	if lease == nil {
		if who == "" {
			who = "FLANNEL_SUBNET " + e.Subnet.String()
		}
		return []flannel.Finding{{Kind: flannel.FindingSubnetEnvStale, Severity: cidr.SeverityError, Nodes: nonEmpty(o.node), Subnet: e.Lease().IPv4,
			Detail: fmt.Sprintf("no lease in %s/subnets/ matches %s: the node's flanneld leases a subnet at its next start, and if it differs the node needs the host clean-up steps", env.snap.Prefix, who)}}, nil
	}
	want.Subnet, want.Source = lease.Subnet, "its lease "+lease.Key
	return flannel.CheckSubnetEnv(e, want), nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func printCheck(w io.Writer, o options, out checkOutput, env *etcdEnv) error {
	if o.output != "text" {
		if err := cli.Write(w, o.output, out); err != nil {
			return err
		}
	} else {
		all := append(append([]flannel.Finding{}, out.Report.Findings...), out.SubnetEnv...)
		for _, f := range all {
			fmt.Fprintf(w, "%-7s %s", f.Severity, f.Kind)
			if len(f.Keys) > 0 {
				fmt.Fprintf(w, " %s", strings.Join(f.Keys, " "))
			}
			var nodes []string
			nodes = append(nodes, f.Nodes...)
			if env != nil && len(f.Nodes) == 0 {
				for _, k := range f.Keys {
					if l := env.snap.Lease(k); l != nil {
						if n := env.nodeOf(l.Attrs.PublicIP); n != "" {
							nodes = append(nodes, n)
						}
					}
				}
			}
			if len(nodes) > 0 {
				fmt.Fprintf(w, " (node %s)", strings.Join(nodes, ", "))
			}
			fmt.Fprintf(w, "\n        %s\n", f.Detail)
		}
		if len(all) == 0 {
			fmt.Fprintln(w, "no problem found")
		}
	}
	errs := out.Report.Count(cidr.SeverityError)
	for _, f := range out.SubnetEnv {
		if f.Severity == cidr.SeverityError {
			errs++
		}
	}
	if errs > 0 {
		return errProblemsFound
	}
	return nil
}

// nodeCleanup is the host clean-up of one node a change moves.
type nodeCleanup struct {
	Node     string             `json:"node"`
	PublicIP netip.Addr         `json:"publicIP,omitzero"`
	From     flannel.SubnetKey  `json:"from"`
	To       flannel.SubnetKey  `json:"to"`
	Steps    []flannel.HostStep `json:"steps"`
}

// changeOutput is the -o json|yaml output of rm, move and set-network.
type changeOutput struct {
	Plan    any           `json:"plan"`
	Cleanup []nodeCleanup `json:"cleanup,omitempty"`
	// Mode is "plan" (nothing written), "dry-run" or "apply".
	Mode   string `json:"mode"`
	Result any    `json:"result,omitempty"`
}

func mode(o options) string {
	switch {
	case o.dryRun != "":
		return "dry-run"
	case o.apply:
		return "apply"
	}
	return "plan"
}

func change(ctx context.Context, env *etcdEnv, o options, p *flannel.Plan, w io.Writer) error {
	out := changeOutput{Plan: p, Mode: mode(o)}
	var backend string
	var backendRaw []byte
	if c := env.snap.Config; c != nil && c.Config != nil {
		backend, backendRaw = c.Config.BackendType, c.Config.Backend
	}
	for _, st := range p.Steps {
		if st.Action != flannel.ActionMoveLease {
			continue
		}
		node := env.nodeOf(st.PublicIP)
		if node == "" {
			node = "NODE"
		}
		out.Cleanup = append(out.Cleanup, nodeCleanup{Node: node, PublicIP: st.PublicIP, From: st.From, To: st.To,
			Steps: flannel.CleanupSteps(flannel.CleanupOptions{Node: node, From: st.From, To: st.To, BackendType: backend, Backend: backendRaw, IPv6: st.To.IPv6.IsValid()})})
	}
	var applyErr error
	ao := flannel.ApplyOptions{DryRun: out.Mode == "dry-run", JournalDir: o.journalDir}
	if out.Mode == "apply" && env.kube != nil {
		// With a cluster at hand, one change at a time (Lease
		// cidrshift-flannel), checked before each transaction.
		l, err := o.lock.Lease(env.kube, flannel.LockScope)
		if err != nil {
			return err
		}
		if l != nil {
			ao.Lock = l
		}
	}
	if out.Mode != "plan" {
		res, err := env.reg.Apply(ctx, p, ao)
		out.Result, applyErr = res, err
	}
	if o.output != "text" {
		if err := cli.Write(w, o.output, out); err != nil {
			return err
		}
		return applyErr
	}
	fmt.Fprintf(w, "Plan: %s (etcd revision %d)\n", p.Description, p.Revision)
	for i, st := range p.Steps {
		switch st.Action {
		case flannel.ActionMoveLease:
			fmt.Fprintf(w, "  %d. move %s -> %s (mod revision %d, etcd lease %x kept)\n", i+1, st.Key, st.NewKey, st.ModRevision, st.LeaseID)
		case flannel.ActionDeleteLease:
			fmt.Fprintf(w, "  %d. delete %s (mod revision %d)\n", i+1, st.Key, st.ModRevision)
		default:
			fmt.Fprintf(w, "  %d. write %s (mod revision %d):\n", i+1, st.Key, st.ModRevision)
			for _, line := range strings.Split(strings.TrimSpace(st.Value), "\n") {
				fmt.Fprintf(w, "       %s\n", line)
			}
		}
		fmt.Fprintf(w, "     %s\n", st.Reason)
	}
	for _, wn := range p.Warnings {
		fmt.Fprintf(w, "Note: %s\n", wn)
	}
	switch len(out.Cleanup) {
	case 0:
	case 1:
		c := out.Cleanup[0]
		fmt.Fprintf(w, "\nHost clean-up for %s (%s, %s -> %s), after the change:\n", c.Node, c.PublicIP, c.From, c.To)
		printSteps(w, c.Steps)
	default:
		fmt.Fprintf(w, "\nHost clean-up, after the change, on each of these %d nodes (-o json lists the steps per node):\n", len(out.Cleanup))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range out.Cleanup {
			fmt.Fprintf(tw, "  %s\t%s\t%s -> %s\n", c.Node, c.PublicIP, c.From, c.To)
		}
		_ = tw.Flush()
		printSteps(w, flannel.CleanupSteps(flannel.CleanupOptions{BackendType: backend, Backend: backendRaw, IPv6: out.Cleanup[0].To.IPv6.IsValid()}))
	}
	fmt.Fprintln(w)
	if res, ok := out.Result.(*flannel.ApplyResult); ok && res != nil {
		for _, sr := range res.Steps {
			fmt.Fprintf(w, "step %d: %s", sr.Index+1, sr.Outcome)
			if sr.Error != "" {
				fmt.Fprintf(w, ": %s", sr.Error)
			}
			fmt.Fprintln(w)
		}
	}
	switch {
	case applyErr != nil:
	case out.Mode == "plan":
		fmt.Fprintln(w, "Nothing written: rerun with --apply to make these changes.")
	case out.Mode == "dry-run":
		fmt.Fprintln(w, "Dry run: nothing written.")
	default:
		fmt.Fprintln(w, "Done.")
	}
	return applyErr
}

func printSteps(w io.Writer, steps []flannel.HostStep) {
	for i, s := range steps {
		fmt.Fprintf(w, "  %d. [%s] %s\n       %s\n", i+1, s.Where, s.Command, s.Why)
	}
}

// ---- kube subnet manager mode ----

func executeKube(ctx context.Context, d deps, o options, pos []string, w io.Writer) error {
	kc, err := d.kube(o.kubeconfig, o.kubeContext)
	if err != nil {
		return err
	}
	ko := flannel.KubeOptions{Namespace: o.namespace, ConfigMap: o.configMap, AnnotationPrefix: o.annotationPrefix}
	nc, err := flannel.ReadNetConf(ctx, kc, ko)
	if errors.Is(err, flannel.ErrNotFound) {
		return usagef("--namespace %s --configmap %s: no such ConfigMap; give the namespace and name of flannel's net-conf.json", o.namespace, o.configMap)
	}
	if err != nil {
		return err
	}
	nodes, err := flannel.ReadNodes(ctx, kc, ko)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "show":
		if o.output != "text" {
			return cli.Write(w, o.output, struct {
				NetConf *flannel.NetConf `json:"netConf"`
				Nodes   []flannel.Node   `json:"nodes"`
			}{nc, nodes})
		}
		fmt.Fprintf(w, "ConfigMap %s/%s %s (resourceVersion %s):\n%s\n", nc.Namespace, nc.Name, nc.Key, nc.ResourceVersion, strings.TrimRight(nc.Raw, "\n"))
		if nc.Error != "" {
			fmt.Fprintf(w, "  cannot be parsed: %s\n", nc.Error)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tPODCIDRS\tBACKEND\tPUBLIC IP\tKUBE-SUBNET-MANAGER")
		for _, n := range nodes {
			var cidrs []string
			for _, p := range n.PodCIDRs {
				cidrs = append(cidrs, p.String())
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", n.Name, orDash(strings.Join(cidrs, ","), len(cidrs) > 0), orDash(n.BackendType, n.BackendType != ""),
				orDash(n.PublicIP.String(), n.PublicIP.IsValid()), n.KubeSubnetManager)
		}
		return tw.Flush()
	case "check":
		out := checkOutput{Report: flannel.AuditKube(nc, nodes)}
		if o.subnetEnv != "" {
			e, err := readSubnetEnv(o.subnetEnv)
			if err != nil {
				return err
			}
			want := flannel.SubnetEnvExpectation{Node: o.node, Source: "its podCIDR"}
			found := false
			for _, n := range nodes {
				if n.Name != o.node {
					continue
				}
				found = true
				for _, p := range n.PodCIDRs {
					if p.Addr().Is4() {
						want.Subnet.IPv4 = p
					} else {
						want.Subnet.IPv6 = p
					}
				}
			}
			if !found {
				return usagef("--node %q: no such node", o.node)
			}
			if nc.Config != nil {
				want.Network, want.IPv6Network = nc.Config.Network, nc.Config.IPv6Network
			}
			out.SubnetEnv = flannel.CheckSubnetEnv(e, want)
		}
		return printCheck(w, o, out, nil)
	default: // set-network (validate refused rm and move)
		req, err := parseNetworkArg(pos[1])
		if err != nil {
			return err
		}
		p, err := flannel.PlanNetConf(nc, req, nodes)
		if err != nil {
			return badRequest(err)
		}
		if len(p.NodesOutside) > 0 {
			// flanneld exits at its next start on a node whose podCIDR is
			// outside the Network: refuse the write, not warn after it.
			return usagef("set-network %s: node(s) %s have a podCIDR outside it; their flanneld would exit at its next start; move those podCIDRs first (see examples/noderecreate) or choose a Network containing them",
				pos[1], strings.Join(p.NodesOutside, ", "))
		}
		out := changeOutput{Plan: p, Mode: mode(o)}
		var applyErr error
		if out.Mode != "plan" {
			ko := flannel.KubeApplyOptions{DryRun: flannel.DryRun(o.dryRun)}
			if o.dryRun == "" {
				l, err := o.lock.Lease(kc, flannel.LockScope)
				if err != nil {
					return err
				}
				if l != nil {
					ko.Lock = l
				}
			}
			res, err := flannel.ApplyNetConf(ctx, kc, p, ko)
			out.Result, applyErr = res, err
		}
		if o.output != "text" {
			if err := cli.Write(w, o.output, out); err != nil {
				return err
			}
			return applyErr
		}
		fmt.Fprintf(w, "Plan: rewrite %s in ConfigMap %s/%s (resourceVersion %s):\n", p.Key, p.Namespace, p.Name, p.ResourceVersion)
		for _, line := range diffLines(p.OldRaw, p.NewRaw) {
			fmt.Fprintln(w, "  "+line)
		}
		for _, wn := range p.Warnings {
			fmt.Fprintf(w, "Note: %s\n", wn)
		}
		if len(p.NodesOutside) > 0 {
			fmt.Fprintf(w, "Nodes outside the new network: %s\n", strings.Join(p.NodesOutside, ", "))
		}
		if res, ok := out.Result.(*flannel.NetConfResult); ok && res != nil {
			fmt.Fprintf(w, "result: %s (resourceVersion %s)\n", res.Outcome, res.ResourceVersion)
		}
		switch {
		case applyErr != nil:
		case out.Mode == "plan":
			fmt.Fprintln(w, "Nothing written: rerun with --apply to make this change.")
		case out.Mode == "dry-run":
			fmt.Fprintln(w, "Dry run: nothing written.")
		default:
			fmt.Fprintln(w, "Done.")
		}
		return applyErr
	}
}

// diffLines shows the lines that differ between two texts of the same shape.
func diffLines(a, b string) []string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			if x != "" {
				out = append(out, "- "+x)
			}
			if y != "" {
				out = append(out, "+ "+y)
			}
		}
	}
	return out
}
