package servicecidr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/internal/journal"
)

// KubernetesDeletion is the journal's record that Apply deleted
// default/kubernetes so that kube-apiserver recreates it in the new range,
// and has not seen it recreated since. Apply never creates that Service
// itself: kube-apiserver does, from its --service-cluster-ip-range, normally
// within seconds, but not while it is down or slow.
type KubernetesDeletion struct {
	// UID is the deleted object's.
	UID types.UID `json:"uid"`
	// OldIPs are the ClusterIPs it had.
	OldIPs []netip.Addr `json:"oldIPs"`
	// NewIPs are where the deleting run expected kube-apiserver to recreate
	// it: the first address of the new range.
	NewIPs []netip.Addr `json:"newIPs,omitempty"`
	// Deleted is when the record was written, just before the delete.
	Deleted time.Time `json:"deleted"`
	// JournalDir is the journal holding the record.
	JournalDir string `json:"journalDir,omitempty"`
}

// kubernetesRecord is the journal entry of default/kubernetes, written and
// fsynced before Apply deletes it. Unlike a Service record it holds no
// object to recreate: kube-apiserver owns default/kubernetes.
type kubernetesRecord struct {
	Phase    string         `json:"phase"`
	Service  string         `json:"service"`
	OldUID   types.UID      `json:"oldUID"`
	OldIPs   []netip.Addr   `json:"oldIPs"`
	NewIPs   []netip.Addr   `json:"newIPs"`
	To       []netip.Prefix `json:"to,omitempty"`
	Recorded time.Time      `json:"recorded"`
	// NewUID and GotIPs are the object kube-apiserver recreated, once seen.
	NewUID types.UID    `json:"newUID,omitempty"`
	GotIPs []netip.Addr `json:"gotIPs,omitempty"`
	Done   *time.Time   `json:"done,omitempty"`
}

// kubernetesJournalKey is outside the "service/" prefix on purpose: recovery
// recreates every pending "service/" record, and this one it must not.
const kubernetesJournalKey = "kubernetes/" + KubernetesService

// move is the plan entry of a journaled default/kubernetes.
func (r *kubernetesRecord) move() *Move {
	return &Move{Namespace: "default", Name: "kubernetes", UID: r.OldUID, Role: "kubernetes",
		OldIPs: slices.Clone(r.OldIPs), NewIPs: slices.Clone(r.NewIPs)}
}

// kubernetesAwaited says where default/kubernetes is awaited.
func kubernetesAwaited(ips []netip.Addr) string {
	if len(ips) == 0 {
		return "kube-apiserver recreates it from its --service-cluster-ip-range (at the first address of that range)"
	}
	return "kube-apiserver recreates it from its --service-cluster-ip-range, expected at " + joinAddrs(ips) + " (the first address of the new range)"
}

// readJournaledKubernetes returns the pending default/kubernetes record of
// the journal in dir, nil when there is none, and checks that no Service an
// interrupted run deleted is still absent from s (Recover recreates those;
// a plan made without them could hand their addresses to others).
func readJournaledKubernetes(dir string, s *Snapshot) (*KubernetesDeletion, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no run has written it yet; planning creates nothing
	}
	j, err := journal.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("opening journal: %w", err)
	}
	defer j.Close()
	live := make(map[string]bool, len(s.Services))
	for i := range s.Services {
		live[svcKey(&s.Services[i])] = true
	}
	keys, err := j.Keys("service/")
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		var rec record
		ok, err := j.Get(k, &rec)
		if err != nil {
			return nil, err
		}
		if ok && rec.Phase == phasePending && !live[rec.Service] {
			return nil, &ServiceLostError{Service: rec.Service, JournalKey: k, JournalDir: j.Dir(),
				Err: fmt.Errorf("an interrupted apply deleted it and it is not recreated yet; run Recover with this journal before planning, so the plan knows its address %s", joinAddrs(rec.NewIPs))}
		}
	}
	var rec kubernetesRecord
	ok, err := j.Get(kubernetesJournalKey, &rec)
	if err != nil || !ok || rec.Phase != phasePending {
		return nil, err
	}
	return &KubernetesDeletion{UID: rec.OldUID, OldIPs: rec.OldIPs, NewIPs: rec.NewIPs, Deleted: rec.Recorded, JournalDir: j.Dir()}, nil
}

