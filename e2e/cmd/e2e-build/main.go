// Command e2e-build builds (or finds in the cache) the control-plane binaries
// the e2e harness runs, so CI can build them in a step of their own before
// `go test`. It prints the path of each binary.
//
//	go run ./cmd/e2e-build                                # K8S_VERSION or 1.36.3
//	go run ./cmd/e2e-build -k8s-version 1.33.13
//	go run ./cmd/e2e-build -k8s-version 1.33.13,1.30.14   # the version matrix of make e2e
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cidrshift/cidrshift/e2e/harness"
)

func main() {
	versionList := flag.String("k8s-version", harness.K8sVersionFromEnv(), "Kubernetes releases to build, comma-separated, e.g. 1.36.3 or 1.33.13,1.30.14")
	cacheDir := flag.String("cache-dir", "", "binary cache root (default $"+harness.CacheDirEnv+" or <e2e>/.cache)")
	dataPlane := flag.Bool("dataplane", false, "also build the data-plane binaries (flanneld, CNI plugins; kube-proxy is always built)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "e2e-build: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	var versions []string
	for v := range strings.SplitSeq(*versionList, ",") {
		if v = strings.TrimSpace(v); v != "" {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		fmt.Fprintf(os.Stderr, "e2e-build: -k8s-version %q names no release\n", *versionList)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *dataPlane {
		dp, err := harness.EnsureDataPlaneBinaries(ctx, harness.BuildOptions{K8sVersion: versions[0], CacheDir: *cacheDir, Logf: log.Printf})
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e-build: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(dp.Flanneld)
		fmt.Println(dp.CNIDir)
	}
	// One release after the other: each build alone keeps two cores busy.
	for _, version := range versions {
		start := time.Now()
		bins, err := harness.EnsureBinaries(ctx, harness.BuildOptions{
			K8sVersion: version,
			CacheDir:   *cacheDir,
			Logf:       log.Printf,
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e-build: %v\n", err)
			os.Exit(1)
		}
		for _, p := range []string{bins.Etcd, bins.KubeAPIServer, bins.KubeControllerManager, bins.KubeScheduler, bins.Kubectl, bins.KubeProxy, bins.Kwok, bins.KwokStages} {
			fmt.Println(p)
		}
		log.Printf("binaries for Kubernetes %s ready in %s", bins.K8sVersion, time.Since(start).Round(time.Millisecond))
	}
}
