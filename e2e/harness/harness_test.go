package harness

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

func TestParseK8sVersion(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		staging string
		wantErr string
	}{
		{in: "1.36.3", want: "1.36.3", staging: "v0.36.3"},
		{in: "v1.32.13", want: "1.32.13", staging: "v0.32.13"},
		{in: " 1.30.14 ", want: "1.30.14", staging: "v0.30.14"},
		{in: "1.36", wantErr: "MAJOR.MINOR.PATCH"},
		{in: "1.36.3-rc", wantErr: "not a plain non-negative number"},
		{in: "1.036.3", wantErr: "not a plain non-negative number"},
		{in: "2.0.0", wantErr: "supports 1.27 and later"},
		{in: "1.20.0", wantErr: "supports 1.27 and later"},
		{in: "", wantErr: "MAJOR.MINOR.PATCH"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			v, err := parseK8sVersion(tc.in)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, v.String())
			assert.Equal(t, "v"+tc.want, v.tag())
			assert.Equal(t, tc.staging, v.staging())
		})
	}
}

func TestK8sVersionFromEnv(t *testing.T) {
	t.Setenv(K8sVersionEnv, "")
	assert.Equal(t, DefaultK8sVersion, K8sVersionFromEnv())
	t.Setenv(K8sVersionEnv, "1.32.13")
	assert.Equal(t, "1.32.13", K8sVersionFromEnv())
}

func TestMergeFlags(t *testing.T) {
	base := []string{"--a=1", "--b=2", "-v=2", "positional"}
	got := mergeFlags(base, []string{"--b=3", "--c", "--a=9", "-v=4", "other"})
	assert.Equal(t, []string{"positional", "--b=3", "--c", "--a=9", "-v=4", "other"}, got)
	assert.Equal(t, []string{"--a=1", "--b=2", "-v=2", "positional"}, base, "base not modified")
	// Later overrides win over earlier ones.
	assert.Equal(t, []string{"--x=2"}, mergeFlags(nil, []string{"--x=1", "--x=2"}))
	assert.Equal(t, "cluster-cidr", flagName("--cluster-cidr=10.0.0.0/8"))
	assert.Equal(t, "", flagName("-"))
	assert.Equal(t, "", flagName("value"))
}

const upstreamGoMod = `module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0
	go.etcd.io/etcd/server/v3 v3.5.21
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	example.com/forked v1.0.0 => example.com/fork v1.0.1
)
`

func TestK8sToolsGoMod(t *testing.T) {
	up, err := modfile.Parse("go.mod", []byte(upstreamGoMod), nil)
	require.NoError(t, err)
	ver, err := parseK8sVersion("1.32.13")
	require.NoError(t, err)
	data, err := k8sToolsGoMod(ver, up)
	require.NoError(t, err)
	got, err := modfile.Parse("generated/go.mod", data, nil)
	require.NoError(t, err, "generated go.mod:\n%s", data)
	assert.Equal(t, "1.24.0", got.Go.Version)
	require.Len(t, got.Godebug, 1)
	assert.Equal(t, "default", got.Godebug[0].Key)
	require.Len(t, got.Require, 1)
	assert.Equal(t, "k8s.io/kubernetes", got.Require[0].Mod.Path)
	assert.Equal(t, "v1.32.13", got.Require[0].Mod.Version)
	replaced := map[string]string{}
	for _, r := range got.Replace {
		replaced[r.Old.Path] = r.New.Path + "@" + r.New.Version
	}
	assert.Equal(t, map[string]string{
		"k8s.io/api":         "k8s.io/api@v0.32.13",
		"k8s.io/client-go":   "k8s.io/client-go@v0.32.13",
		"example.com/forked": "example.com/fork@v1.0.1",
	}, replaced)

	bare, err := modfile.Parse("go.mod", []byte("module k8s.io/kubernetes\n\ngo 1.24\n"), nil)
	require.NoError(t, err)
	_, err = k8sToolsGoMod(ver, bare)
	assert.ErrorContains(t, err, "no ./staging/src replace directives")
}

func TestRecipesDiffer(t *testing.T) {
	v1, _ := parseK8sVersion("1.36.3")
	v2, _ := parseK8sVersion("1.32.13")
	r1, err := k8sRecipe(v1, "/x")
	require.NoError(t, err)
	r2, err := k8sRecipe(v2, "/x")
	require.NoError(t, err)
	assert.NotEqual(t, r1.recipeKey("go1.26.8"), r2.recipeKey("go1.26.8"))
	assert.NotEqual(t, r1.recipeKey("go1.26.8"), r1.recipeKey("go1.27.0"))
	assert.Equal(t, r1.recipeKey("go1.26.8"), r1.recipeKey("go1.26.8"))
	assert.Contains(t, r1.ldflags, "k8s.io/component-base/version.gitVersion=v1.36.3")
	assert.Contains(t, string(r1.files["tools.go"]), `_ "k8s.io/kubernetes/cmd/kube-apiserver"`)
}

