package clitest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/internal/cli"
)

// JobArgs reads the Job of a multi-document manifest (an example's
// job.yaml) and returns its one container's args, failing the test unless
// there is exactly one Job with one container that runs as a ServiceAccount
// and tolerates the control-plane taint.
func JobArgs(t testing.TB, path string) []string {
	t.Helper()
	var jobs []batchv1.Job
	for _, doc := range documents(t, path) {
		if doc.kind != "Job" {
			continue
		}
		var j batchv1.Job
		if err := yaml.UnmarshalStrict(doc.data, &j); err != nil {
			t.Fatalf("%s: Job: %v", path, err)
		}
		jobs = append(jobs, j)
	}
	if len(jobs) != 1 || len(jobs[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want one Job with one container, got %d Job(s)", path, len(jobs))
	}
	spec := jobs[0].Spec.Template.Spec
	if spec.ServiceAccountName == "" {
		t.Fatalf("%s: the Job runs as no ServiceAccount", path)
	}
	tolerates := false
	for _, tol := range spec.Tolerations {
		tolerates = tolerates || tol.Key == "node-role.kubernetes.io/control-plane"
	}
	if !tolerates {
		t.Fatalf("%s: the Job does not tolerate the control-plane taint", path)
	}
	return spec.Containers[0].Args
}

// document is one document of a multi-document manifest.
type document struct {
	kind string
	data []byte
}

// documents splits the manifest at path into its documents.
func documents(t testing.TB, path string) []document {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []document
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, document{kind: kind.Kind, data: doc})
	}
}

// AppliesInCluster checks the flags a Job manifest gave a runbook: an
// applying run with the journal at /journal, the in-cluster configuration
// (no kubeconfig), holding its Leases and taking over a dead pod's.
func AppliesInCluster(t testing.TB, apply bool, journal, kubeconfig string, lock cli.LockFlags) {
	t.Helper()
	if !apply || journal != "/journal" || kubeconfig != "" || !lock.Steal || lock.Off {
		t.Errorf("Job flags: apply %v, journal %q, kubeconfig %q, steal-lock %v, no-lock %v; want an applying run with --journal=/journal, no kubeconfig, --steal-lock",
			apply, journal, kubeconfig, lock.Steal, lock.Off)
	}
}

// LocalJournal returns args with the Job's --journal=/journal replaced by
// dir, for a test that runs the runbook as its Job does.
func LocalJournal(t testing.TB, args []string, dir string) []string {
	t.Helper()
	out := slices.Clone(args)
	i := slices.Index(out, "--journal=/journal")
	if i < 0 {
		t.Fatalf("Job args %v: no --journal=/journal", args)
	}
	out[i] = "--journal=" + dir
	return out
}
