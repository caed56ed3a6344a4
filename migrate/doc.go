// Package migrate is cidrshift's one composer: the third floor of the
// import graph, and the only package that imports the Kubernetes-facing
// packages (calico, flannel, nodecidr, servicecidr, kubeadmcfg) together.
// A migration that spans them — a Calico pod-CIDR move that also rewrites
// nodes, kubeadm settings and kube-controller-manager's flag — is a
// composition of idempotent Steps carried out by one Runner.
//
// The Runner owns what every migration needs: the crash-safe journal
// (JournalDir), resume (a step the journal records as done is not run
// again), the three modes (ModePlan describes, ModeServerDryRun sends the
// writes with dryRun=All, ModeApply changes the cluster), progress lines,
// the operator pause (a step returns a *Pause; the Report carries it, and
// rerunning the same Runner resumes), and a cluster-wide Lock held for the
// run.
//
// The compositions are ServiceCIDR (move the Service range),
// CalicoPodCIDR (move a Calico cluster's pod range, nodes and
// kube-controller-manager with it) and FlannelPodCIDR (widen flannel's
// Network, fix shared subnets, renumber nodes). Each is a function from an
// options struct to a Composition. Runner.Plan turns one into a reviewable
// Plan document; Runner.ApplyPlan carries out a reviewed Plan and refuses it,
// with ErrStalePlan, when the cluster has moved on since.
//
// The example programs examples/migrate-* are flags and output around
// these compositions.
package migrate
