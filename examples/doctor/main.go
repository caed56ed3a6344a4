// Command doctor audits every layer of a cluster's addressing in one report
// (migrate.Diagnose): node podCIDRs and pod IPs, flannel's net-conf.json and
// node annotations, Calico pools and blocks, Services and ServiceCIDRs, and
// the settings of kube-proxy, the kubelet, kubeadm and the control plane;
// whether kube-controller-manager starts with its current flags (and with
// proposed ones); and the plan that fixes what is broken.
//
//	doctor                                   # the bundled sample: seed 001's chain in the second story's cluster
//	doctor --kubeconfig ~/.kube/config       # a live cluster (paginated lists only)
//	kubectl get nodes,pods,services,configmaps -A -o yaml | doctor -f -
//	doctor -f dump.yaml -f calico.yaml       # several dumps (IPPools, IPAMBlocks, ServiceCIDRs too)
//	doctor -f ./cluster-info                 # the directory of kubectl cluster-info dump --output-directory
//	doctor -o svg > map.svg                  # an address map of the ranges, problems marked
//	doctor --context prod --new-cluster-cidr 10.20.0.0/16   # would this change crash kube-controller-manager?
//
// Exit status: 0 healthy, 1 problems found, 2 bad input (every flag is
// checked before anything is read), 4 cluster unreachable or access forbidden.
package main

//go:generate go run ./sample/gen.go -o sample/cluster.yaml

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/migrate"
)

// sampleCluster is the bundled sample dump; sample/gen.go writes it.
//
//go:embed sample/cluster.yaml
var sampleCluster []byte

func main() {
	ctx, stop := cli.SignalContext()
	code := runCtx(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it parses args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return runCtx(context.Background(), args, stdout, stderr)
}

func runCtx(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdin: os.Stdin, connect: func(kubeconfig, kubecontext string) (kubernetes.Interface, dynamic.Interface, error) {
		cfg, err := cli.Connect(ctx, kubeconfig, kubecontext, stderr)
		if err != nil {
			return nil, nil, err
		}
		cfg.QPS, cfg.Burst = 50, 100
		cfg.UserAgent = "cidrshift-doctor"
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, nil, err
		}
		dyn, err := dynamic.NewForConfig(cfg)
		return kube, dyn, err
	}}
	return a.run(ctx, args, stdout, stderr)
}

type app struct {
	connect func(kubeconfig, kubecontext string) (kubernetes.Interface, dynamic.Interface, error)
	stdin   io.Reader
}

func bad(format string, args ...any) error { return cli.Usagef(format, args...) }

// errProblems means the audit found problems (exit status 1, nothing more to say).
var errProblems = errors.New("problems found")

// files is a repeatable -f.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

type options struct {
	files                       files
	kubeconfig, kubecontext     string
	clusterCIDR, nodeMask       string
	serviceCIDR                 string
	newClusterCIDR, newNodeMask string
	pods                        bool
	output                      string
	set                         map[string]bool
}