func TestBinUpToDate(t *testing.T) {
	dir := t.TempDir()
	assert.False(t, binUpToDate(dir, "k", []string{"a"}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".recipe"), []byte("k\n"), 0o644))
	assert.False(t, binUpToDate(dir, "k", []string{"a"}), "output missing")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), nil, 0o755))
	assert.True(t, binUpToDate(dir, "k", []string{"a"}))
	assert.False(t, binUpToDate(dir, "other", []string{"a"}), "recipe changed")
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv(CacheDirEnv, "")
	dir, err := DefaultCacheDir()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "go.mod"))
	require.NoError(t, err)
	assert.Equal(t, e2eModulePath, modfile.ModulePath(data))
	assert.Equal(t, ".cache", filepath.Base(dir))

	t.Setenv(CacheDirEnv, "/tmp/somewhere")
	dir, err = DefaultCacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/tmp/somewhere", dir)
}

func TestLockFileSerializes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lockFile(t.Context(), path, nil)
	require.NoError(t, err)

	// A second holder waits, and gives up when its context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	waited := false
	_, err = lockFile(ctx, path, func() { waited = true })
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, waited)

	// Once released, it gets the lock.
	unlock()
	unlock2, err := lockFile(t.Context(), path, nil)
	require.NoError(t, err)
	unlock2()
}

func TestPKI(t *testing.T) {
	p, err := newPKI(t.TempDir(), net.ParseIP("10.96.0.1"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)

	certPEM, _, err := p.clientCert("alice", []string{"dev", "ops"})
	require.NoError(t, err)
	cert := parseCert(t, certPEM)
	assert.Equal(t, "alice", cert.Subject.CommonName)
	assert.Equal(t, []string{"dev", "ops"}, cert.Subject.Organization)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err)

	servingPEM, err := os.ReadFile(p.ServingCertFile)
	require.NoError(t, err)
	serving := parseCert(t, servingPEM)
	for _, name := range []string{"127.0.0.1", "localhost", "10.96.0.1", "kubernetes.default.svc"} {
		_, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: name})
		assert.NoError(t, err, "serving cert for %s", name)
	}

	_, _, err = p.clientCert("", nil)
	assert.Error(t, err)
	for _, f := range []string{p.CAFile, p.CAKeyFile, p.SAKeyFile, p.SAPubFile, p.ServingKeyFile} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

func TestOptionsComplete(t *testing.T) {
	var o Options
	require.NoError(t, o.complete())
	assert.Equal(t, DefaultClusterCIDR, o.ClusterCIDR)
	assert.Equal(t, DefaultServiceCIDR, o.ServiceCIDR)
	assert.Equal(t, 24, o.NodeCIDRMaskSize)
	assert.Equal(t, K8sVersionFromEnv(), o.K8sVersion)

	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"bad cluster cidr", Options{ClusterCIDR: "10.0.0.0/33"}, "ClusterCIDR"},
		{"three cidrs", Options{ClusterCIDR: "10.0.0.0/8,fd00::/48,10.1.0.0/16"}, "at most two"},
		{"bad service cidr", Options{ServiceCIDR: "nope"}, "ServiceCIDR"},
		{"bad mask", Options{NodeCIDRMaskSize: 40}, "NodeCIDRMaskSize"},
		{"bad version", Options{K8sVersion: "latest"}, "MAJOR.MINOR.PATCH"},
		{"unknown component", Options{Disable: []Component{"kubelet"}}, "unknown component"},
		{"unknown flags component", Options{ExtraFlags: map[Component][]string{"kubelet": {"--x"}}}, "unknown component"},
		{"dependency", Options{Disable: []Component{APIServer}}, "kube-controller-manager needs kube-apiserver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.complete()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// Host bits are accepted, as kube-controller-manager accepts them.
	o = Options{ClusterCIDR: "10.244.0.0/12"}
	assert.NoError(t, o.complete())
}

func TestNodeMaskFlags(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		want []string
	}{
		{"10.244.0.0/16", []string{"--node-cidr-mask-size=24"}},
		{"fd00:10:244::/56", []string{"--node-cidr-mask-size=64"}},
		{"10.244.0.0/16,fd00:10:244::/56", []string{"--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64"}},
	} {
		o := Options{ClusterCIDR: tc.cidr}
		require.NoError(t, o.complete())
		c := &Cluster{opts: o}
		assert.Equal(t, tc.want, c.nodeMaskFlags(), tc.cidr)
	}
}

func TestTailLines(t *testing.T) {
	assert.Equal(t, "c\nd", tailLines("a\nb\nc\nd\n", 2))
	assert.Equal(t, "a\nb", tailLines("a\nb", 5))
	assert.Equal(t, "", tailLines("", 3))
}

