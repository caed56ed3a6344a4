package migrate_test

import (
	"os"

	"github.com/cidrshift/cidrshift/migrate"
)

// WriteSteps prints a Report's steps for a person: each step numbered with
// its status, each detail indented below it (a detail of several lines
// stays indented), and what an operator must do when the run waits.
func ExampleWriteSteps() {
	steps := []migrate.StepReport{
		{Number: 1, Name: "preflight", Status: "done", Title: "check the cluster", Details: []string{"3 nodes Ready"}},
		{Number: 2, Name: "kube-controller-manager", Status: "waiting", Title: "change its flags",
			Details: []string{"manifest /etc/kubernetes/manifests/kube-controller-manager.yaml:\n--cluster-cidr=10.20.0.0/16\n"}},
	}
	waiting := &migrate.Pause{
		Step:         "kube-controller-manager",
		Instructions: []string{"edit the manifest on every control-plane node", "wait until the Pod is Running"},
		Resume:       "rerun the same command",
	}
	migrate.WriteSteps(os.Stdout, steps, waiting)
	// Output:
	// 1. preflight [done] check the cluster
	//    3 nodes Ready
	//
	// 2. kube-controller-manager [waiting] change its flags
	//    manifest /etc/kubernetes/manifests/kube-controller-manager.yaml:
	//    --cluster-cidr=10.20.0.0/16
	//
	// WAITING FOR AN OPERATOR (step kube-controller-manager):
	//   1) edit the manifest on every control-plane node
	//   2) wait until the Pod is Running
	// then: rerun the same command
}