func (a *app) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = a.execute(ctx, o, stdout)
	}
	if errors.Is(err, errProblems) {
		return cli.ExitProblems // the report says what
	}
	return cli.Fail(stderr, "doctor", err, migrate.ErrNoFlags, migrate.ErrProposedRefused)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{set: map[string]bool{}}
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is one line; -h prints the usage below
	fs.Var(&o.files, "f", "audit an offline dump, repeatable: kubectl get nodes,pods,services,configmaps -A -o yaml|json (- for stdin), a dump of Calico IPPools/IPAMBlocks or ServiceCIDRs, or a kubectl cluster-info dump directory; streamed, any size")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "audit the cluster of this kubeconfig")
	fs.StringVar(&o.kubecontext, "context", "", "audit the cluster of this kubeconfig context")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "kube-controller-manager's current --cluster-cidr (read from its pod or kubeadm-config when omitted)")
	fs.StringVar(&o.nodeMask, "node-mask", "", "its current --node-cidr-mask-size (one value, or IPv4,IPv6 for dual stack; default 24 / 64)")
	fs.StringVar(&o.serviceCIDR, "service-cidr", "", "its current --service-cluster-ip-range")
	fs.StringVar(&o.newClusterCIDR, "new-cluster-cidr", "", "a proposed --cluster-cidr: would kube-controller-manager start with it?")
	fs.StringVar(&o.newNodeMask, "new-node-mask", "", "a proposed --node-cidr-mask-size (default: the current one)")
	fs.BoolVar(&o.pods, "pods", true, "also check pod IPs (against their node's podCIDR, or the Calico pools)")
	fs.StringVar(&o.output, "o", "text", "output format: text, json, yaml or svg (an address map)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
			return nil, err
		}
		return nil, bad("%v", err)
	}
	if err := cli.NoArgs(fs); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if err := cli.CheckFormat(o.output); err != nil && o.output != "svg" {
		return nil, bad("-o %q: want text, json, yaml or svg", o.output)
	}
	for _, f := range o.files {
		if strings.TrimSpace(f) == "" {
			return nil, bad("-f %q: must not be empty", f)
		}
	}
	for _, name := range []string{"kubeconfig", "context", "cluster-cidr", "node-mask", "service-cidr", "new-cluster-cidr", "new-node-mask"} {
		if v := fs.Lookup(name).Value.String(); o.set[name] && strings.TrimSpace(v) == "" {
			return nil, bad("--%s %q: must not be empty", name, v)
		}
	}
	// The current flags are parsed leniently, as kube-controller-manager
	// reads them; proposed ones strictly. Pairs: cidr.CheckLayout.
	for name, v := range map[string]string{"--cluster-cidr": o.clusterCIDR, "--service-cidr": o.serviceCIDR} {
		for _, item := range strings.Split(v, ",") {
			if _, _, err := cidr.ParseLenient(strings.TrimSpace(item)); v != "" && err != nil {
				return nil, bad("%s %q: %v", name, v, err)
			}
		}
	}
	if _, err := cidr.ParseList(o.newClusterCIDR); o.newClusterCIDR != "" && err != nil {
		return nil, bad("--new-cluster-cidr: %v", err)
	}
	for name, v := range map[string]string{"--node-mask": o.nodeMask, "--new-node-mask": o.newNodeMask} {
		for _, m := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(m)); v != "" && (err != nil || n < 1 || n > 128) {
				return nil, bad("%s %q: %q is not a prefix length (1 to 32 for IPv4, to 128 for IPv6)", name, v, m)
			}
		}
	}
	if len(o.files) > 0 && (o.set["kubeconfig"] || o.set["context"]) {
		return nil, bad("-f and --kubeconfig/--context exclude each other: audit a dump or a cluster")
	}
	if o.newNodeMask != "" && o.newClusterCIDR == "" {
		return nil, bad("--new-node-mask needs --new-cluster-cidr")
	}
	return o, nil
}