func TestProcessExitAndStop(t *testing.T) {
	logFile, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer logFile.Close()

	p, err := startProcess("/bin/sh", []string{"-c", "echo hello; exit 3"}, os.Environ(), logFile)
	require.NoError(t, err)
	<-p.done
	st := p.status()
	assert.True(t, st.Exited)
	assert.Equal(t, 3, st.ExitCode)
	assert.Equal(t, "exited with status 3", strings.Split(st.String(), " after")[0])

	// A process ignoring SIGTERM is SIGKILLed after the grace period.
	p, err = startProcess("/bin/sh", []string{"-c", "trap '' TERM; while :; do sleep 0.1; done"}, os.Environ(), logFile)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	start := time.Now()
	require.NoError(t, p.stop(300*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	assert.Equal(t, syscall.SIGKILL, p.status().Signal)

	_, err = startProcess("/nonexistent/binary", nil, nil, logFile)
	assert.Error(t, err)
}

// TestChildrenDieWithHarness re-runs this test binary as a child that
// starts a long sleep through the harness and then exits abruptly; the
// sleep must not outlive it (Pdeathsig).
func TestChildrenDieWithHarness(t *testing.T) {
	if os.Getenv("HARNESS_PDEATHSIG_CHILD") == "1" {
		// The parent's t.TempDir: the child exits without cleaning up.
		logFile, err := os.Create(os.Getenv("HARNESS_PDEATHSIG_LOG"))
		if err != nil {
			os.Exit(2)
		}
		p, err := startProcess("/bin/sleep", []string{"300"}, os.Environ(), logFile)
		if err != nil {
			os.Exit(2)
		}
		fmt.Println("PID", p.cmd.Process.Pid)
		os.Exit(0) // no cleanup: as if the test binary crashed
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithHarness$")
	cmd.Env = append(os.Environ(), "HARNESS_PDEATHSIG_CHILD=1", "HARNESS_PDEATHSIG_LOG="+filepath.Join(t.TempDir(), "child.log"))
	out, err := cmd.Output()
	require.NoError(t, err, "child: %s", out)
	var pid int
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PID "); ok {
			pid, err = strconv.Atoi(rest)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, pid, "child output: %s", out)
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("pid %d outlived the process that started it", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Format: pid (comm) state ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestPortRaceRetry gives etcd a client port someone else holds: the start
// fails with "address already in use" and is retried on fresh ports.
func TestPortRaceRetry(t *testing.T) {
	c := etcdOnly(t)

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	c.comps[Etcd].ports["client"] = taken.Addr().(*net.TCPAddr).Port

	require.NoError(t, c.startAll(t.Context()))
	st := c.Status(Etcd)
	assert.True(t, st.Running)
	assert.Equal(t, 2, st.Starts)
	assert.Contains(t, c.Logs(Etcd), "address already in use")
	assert.NotEqual(t, taken.Addr().(*net.TCPAddr).Port, c.comps[Etcd].ports["client"])
	_, statErr := os.Stat(c.Dir())
	require.NoError(t, statErr)
	require.NoError(t, c.Close())
	_, statErr = os.Stat(c.Dir())
	assert.True(t, os.IsNotExist(statErr), "cluster dir removed")
}

// etcdOnly prepares, without starting it, a cluster of etcd alone.
func etcdOnly(t *testing.T) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the etcd binary; skipped with -short")
	}
	opts := Options{Disable: []Component{APIServer, ControllerManager, Scheduler, Kwok}, Logf: t.Logf}
	require.NoError(t, opts.complete())
	bins, err := EnsureBinaries(t.Context(), BuildOptions{Logf: t.Logf})
	require.NoError(t, err)
	c, err := prepare(opts, bins)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// TestPortRaceWithAnImpostor: the port given to etcd was taken by a server
// that answers etcd's health check (another test's control plane). The
// harness must not take that answer for etcd's: it starts etcd again on
// new ports.
func TestPortRaceWithAnImpostor(t *testing.T) {
	c := etcdOnly(t)

	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"health":"true","reason":""}`)
	}))
	defer impostor.Close()
	port := impostor.Listener.Addr().(*net.TCPAddr).Port
	c.comps[Etcd].ports["client"] = port

	require.NoError(t, c.startAll(t.Context()))
	st := c.Status(Etcd)
	assert.True(t, st.Running, "etcd runs: the impostor's answer was not taken for its own")
	assert.Equal(t, 2, st.Starts)
	assert.NotEqual(t, port, c.comps[Etcd].ports["client"])
}

func TestSweepStaleDirs(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name, owner string, kept bool) string {
		dir := filepath.Join(tmp, clusterDirPrefix+name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "etcd"), 0o755))
		if owner != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644))
		}
		if kept {
			require.NoError(t, os.WriteFile(filepath.Join(dir, keepFile), nil, 0o644))
		}
		return dir
	}
	// A PID that is certainly dead: a finished child's.
	cmd := exec.Command("/bin/true")
	require.NoError(t, cmd.Run())
	dead := strconv.Itoa(cmd.Process.Pid)

	stale := mk("stale", dead, false)
	live := mk("live", strconv.Itoa(os.Getpid()), false)
	kept := mk("kept", dead, true)
	unowned := mk("unowned", "", false)
	other := filepath.Join(tmp, "unrelated")
	require.NoError(t, os.MkdirAll(other, 0o755))

	assert.Equal(t, 1, sweepStaleDirs(tmp))
	assert.NoDirExists(t, stale)
	for _, d := range []string{live, kept, unowned, other} {
		assert.DirExists(t, d)
	}
}