// loadKubernetesRecord reads the default/kubernetes record an earlier run
// left pending and compares it with the cluster: if the delete never
// happened the record is dropped; if kube-apiserver has recreated the
// Service, the record is marked done. a.kubeJournaled is set in the other
// two cases, for Recover and kubernetesService to report.
func (a *applier) loadKubernetesRecord(ctx context.Context) error {
	var rec kubernetesRecord
	ok, err := a.j.Get(kubernetesJournalKey, &rec)
	if err != nil || !ok || rec.Phase != phasePending {
		return err
	}
	live, err := a.c.kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		a.kubeJournaled = &rec
		return nil
	case err != nil:
		return fmt.Errorf("reading Service %s to resume it: %w", KubernetesService, err)
	case live.UID == rec.OldUID:
		// Recorded, but the delete never happened.
		return a.j.Delete(kubernetesJournalKey)
	}
	a.kubeJournaled, a.kubeLive = &rec, live
	a.kubernetesDone(&rec, live)
	return nil
}

// kubernetesDone records that kube-apiserver recreated default/kubernetes.
func (a *applier) kubernetesDone(rec *kubernetesRecord, live *corev1.Service) {
	if a.j == nil || rec == nil || rec.Phase != phasePending {
		return
	}
	now := time.Now()
	rec.Phase, rec.NewUID, rec.GotIPs, rec.Done = phaseDone, live.UID, ClusterIPs(live), &now
	if err := a.j.Put(kubernetesJournalKey, rec); err != nil {
		a.warn(fmt.Sprintf("Service %s was recreated but the journal could not record it: %v", KubernetesService, err))
	}
}

// reportKubernetesRecreated reports default/kubernetes recreated by
// kube-apiserver, and warns when not at the address expected.
func (a *applier) reportKubernetesRecreated(k *Move, live *corev1.Service) {
	ips := ClusterIPs(live)
	a.res.Kubernetes = "recreated by kube-apiserver at " + joinAddrs(ips)
	a.emit(Event{Kind: EventKubernetesRecreated, Service: k.Key(), OldIPs: k.OldIPs, NewIPs: ips})
	if len(k.NewIPs) > 0 && !sameAddrs(ips, k.NewIPs) {
		a.warn(fmt.Sprintf("kube-apiserver recreated %s at %s, not %s: some kube-apiserver still runs with the old --service-cluster-ip-range", k.Key(), joinAddrs(ips), joinAddrs(k.NewIPs)))
	}
}

// reportKubernetesAbsent reports a default/kubernetes an earlier run deleted
// and kube-apiserver has not recreated yet.
func (a *applier) reportKubernetesAbsent(rec *kubernetesRecord) {
	a.res.Kubernetes = fmt.Sprintf("absent: deleted by an interrupted run at %s (journal %s); %s",
		rec.Recorded.Format(time.RFC3339), a.j.Dir(), kubernetesAwaited(rec.NewIPs))
	flag := "the new --service-cluster-ip-range"
	if len(rec.To) > 0 {
		flag = "--service-cluster-ip-range=" + joinPrefixes(rec.To)
	}
	a.warn(fmt.Sprintf("Service %s does not exist: an interrupted run deleted it (uid %s, %s) and kube-apiserver has not recreated it yet; check that every kube-apiserver is running, with %s; plan with this journal and apply, and apply waits for it",
		KubernetesService, rec.OldUID, joinAddrs(rec.OldIPs), flag))
}

// firstAddrs returns the first address of each prefix: where kube-apiserver
// puts default/kubernetes.
func firstAddrs(ps []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		if a, err := cidr.NthAddr(p, 1); err == nil {
			out = append(out, a)
		}
	}
	return out
}
