package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	"golang.org/x/mod/modfile"
)

// recipeRevision changes whenever the way binaries are built changes, so
// that caches built by an older harness are rebuilt.
const recipeRevision = "3"

// e2eModulePath is the module path of the e2e module; its go.mod marks the
// directory under which the default cache lives.
const e2eModulePath = "github.com/cidrshift/cidrshift/e2e"

// CacheDirEnv names the environment variable that overrides the binary cache
// directory (default: <e2e module>/.cache).
const CacheDirEnv = "E2E_CACHE_DIR"

var (
	//go:embed assets/etcd_main.go.tmpl
	etcdMainSource []byte
	//go:embed assets/tools.go.tmpl
	toolsTemplateText string
	toolsTemplate     = template.Must(template.New("tools.go").Parse(toolsTemplateText))
)

// k8sPackages are the programs built from k8s.io/kubernetes, by binary name.
var k8sPackages = []string{
	"k8s.io/kubernetes/cmd/kube-apiserver",
	"k8s.io/kubernetes/cmd/kube-controller-manager",
	"k8s.io/kubernetes/cmd/kube-scheduler",
	"k8s.io/kubernetes/cmd/kubectl",
	"k8s.io/kubernetes/cmd/kube-proxy",
}

// kwokStageFiles are the stage definitions, relative to the kwok module root,
// that make up kwok's "fast" profile plus node lease heartbeats: nodes become
// Ready at once, pods become Running with an IP from their node's podCIDR and
// are removed when deleted.
var kwokStageFiles = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// Binaries holds absolute paths of the programs a Cluster runs.
type Binaries struct {
	// K8sVersion is the Kubernetes release the binaries were built from,
	// without a leading "v".
	K8sVersion string
	// Dir is the directory holding the Kubernetes and etcd binaries:
	// <cache>/<K8sVersion>/bin.
	Dir                   string
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Kubectl               string
	// KubeProxy is kube-proxy, run by the data-plane tests in each node
	// network namespace.
	KubeProxy string
	// Kwok is the kwok controller, built once for all Kubernetes versions
	// into <cache>/kwok-<KwokVersion>/bin.
	Kwok string
	// KwokStages is a multi-document YAML file of kwok Stage objects,
	// passed to kwok with --config.
	KwokStages string
}