func (a *app) execute(ctx context.Context, o *options, stdout io.Writer) error {
	var snap *migrate.Snapshot
	var err error
	header := ""
	switch {
	case len(o.files) > 0:
		if snap, err = migrate.ReadSnapshotFiles(ctx, o.files, a.stdin); err != nil {
			return bad("-f: %v", err)
		}
		snap.Source = "file " + snap.Source
		if len(snap.Nodes) == 0 {
			return bad("-f %s holds no Node; want the output of kubectl get nodes -o yaml", o.files)
		}
	case o.set["kubeconfig"] || o.set["context"]:
		kube, dyn, err := a.connect(o.kubeconfig, o.kubecontext)
		if err != nil {
			return err
		}
		if snap, err = migrate.LoadSnapshot(ctx, kube, dyn); err != nil {
			return err
		}
		if o.kubecontext != "" {
			snap.Source += " " + o.kubecontext
		}
	default:
		if snap, err = migrate.ReadSnapshot(ctx, migrate.Input{Name: "sample", R: bytes.NewReader(sampleCluster)}); err != nil {
			return fmt.Errorf("the bundled sample is broken: %w", err)
		}
		header = "cidrshift doctor: the bundled sample cluster (the second field story's 300 flannel nodes with seed 001's chain: duplicate podCIDRs, a host-gw node in a vxlan cluster, kube-proxy disagreeing)\n  audit yours with --kubeconfig FILE, --context NAME, or -f dump.yaml"
	}
	dopts := migrate.DoctorOptions{Pods: o.pods}
	if o.clusterCIDR != "" || o.nodeMask != "" || o.serviceCIDR != "" {
		if o.clusterCIDR == "" {
			return bad("--node-mask and --service-cidr need --cluster-cidr")
		}
		f := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: o.clusterCIDR, ServiceClusterIPRange: o.serviceCIDR}
		if err := setMasks(&f, o.nodeMask, "--node-mask"); err != nil {
			return err
		}
		if check := cidr.CheckLayout(f); check.Refused {
			return bad("--cluster-cidr %q --node-mask %q --service-cidr %q: kube-controller-manager would refuse %s: %v", o.clusterCIDR, o.nodeMask, o.serviceCIDR,
				strings.Join(f.Args(), " "), errors.Join(check.Errors...))
		}
		dopts.Flags, dopts.FlagsSource = &f, "command line"
	}
	if o.newClusterCIDR != "" {
		// The proposed mask defaults to the current one, wherever it was read.
		dopts.Propose = func(cur cidr.ControllerManagerFlags) (cidr.ControllerManagerFlags, error) {
			p := cur
			p.ClusterCIDR = o.newClusterCIDR
			mask, name := o.newNodeMask, "--new-node-mask"
			if mask == "" {
				mask, name = maskOf(cur), "--node-mask"
			}
			p.NodeCIDRMaskSize, p.NodeCIDRMaskSizeIPv4, p.NodeCIDRMaskSizeIPv6 = 0, 0, 0
			return p, setMasks(&p, mask, name)
		}
	}
	rep, err := migrate.Diagnose(ctx, snap, dopts)
	switch {
	case errors.Is(err, migrate.ErrNoFlags):
		return bad("--cluster-cidr is required: %v", err)
	case errors.Is(err, migrate.ErrProposedRefused):
		return bad("--new-cluster-cidr %q --new-node-mask %q: %v", o.newClusterCIDR, o.newNodeMask, err)
	case err != nil:
		return err
	}
	switch o.output {
	case "json", "yaml":
		err = cli.Write(stdout, o.output, rep)
	case "svg":
		err = migrate.WriteAddressMapSVG(stdout, rep)
	default:
		if header == "" {
			header = "cidrshift doctor: " + rep.Source
		}
		migrate.WriteDoctorText(stdout, rep, header)
	}
	if err != nil {
		return err
	}
	if !rep.Healthy {
		return errProblems
	}
	return nil
}

func maskOf(f cidr.ControllerManagerFlags) string {
	switch {
	case f.NodeCIDRMaskSize != 0:
		return strconv.Itoa(f.NodeCIDRMaskSize)
	case f.NodeCIDRMaskSizeIPv4 != 0 && f.NodeCIDRMaskSizeIPv6 != 0:
		return fmt.Sprintf("%d,%d", f.NodeCIDRMaskSizeIPv4, f.NodeCIDRMaskSizeIPv6)
	}
	return ""
}

// setMasks sets the mask flags of f from "24" or "24,64" (one per cluster CIDR).
func setMasks(f *cidr.ControllerManagerFlags, mask, flagName string) error {
	if mask == "" {
		return nil
	}
	cs, ms := strings.Split(f.ClusterCIDR, ","), strings.Split(mask, ",")
	if len(ms) != len(cs) {
		if len(ms) == 1 && len(cs) == 2 {
			return bad("%s %q: a dual-stack cluster CIDR needs one mask per family, e.g. 24,64", flagName, mask)
		}
		return bad("%s %q: want %d value(s), one per cluster CIDR %s", flagName, mask, len(cs), f.ClusterCIDR)
	}
	for i, m := range ms {
		n, _ := strconv.Atoi(strings.TrimSpace(m)) // checked by parseFlags
		if len(cs) == 1 {
			f.NodeCIDRMaskSize = n
			return nil
		}
		p, _, err := cidr.ParseLenient(strings.TrimSpace(cs[i]))
		if err != nil {
			return bad("cluster CIDR %q: %v", cs[i], err)
		}
		if cidr.FamilyOf(p) == cidr.IPv4 {
			f.NodeCIDRMaskSizeIPv4 = n
		} else {
			f.NodeCIDRMaskSizeIPv6 = n
		}
	}
	return nil
}
