// Command nodenet-agent runs on every node (daemonset.yaml beside it) and
// carries out, with package nodenet, the host half of a migration: the
// runbooks publish what a node's host must hold on its Node (annotation
// hostplan.cidrshift.io/want), the agent audits the host, applies the plan
// in the order that keeps pods reachable, verifies, and reports on its Lease
// cidrshift-agent-<node> (annotation hostplan.cidrshift.io/status), which it
// renews while it runs so the runbook knows it is there. See the migrate
// package's HostAgents and Agent for the protocol.
//
//	nodenet-agent --node $(NODE_NAME) --host-root /host          # the DaemonSet
//	nodenet-agent --node w1 --once --request '{"generation":1,"want":{...}}'  # by hand, what a runbook printed
//
// --once carries out one round and exits: 0 converged, 1 failed, 3 deferred
// (pods still use an old range; run again once they moved), 2 bad input,
// 4 unreachable or forbidden. Without --once the agent runs until stopped.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/internal/cli"
	"github.com/cidrshift/cidrshift/migrate"
	"github.com/cidrshift/cidrshift/nodenet"
)

func main() {
	ctx, stop := cli.SignalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, connect)
	stop()
	os.Exit(code)
}

type connector func(ctx context.Context, kubeconfig, kubeContext string, progress io.Writer) (kubernetes.Interface, error)

func connect(ctx context.Context, kubeconfig, kubeContext string, progress io.Writer) (kubernetes.Interface, error) {
	cfg, err := cli.Connect(ctx, kubeconfig, kubeContext, progress)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// DefaultJournalDir is where the agent journals its changes on the host
// (below --host-root).
const DefaultJournalDir = "/var/lib/cidrshift/nodenet-agent"

var badInput = []error{migrate.ErrInvalidInput, nodenet.ErrInvalidInput, nodenet.ErrHostPathMissing, nodenet.ErrWrongNode, nodenet.ErrUnknownBackend, nodenet.ErrNoIPTables}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, conn connector) int {
	var (
		kubeconfig, kubeContext, hostRoot, request string
		once                                       bool
		a                                          migrate.Agent
	)
	fs := flag.NewFlagSet("nodenet-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster config, $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&kubeContext, "context", "", "kubeconfig context")
	fs.StringVar(&a.Node, "node", os.Getenv("NODE_NAME"), "the node this agent serves (default $NODE_NAME)")
	fs.StringVar(&a.Namespace, "namespace", migrate.DefaultAgentNamespace, "namespace of the agent's Lease")
	fs.StringVar(&a.Identity, "identity", os.Getenv("POD_NAME"), "the Lease's holder identity (default $POD_NAME, else the node)")
	fs.StringVar(&hostRoot, "host-root", "", "where the host's / is mounted (e.g. /host): run/flannel, var/lib/cni and etc/cni/net.d are read below it")
	fs.StringVar(&a.JournalDir, "journal-dir", "", "where each change to the host is journaled before it is made (default <host-root>/var/lib/cidrshift/nodenet-agent)")
	fs.StringVar(&a.Host.NetNS, "netns", "", "network namespace path to work in (default: the agent's own, the host's with hostNetwork)")
	fs.StringVar(&a.Host.IPTablesBackend, "iptables-backend", "", "nft or legacy (default: detected from the iptables binary)")
	fs.DurationVar(&a.Interval, "interval", 5*time.Second, "how often to renew the Lease, read the Node, retry deferred actions and verify a converged host")
	fs.BoolVar(&once, "once", false, "carry out one round and exit (exit 3 when actions are deferred)")
	fs.StringVar(&request, "request", "", "with --once: the request to carry out (JSON, or @FILE), instead of the Node's annotation")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fmt.Fprintln(stdout, "usage: nodenet-agent --node NAME [--host-root /host] [--once [--request JSON]]")
		fs.PrintDefaults()
		return cli.ExitOK
	}
	if err != nil {
		return cli.Fail(stderr, "nodenet-agent", cli.Usagef("%s", err))
	}
	if err := cli.NoArgs(fs); err != nil {
		return cli.Fail(stderr, "nodenet-agent", err)
	}
	if err := cli.NonNegative("interval", a.Interval); err != nil {
		return cli.Fail(stderr, "nodenet-agent", err)
	}
	if a.Node == "" {
		return cli.Fail(stderr, "nodenet-agent", cli.Usagef("--node is required (or $NODE_NAME): the node this agent serves"))
	}
	if request != "" && !once {
		return cli.Fail(stderr, "nodenet-agent", cli.Usagef("--request needs --once: a request given by hand is carried out once"))
	}
	if hostRoot != "" {
		if st, err := os.Stat(hostRoot); err != nil || !st.IsDir() {
			return cli.Fail(stderr, "nodenet-agent", cli.Usagef("--host-root %s: not a directory", hostRoot))
		}
		a.Host.RunFlannelDir = filepath.Join(hostRoot, nodenet.DefaultRunFlannelDir)
		a.Host.CNIDataDir = filepath.Join(hostRoot, nodenet.DefaultCNIDataDir)
		a.Host.CNIConfDir = filepath.Join(hostRoot, nodenet.DefaultCNIConfDir)
	}
	if a.JournalDir == "" {
		a.JournalDir = filepath.Join(hostRoot, DefaultJournalDir)
	}
	var req *migrate.HostRequest
	if request != "" {
		if req, err = readRequest(request); err != nil {
			return cli.Fail(stderr, "nodenet-agent", err)
		}
	}
	ctx = logr.NewContext(ctx, funcr.New(func(prefix, args string) { fmt.Fprintln(stderr, prefix, args) }, funcr.Options{Verbosity: 1}))
	a.Kube, err = conn(ctx, kubeconfig, kubeContext, stderr)
	if err == nil {
		err = a.Check(ctx)
	}
	if err != nil {
		return cli.Fail(stderr, "nodenet-agent", err, badInput...)
	}
	if !once {
		fmt.Fprintf(stderr, "nodenet-agent: serving node %s (Lease %s/%s%s)\n", a.Node, a.Namespace, migrate.AgentLeasePrefix, a.Node)
		if err := a.Run(ctx); err != nil {
			return cli.Fail(stderr, "nodenet-agent", err, badInput...)
		}
		return cli.ExitOK
	}
	var st *migrate.HostStatus
	if req != nil {
		st, err = a.Carry(ctx, *req)
	} else {
		st, err = a.Once(ctx)
	}
	if err != nil {
		return cli.Fail(stderr, "nodenet-agent", err, badInput...)
	}
	if st == nil {
		fmt.Fprintf(stdout, "node %s: no request\n", a.Node)
		return cli.ExitOK
	}
	fmt.Fprintf(stdout, "node %s: generation %d %s\n", a.Node, st.Generation, st.Phase)
	for _, l := range append(append(st.Actions, st.Findings...), st.Error) {
		if l != "" {
			fmt.Fprintln(stdout, "  "+l)
		}
	}
	switch st.Phase {
	case migrate.HostFailed:
		return cli.ExitProblems
	case migrate.HostDeferred:
		return cli.ExitWaiting
	}
	return cli.ExitOK
}

// readRequest reads --request: JSON, or @FILE holding it.
func readRequest(v string) (*migrate.HostRequest, error) {
	data := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return nil, cli.Usagef("--request %s: %v", v, err)
		}
	}
	var req migrate.HostRequest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, cli.Usagef("--request %s: not a host request: %v", cli.OneLine(errors.New(v)), err)
	}
	return &req, nil
}