// BuildOptions configures EnsureBinaries. The zero value builds
// K8sVersionFromEnv() into DefaultCacheDir().
type BuildOptions struct {
	// K8sVersion selects the Kubernetes release, e.g. "1.36.3" or "v1.32.13".
	K8sVersion string
	// CacheDir is the root of the binary cache.
	CacheDir string
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// DefaultCacheDir returns $E2E_CACHE_DIR if set, else the .cache directory of
// the e2e module, found by walking up from the working directory (or, failing
// that, from this source file) to the go.mod that declares the e2e module.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(CacheDirEnv); d != "" {
		return filepath.Abs(d)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && modfile.ModulePath(data) == e2eModulePath {
				return filepath.Join(dir, ".cache"), nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return "", fmt.Errorf("cannot find the %s module above %v; set %s", e2eModulePath, starts, CacheDirEnv)
}

// EnsureBinaries returns the binaries for the requested Kubernetes version,
// building them first if the cache does not hold them yet. The first build
// of a version compiles kube-apiserver, kube-controller-manager,
// kube-scheduler, kubectl and etcd from Go modules (several minutes on two
// cores); kwok is built once for all versions. A file lock per cache entry
// makes concurrent callers, including other processes, wait for a single
// build instead of repeating it.
func EnsureBinaries(ctx context.Context, opts BuildOptions) (*Binaries, error) {
	if opts.K8sVersion == "" {
		opts.K8sVersion = K8sVersionFromEnv()
	}
	ver, err := parseK8sVersion(opts.K8sVersion)
	if err != nil {
		return nil, err
	}
	if opts.CacheDir == "" {
		if opts.CacheDir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	if opts.CacheDir, err = filepath.Abs(opts.CacheDir); err != nil {
		return nil, fmt.Errorf("cache dir %q: %w", opts.CacheDir, err)
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	g, err := newGoTool(ctx)
	if err != nil {
		return nil, err
	}

	k8sDir := filepath.Join(opts.CacheDir, ver.String())
	k8s, err := k8sRecipe(ver, k8sDir)
	if err != nil {
		return nil, err
	}
	if err := ensureModuleBuild(ctx, g, logf, k8s); err != nil {
		return nil, err
	}
	kwokDir := filepath.Join(opts.CacheDir, "kwok-"+KwokVersion)
	kwok, err := kwokRecipe(kwokDir)
	if err != nil {
		return nil, err
	}
	if err := ensureModuleBuild(ctx, g, logf, kwok); err != nil {
		return nil, err
	}
	bin := filepath.Join(k8sDir, "bin")
	return &Binaries{
		K8sVersion:            ver.String(),
		Dir:                   bin,
		Etcd:                  filepath.Join(bin, "etcd"),
		KubeAPIServer:         filepath.Join(bin, "kube-apiserver"),
		KubeControllerManager: filepath.Join(bin, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(bin, "kube-scheduler"),
		Kubectl:               filepath.Join(bin, "kubectl"),
		KubeProxy:             filepath.Join(bin, "kube-proxy"),
		Kwok:                  filepath.Join(kwokDir, "bin", "kwok"),
		KwokStages:            filepath.Join(kwokDir, "bin", "kwok-stages.yaml"),
	}, nil
}

// moduleRecipe describes one generated build module under the cache.
type moduleRecipe struct {
	// name is used in messages, e.g. "Kubernetes v1.36.3".
	name string
	// dir is the cache entry: dir/src holds the generated module, dir/bin
	// the finished binaries, dir/build.log the go command output.
	dir string
	// upstream is the module@version whose go.mod seeds ours.
	upstream string
	// genGoMod renders our go.mod from the upstream go.mod.
	genGoMod func(upstream *modfile.File) ([]byte, error)
	// files are further files of the generated module, relative to src.
	files map[string][]byte
	// packages are built into bin with one `go build -o bin/`.
	packages []string
	// ldflags are passed to go build.
	ldflags string
	// outputs are the file names bin must contain when done.
	outputs []string
	// finish runs after the build with the upstream module directory and
	// the new bin directory, to add non-Go outputs.
	finish func(upstreamDir, binDir string) error
}

// k8sRecipe builds kube-apiserver, kube-controller-manager, kube-scheduler,
// kubectl and etcd from one module that requires k8s.io/kubernetes and pins
// every staging module to the matching v0.x release.
func k8sRecipe(ver k8sVersion, dir string) (moduleRecipe, error) {
	var tools bytes.Buffer
	pkgs := append(slices.Clone(k8sPackages), "go.etcd.io/etcd/server/v3/etcdmain")
	slices.Sort(pkgs)
	if err := toolsTemplate.Execute(&tools, pkgs); err != nil {
		return moduleRecipe{}, fmt.Errorf("render tools.go: %w", err)
	}
	var ldflags []string
	for _, pkg := range []string{"k8s.io/client-go/pkg/version", "k8s.io/component-base/version"} {
		for _, kv := range [][2]string{
			{"gitVersion", ver.tag()},
			{"gitMajor", fmt.Sprint(ver.major)},
			{"gitMinor", fmt.Sprint(ver.minor)},
			{"gitTreeState", "clean"},
			{"buildDate", "1970-01-01T00:00:00Z"},
		} {
			ldflags = append(ldflags, fmt.Sprintf("-X %s.%s=%s", pkg, kv[0], kv[1]))
		}
	}
	return moduleRecipe{
		name:     "Kubernetes " + ver.tag(),
		dir:      dir,
		upstream: "k8s.io/kubernetes@" + ver.tag(),
		genGoMod: func(up *modfile.File) ([]byte, error) { return k8sToolsGoMod(ver, up) },
		files: map[string][]byte{
			"tools.go":     tools.Bytes(),
			"etcd/main.go": etcdMainSource,
		},
		packages: append(slices.Clone(k8sPackages), "./etcd"),
		ldflags:  "-s -w " + strings.Join(ldflags, " "),
		outputs:  []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kube-proxy", "etcd"},
	}, nil
}

// k8sToolsGoMod renders the go.mod of the Kubernetes tools module: the go
// and godebug lines of k8s.io/kubernetes (so the binaries behave as upstream
// builds do), a requirement on it, and a replace of every staging module
// (found as upstream's "=> ./staging/src/..." replaces) by its published
// v0.<minor>.<patch> version.
func k8sToolsGoMod(ver k8sVersion, up *modfile.File) ([]byte, error) {
	var staging []string
	for _, r := range up.Replace {
		if strings.HasPrefix(r.New.Path, "./staging/src/") {
			staging = append(staging, r.Old.Path)
		}
	}
	if len(staging) == 0 {
		return nil, fmt.Errorf("k8s.io/kubernetes %s go.mod has no ./staging/src replace directives", ver.tag())
	}
	sort.Strings(staging)
	var b strings.Builder
	b.WriteString("// Code generated by the cidrshift e2e harness. DO NOT EDIT.\n\n")
	b.WriteString("module cidrshift.local/e2e/k8s-tools\n\n")
	writeGoAndGodebug(&b, up)
	fmt.Fprintf(&b, "require k8s.io/kubernetes %s\n\nreplace (\n", ver.tag())
	for _, m := range staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, ver.staging())
	}
	b.WriteString(")\n")
	writeModuleReplaces(&b, up)
	return []byte(b.String()), nil
}

// kwokRecipe builds kwok from its own module: its dependencies (client-go,
// controller-runtime, otel) differ from Kubernetes', and it must not follow
// K8S_VERSION down to staging modules it cannot compile against.
func kwokRecipe(dir string) (moduleRecipe, error) {
	var tools bytes.Buffer
	if err := toolsTemplate.Execute(&tools, []string{"sigs.k8s.io/kwok/cmd/kwok"}); err != nil {
		return moduleRecipe{}, fmt.Errorf("render tools.go: %w", err)
	}
	return moduleRecipe{
		name:     "kwok " + KwokVersion,
		dir:      dir,
		upstream: "sigs.k8s.io/kwok@" + KwokVersion,
		genGoMod: func(up *modfile.File) ([]byte, error) {
			var b strings.Builder
			b.WriteString("// Code generated by the cidrshift e2e harness. DO NOT EDIT.\n\n")
			b.WriteString("module cidrshift.local/e2e/kwok-tools\n\n")
			writeGoAndGodebug(&b, up)
			fmt.Fprintf(&b, "require sigs.k8s.io/kwok %s\n", KwokVersion)
			writeModuleReplaces(&b, up)
			return []byte(b.String()), nil
		},
		files:    map[string][]byte{"tools.go": tools.Bytes()},
		packages: []string{"sigs.k8s.io/kwok/cmd/kwok"},
		ldflags:  "-s -w",
		outputs:  []string{"kwok", "kwok-stages.yaml"},
		finish: func(upstreamDir, binDir string) error {
			var out bytes.Buffer
			for i, rel := range kwokStageFiles {
				data, err := os.ReadFile(filepath.Join(upstreamDir, filepath.FromSlash(rel)))
				if err != nil {
					return fmt.Errorf("read kwok stage: %w", err)
				}
				if i > 0 {
					out.WriteString("\n---\n")
				}
				out.Write(bytes.TrimSpace(data))
				out.WriteString("\n")
			}
			return os.WriteFile(filepath.Join(binDir, "kwok-stages.yaml"), out.Bytes(), 0o644)
		},
	}, nil
}

// writeGoAndGodebug copies the go directive and godebug settings.
func writeGoAndGodebug(b *strings.Builder, up *modfile.File) {
	goVer := "1.22"
	if up.Go != nil && up.Go.Version != "" {
		goVer = up.Go.Version
	}
	fmt.Fprintf(b, "go %s\n", goVer)
	for _, d := range up.Godebug {
		fmt.Fprintf(b, "godebug %s=%s\n", d.Key, d.Value)
	}
	b.WriteString("\n")
}

// writeModuleReplaces copies upstream replace directives that point at other
// module versions (local-path replaces cannot be carried over).
func writeModuleReplaces(b *strings.Builder, up *modfile.File) {
	for _, r := range up.Replace {
		if r.New.Version == "" {
			continue
		}
		old := r.Old.Path
		if r.Old.Version != "" {
			old += " " + r.Old.Version
		}
		fmt.Fprintf(b, "replace %s => %s %s\n", old, r.New.Path, r.New.Version)
	}
}

// recipeKey identifies a build: inputs known without touching the network.
func (r moduleRecipe) recipeKey(goVersion string) string {
	h := sha256.New()
	fmt.Fprintf(h, "rev=%s\ngo=%s\nupstream=%s\nldflags=%s\n", recipeRevision, goVersion, r.upstream, r.ldflags)
	fmt.Fprintf(h, "packages=%q\noutputs=%q\nstages=%q\n", r.packages, r.outputs, kwokStageFiles)
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "file=%s\n%s\n", n, r.files[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ensureModuleBuild builds r under its lock unless bin already matches.
func ensureModuleBuild(ctx context.Context, g *goTool, logf func(string, ...any), r moduleRecipe) error {
	key := r.recipeKey(g.version)
	binDir := filepath.Join(r.dir, "bin")
	if binUpToDate(binDir, key, r.outputs) {
		return nil
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(r.dir, ".lock"), func() {
		logf("harness: waiting for a concurrent build of %s in %s", r.name, r.dir)
	})
	if err != nil {
		return err
	}
	defer unlock()
	// Someone else may have finished the build while we waited.
	if binUpToDate(binDir, key, r.outputs) {
		return nil
	}
	start := time.Now()
	logf("harness: building %s into %s (first run only; output in %s)", r.name, binDir, filepath.Join(r.dir, "build.log"))
	if err := buildModule(ctx, g, r, key); err != nil {
		return fmt.Errorf("build %s: %w", r.name, err)
	}
	logf("harness: built %s in %s", r.name, time.Since(start).Round(time.Second))
	return nil
}

// binUpToDate reports whether binDir holds every output of a build with key.
func binUpToDate(binDir, key string, outputs []string) bool {
	stamp, err := os.ReadFile(filepath.Join(binDir, ".recipe"))
	if err != nil || strings.TrimSpace(string(stamp)) != key {
		return false
	}
	for _, o := range outputs {
		if _, err := os.Stat(filepath.Join(binDir, o)); err != nil {
			return false
		}
	}
	return true
}

// buildModule generates the module, tidies it, builds into bin.tmp and
// renames that to bin, so a half-finished build is never mistaken for a
// finished one.
func buildModule(ctx context.Context, g *goTool, r moduleRecipe, key string) (err error) {
	logPath := filepath.Join(r.dir, "build.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("create build log: %w", err)
	}
	defer logFile.Close()
	tail := &tailBuffer{max: 4096}
	out := io.MultiWriter(logFile, tail)
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (see %s)\n%s", err, logPath, tail.String())
		}
	}()

	upstreamDir, upstreamMod, err := g.download(ctx, r.upstream, out)
	if err != nil {
		return err
	}
	modData, err := os.ReadFile(upstreamMod)
	if err != nil {
		return fmt.Errorf("read upstream go.mod: %w", err)
	}
	up, err := modfile.Parse(upstreamMod, modData, nil)
	if err != nil {
		return fmt.Errorf("parse upstream go.mod %s: %w", upstreamMod, err)
	}
	goMod, err := r.genGoMod(up)
	if err != nil {
		return err
	}
	src := filepath.Join(r.dir, "src")
	files := map[string][]byte{"go.mod": goMod}
	for n, d := range r.files {
		files[n] = d
	}
	for name, data := range files {
		if err := writeFileIfChanged(filepath.Join(src, filepath.FromSlash(name)), data); err != nil {
			return err
		}
	}
	if err := g.run(ctx, src, out, "mod", "tidy"); err != nil {
		return err
	}
	tmpBin := filepath.Join(r.dir, "bin.tmp")
	if err := os.RemoveAll(tmpBin); err != nil {
		return fmt.Errorf("clean %s: %w", tmpBin, err)
	}
	if err := os.MkdirAll(tmpBin, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", tmpBin, err)
	}
	args := append([]string{"build", "-o", tmpBin + string(filepath.Separator), "-ldflags", r.ldflags}, r.packages...)
	if err := g.run(ctx, src, out, args...); err != nil {
		return err
	}
	if r.finish != nil {
		if err := r.finish(upstreamDir, tmpBin); err != nil {
			return err
		}
	}
	for _, o := range r.outputs {
		if _, err := os.Stat(filepath.Join(tmpBin, o)); err != nil {
			return fmt.Errorf("build finished without %s: %w", o, err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmpBin, ".recipe"), []byte(key+"\n"), 0o644); err != nil {
		return fmt.Errorf("write recipe stamp: %w", err)
	}
	binDir := filepath.Join(r.dir, "bin")
	if err := os.RemoveAll(binDir); err != nil {
		return fmt.Errorf("remove old %s: %w", binDir, err)
	}
	if err := os.Rename(tmpBin, binDir); err != nil {
		return fmt.Errorf("install binaries: %w", err)
	}
	return nil
}

// writeFileIfChanged writes data unless the file already holds it, keeping
// modification times (and go's caches) stable across runs.
func writeFileIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create dir for %s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// goTool runs the go command with an environment fit for building the
// generated modules regardless of the caller's workspace or flags.
type goTool struct {
	path    string
	version string
	env     []string
}

func newGoTool(ctx context.Context) (*goTool, error) {
	// The go command on PATH; tests run by `go test` always have one (the go
	// command puts its own GOROOT/bin first).
	path, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("find the go command on PATH: %w", err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GOWORK", "GOFLAGS", "GOTOOLCHAIN", "CGO_ENABLED", "GOOS", "GOARCH", "GO111MODULE":
			return true
		}
		return false
	})
	env = append(env, "GOWORK=off", "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local", "CGO_ENABLED=0", "GO111MODULE=on")
	g := &goTool{path: path, env: env}
	var out bytes.Buffer
	if err := g.run(ctx, "", &out, "env", "GOVERSION"); err != nil {
		return nil, fmt.Errorf("go env GOVERSION: %w: %s", err, out.String())
	}
	g.version = strings.TrimSpace(out.String())
	return g, nil
}

// run executes go with args in dir, sending its output to out.
func (g *goTool) run(ctx context.Context, dir string, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, g.path, args...)
	cmd.Dir = dir
	cmd.Env = g.env
	cmd.Stdout = out
	cmd.Stderr = out
	fmt.Fprintf(out, "$ go %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// download fetches module@version into the module cache and returns its
// directory and the path of its go.mod.
func (g *goTool) download(ctx context.Context, modVersion string, log io.Writer) (dir, goMod string, err error) {
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, g.path, "mod", "download", "-json", modVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = g.env
	cmd.Stdout = &stdout
	cmd.Stderr = log
	fmt.Fprintf(log, "$ go mod download -json %s\n", modVersion)
	runErr := cmd.Run()
	var info struct {
		Dir, GoMod, Error string
	}
	if jsonErr := json.Unmarshal(stdout.Bytes(), &info); jsonErr != nil && runErr == nil {
		return "", "", fmt.Errorf("go mod download %s: decode output: %w", modVersion, jsonErr)
	}
	if info.Error != "" {
		return "", "", fmt.Errorf("go mod download %s: %s", modVersion, info.Error)
	}
	if runErr != nil {
		return "", "", fmt.Errorf("go mod download %s: %w", modVersion, runErr)
	}
	if info.Dir == "" || info.GoMod == "" {
		return "", "", fmt.Errorf("go mod download %s: no Dir/GoMod in output %q", modVersion, stdout.String())
	}
	return info.Dir, info.GoMod, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
