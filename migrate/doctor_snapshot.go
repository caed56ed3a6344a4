package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cidrshift/cidrshift/calico"
	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/flannel"
	"github.com/cidrshift/cidrshift/kubeadmcfg"
	"github.com/cidrshift/cidrshift/nodecidr"
	"github.com/cidrshift/cidrshift/servicecidr"
)

// Snapshot is what the doctor read of a cluster, live (LoadSnapshot) or
// from offline dumps (ReadSnapshot, ReadSnapshotFiles). Diagnose checks it;
// any part may be empty, and the checks that need it are then skipped.
type Snapshot struct {
	// Source says where it was read: "cluster", "file nodes.yaml", ...
	Source string `json:"source"`
	// Nodes are decoded in full: a fix plan keeps them as backups.
	Nodes []corev1.Node `json:"nodes"`
	// Pods are reduced to what the checks read; PodsRead says whether pods
	// were read at all (a dump of nodes only has none).
	Pods     []nodecidr.PodSummary `json:"pods,omitempty"`
	PodsRead bool                  `json:"podsRead"`
	// ControlPlanePods are the kube-system Pods labelled
	// component=kube-controller-manager or component=kube-apiserver, whose
	// command lines hold the cluster's CIDR flags.
	ControlPlanePods []corev1.Pod `json:"controlPlanePods,omitempty"`
	// Services are every Service read, reduced to what the checks read:
	// namespace, name, labels, type, clusterIP and clusterIPs (the other
	// fields are left empty).
	Services []corev1.Service `json:"services,omitempty"`
	// ConfigMaps are the ones the checks read: kube-flannel-cfg in any
	// namespace, and kube-system's kube-proxy, kubelet-config and kubeadm-config.
	ConfigMaps []corev1.ConfigMap `json:"configMaps,omitempty"`
	// IPPools, IPAMBlocks and ServiceCIDRs are read where served or dumped.
	IPPools      []calico.IPPool           `json:"ipPools,omitempty"`
	IPAMBlocks   []calico.Block            `json:"ipamBlocks,omitempty"`
	ServiceCIDRs []servicecidr.ServiceCIDR `json:"serviceCIDRs,omitempty"`
	// NotRead says what could not be read and why (an API not served, an
	// optional kind the caller may not list); the checks needing it are skipped.
	NotRead []string `json:"notRead,omitempty"`
	// Skipped counts dumped objects the doctor does not read: other kinds,
	// and ConfigMaps other than those named above.
	Skipped int `json:"skipped,omitempty"`
}

// doctorConfigMap reports whether a ConfigMap is one the doctor reads.
func doctorConfigMap(namespace, name string) bool {
	if name == flannel.DefaultNetConfName {
		return true
	}
	return namespace == kubeadmcfg.Namespace &&
		(name == kubeadmcfg.KubeProxyConfigMap || name == kubeadmcfg.KubeletConfigMap || name == kubeadmcfg.KubeadmConfigMap)
}

// keptKind reports whether an offline dump's object of another kind than
// Pod and Node is kept for the doctor.
func keptKind(apiVersion, kind string) bool {
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = ""
	}
	switch kind {
	case "Service", "ConfigMap":
		return group == ""
	case "IPPool":
		return group == calico.CRDGroup || group == calico.IPPoolsV3.Group
	case "IPAMBlock":
		return group == calico.CRDGroup
	case "ServiceCIDR":
		return group == servicecidr.Group
	}
	return false
}

// pageSize is the Limit of every list the live loader sends.
const pageSize = 500

// LoadSnapshot reads what Diagnose checks from a live cluster, with
// paginated lists only: Nodes, Pods (summaries; the control-plane ones in
// full), Services, the ConfigMaps named in Snapshot.ConfigMaps, and through
// dyn (which may be nil) Calico IPPools (crd.projectcalico.org/v1, else
// projectcalico.org/v3), IPAMBlocks and ServiceCIDRs (networking.k8s.io v1,
// v1beta1 or v1alpha1, the first served). A kind that is not served, or
// that the caller may not list, is noted in Snapshot.NotRead; failing to
// list Nodes, Pods, Services or ConfigMaps is an error.
func LoadSnapshot(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) (*Snapshot, error) {
	log := logr.FromContextOrDiscard(ctx)
	s := &Snapshot{Source: "cluster", PodsRead: true}
	var err error
	if s.Nodes, err = nodecidr.ListNodes(ctx, kube, nodecidr.ListOptions{PageSize: pageSize}); err != nil {
		return nil, err
	}
	if err := pages(ctx, func(lo metav1.ListOptions) (string, error) {
		l, err := kube.CoreV1().Pods("").List(ctx, lo)
		if err != nil {
			return "", fmt.Errorf("listing pods: %w", err)
		}
		for i := range l.Items {
			p := &l.Items[i]
			s.Pods = append(s.Pods, nodecidr.SummarizePod(p))
			if isControlPlanePod(p) {
				s.ControlPlanePods = append(s.ControlPlanePods, *p)
			}
		}
		return l.Continue, nil
	}); err != nil {
		return nil, err
	}
	if err := pages(ctx, func(lo metav1.ListOptions) (string, error) {
		l, err := kube.CoreV1().Services("").List(ctx, lo)
		if err != nil {
			return "", fmt.Errorf("listing services: %w", err)
		}
		for i := range l.Items {
			s.Services = append(s.Services, serviceSummary(&l.Items[i]))
		}
		return l.Continue, nil
	}); err != nil {
		return nil, err
	}
	// kube-flannel-cfg may live in any namespace; the kube-system ones by name.
	for _, q := range []struct{ ns, field string }{
		{"", "metadata.name=" + flannel.DefaultNetConfName},
		{kubeadmcfg.Namespace, ""},
	} {
		if err := pages(ctx, func(lo metav1.ListOptions) (string, error) {
			lo.FieldSelector = q.field
			l, err := kube.CoreV1().ConfigMaps(q.ns).List(ctx, lo)
			if err != nil {
				return "", fmt.Errorf("listing configmaps (namespace %q, field selector %q): %w", q.ns, q.field, err)
			}
			for _, cm := range l.Items {
				if doctorConfigMap(cm.Namespace, cm.Name) && !slices.ContainsFunc(s.ConfigMaps, func(o corev1.ConfigMap) bool {
					return o.UID == cm.UID && o.Namespace == cm.Namespace && o.Name == cm.Name
				}) {
					s.ConfigMaps = append(s.ConfigMaps, cm)
				}
			}
			return l.Continue, nil
		}); err != nil {
			return nil, err
		}
	}
	if dyn == nil {
		s.NotRead = append(s.NotRead, "Calico IPPools, IPAMBlocks and ServiceCIDRs: no dynamic client")
		return s, nil
	}
	optional := func(what string, gvrs []schema.GroupVersionResource, add func(*unstructured.Unstructured) error) error {
		for _, gvr := range gvrs {
			err := pages(ctx, func(lo metav1.ListOptions) (string, error) {
				l, err := dyn.Resource(gvr).List(ctx, lo)
				if err != nil {
					return "", err
				}
				for i := range l.Items {
					if err := add(&l.Items[i]); err != nil {
						return "", err
					}
				}
				return l.GetContinue(), nil
			})
			switch {
			case err == nil:
				return nil
			case apierrors.IsNotFound(err):
				log.V(1).Info("not served", "resource", gvr.String())
				continue
			case apierrors.IsForbidden(err):
				s.NotRead = append(s.NotRead, fmt.Sprintf("%s: %v", what, err))
				return nil
			default:
				return fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
			}
		}
		s.NotRead = append(s.NotRead, what+": not served")
		return nil
	}
	if err := optional("Calico IPPools", []schema.GroupVersionResource{calico.IPPoolsV1, calico.IPPoolsV3}, func(u *unstructured.Unstructured) error {
		p, err := calico.PoolFromUnstructured(u.Object)
		s.IPPools = append(s.IPPools, p)
		return err
	}); err != nil {
		return nil, err
	}
	if err := optional("Calico IPAMBlocks", []schema.GroupVersionResource{calico.IPAMBlocksV1}, func(u *unstructured.Unstructured) error {
		b, err := calico.BlockFromUnstructured(u.Object)
		s.IPAMBlocks = append(s.IPAMBlocks, b)
		return err
	}); err != nil {
		return nil, err
	}
	var scGVRs []schema.GroupVersionResource
	for _, v := range servicecidr.Versions() {
		scGVRs = append(scGVRs, servicecidr.ServiceCIDRResource(v))
	}
	if err := optional("ServiceCIDRs", scGVRs, func(u *unstructured.Unstructured) error {
		sc, err := servicecidr.FromUnstructured(u)
		s.ServiceCIDRs = append(s.ServiceCIDRs, sc)
		return err
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// pages calls fetch for every page of a list, pageSize items at a time.
func pages(ctx context.Context, fetch func(metav1.ListOptions) (string, error)) error {
	lo := metav1.ListOptions{Limit: pageSize}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		cont, err := fetch(lo)
		if err != nil {
			return err
		}
		if cont == "" {
			return nil
		}
		lo.Continue = cont
	}
}

func isControlPlanePod(p *corev1.Pod) bool {
	c := p.Labels["component"]
	return p.Namespace == metav1.NamespaceSystem && (c == cidr.KubeControllerManager || c == cidr.KubeAPIServer)
}

// Input is one offline dump for ReadSnapshot.
type Input struct {
	// Name names the input in errors and in Snapshot.Source.
	Name string
	R    io.Reader
}

// ErrNoInput means ReadSnapshotFiles was given nothing to read.
var ErrNoInput = errors.New("no input")

// ReadSnapshot reads offline dumps, one after the other: the output of
// `kubectl get nodes,pods,services,configmaps,... -A -o yaml` (or -o json),
// and any dump holding ippools.crd.projectcalico.org (or projectcalico.org/v3),
// ipamblocks.crd.projectcalico.org and networking.k8s.io ServiceCIDRs (v1,
// v1beta1, v1alpha1). Each is streamed through nodecidr.ReadDumpWith: Pods
// and Nodes take its fast paths, the other kinds the doctor reads are
// decoded in the decoding workers (decodeKept), and every other object is
// counted in Skipped. Errors name the input, the document and the item.
func ReadSnapshot(ctx context.Context, inputs ...Input) (*Snapshot, error) {
	s := &Snapshot{}
	var names []string
	for _, in := range inputs {
		d, err := nodecidr.ReadDumpWith(ctx, in.R, nodecidr.DumpOptions{Keep: keptKind, Decode: decodeKept})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in.Name, err)
		}
		s.add(d)
		names = append(names, in.Name)
	}
	s.Source = strings.Join(names, ", ")
	return s, nil
}

// add merges one dump, whose kept objects decodeKept decoded, into the
// snapshot. The dump's slices are taken over, not copied, where the
// snapshot has none yet.
func (s *Snapshot) add(d *nodecidr.Dump) {
	s.Nodes = appendAll(s.Nodes, d.Nodes)
	s.Pods = appendAll(s.Pods, d.Pods)
	s.PodsRead = s.PodsRead || len(d.Pods) > 0
	s.ControlPlanePods = appendAll(s.ControlPlanePods, d.ControlPlanePods)
	s.Skipped += d.Skipped
	services := 0
	for _, o := range d.Objects {
		if _, ok := o.Value.(corev1.Service); ok {
			services++
		}
	}
	s.Services = slices.Grow(s.Services, services)
	for _, o := range d.Objects {
		switch v := o.Value.(type) {
		case corev1.Service:
			s.Services = append(s.Services, v)
		case corev1.ConfigMap:
			s.ConfigMaps = append(s.ConfigMaps, v)
		case calico.IPPool:
			s.IPPools = append(s.IPPools, v)
		case calico.Block:
			s.IPAMBlocks = append(s.IPAMBlocks, v)
		case servicecidr.ServiceCIDR:
			s.ServiceCIDRs = append(s.ServiceCIDRs, v)
		}
	}
}

// appendAll is append(dst, src...) that returns src itself when dst is empty.
func appendAll[T any](dst, src []T) []T {
	if len(dst) == 0 {
		return src
	}
	return append(dst, src...)
}

// serviceJSON is the part of a Service the checks read (see serviceSummary).
type serviceJSON struct {
	Metadata struct {
		Namespace string            `json:"namespace"`
		Name      string            `json:"name"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Type       corev1.ServiceType `json:"type"`
		ClusterIP  string             `json:"clusterIP"`
		ClusterIPs []string           `json:"clusterIPs"`
	} `json:"spec"`
}

// serviceSummary is the part of svc the checks read: namespace, name,
// labels, type, clusterIP and clusterIPs.
func serviceSummary(svc *corev1.Service) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name, Labels: svc.Labels},
		Spec: corev1.ServiceSpec{Type: svc.Spec.Type, ClusterIP: svc.Spec.ClusterIP, ClusterIPs: svc.Spec.ClusterIPs}}
}

// decodeKept is nodecidr.DumpOptions.Decode for the kinds keptKind keeps,
// run in the dump reader's decoding workers: a Service becomes its
// serviceSummary (its other fields are not type-checked), a ConfigMap the
// doctor reads a corev1.ConfigMap (any other is dropped), an IPPool a
// calico.IPPool, an IPAMBlock a calico.Block, a ServiceCIDR a
// servicecidr.ServiceCIDR.
func decodeKept(_, kind string, js []byte) (any, error) {
	switch kind {
	case "Service":
		var sj serviceJSON
		if err := json.Unmarshal(js, &sj); err != nil {
			return nil, err
		}
		m, sp := &sj.Metadata, &sj.Spec
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, Labels: m.Labels},
			Spec: corev1.ServiceSpec{Type: sp.Type, ClusterIP: sp.ClusterIP, ClusterIPs: sp.ClusterIPs}}, nil
	case "ConfigMap":
		var meta struct {
			Metadata struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(js, &meta); err != nil {
			return nil, err
		}
		if !doctorConfigMap(meta.Metadata.Namespace, meta.Metadata.Name) {
			return nil, nil
		}
		var cm corev1.ConfigMap
		if err := json.Unmarshal(js, &cm); err != nil {
			return nil, err
		}
		return cm, nil
	}
	var u unstructured.Unstructured
	if err := json.Unmarshal(js, &u.Object); err != nil {
		return nil, err
	}
	switch kind {
	case "IPPool":
		return calico.PoolFromUnstructured(u.Object)
	case "IPAMBlock":
		return calico.BlockFromUnstructured(u.Object)
	case "ServiceCIDR":
		return servicecidr.FromUnstructured(&u)
	}
	return nil, nil
}

// ReadSnapshotFiles reads offline dumps from paths: "-" is stdin, a
// directory is walked (the output of `kubectl cluster-info dump
// --output-directory`: every *.json, *.yaml and *.yml file below it, in
// lexical order; logs and other files are left alone), anything else is
// read as one dump. See ReadSnapshot.
func ReadSnapshotFiles(ctx context.Context, paths []string, stdin io.Reader) (*Snapshot, error) {
	if len(paths) == 0 {
		return nil, ErrNoInput
	}
	s := &Snapshot{}
	for _, path := range paths {
		if path == "-" {
			d, err := ReadSnapshot(ctx, Input{Name: "-", R: stdin})
			if err != nil {
				return nil, err
			}
			s.merge(d)
			continue
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		files := []string{path}
		if st.IsDir() {
			files = files[:0]
			err := filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				switch strings.ToLower(filepath.Ext(p)) {
				case ".json", ".yaml", ".yml":
					if !e.IsDir() {
						files = append(files, p)
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("%w: directory %s holds no .json, .yaml or .yml file", ErrNoInput, path)
			}
		}
		for _, f := range files {
			if err := readFile(ctx, s, f); err != nil {
				return nil, err
			}
		}
	}
	s.Source = strings.Join(paths, ", ")
	return s, nil
}

func readFile(ctx context.Context, s *Snapshot, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	d, err := ReadSnapshot(ctx, Input{Name: path, R: f})
	if err != nil {
		return err
	}
	s.merge(d)
	return nil
}

// merge appends o's objects to s (taking o's slices over where s has none).
func (s *Snapshot) merge(o *Snapshot) {
	s.Nodes = appendAll(s.Nodes, o.Nodes)
	s.Pods = appendAll(s.Pods, o.Pods)
	s.PodsRead = s.PodsRead || o.PodsRead
	s.ControlPlanePods = appendAll(s.ControlPlanePods, o.ControlPlanePods)
	s.Services = appendAll(s.Services, o.Services)
	s.ConfigMaps = appendAll(s.ConfigMaps, o.ConfigMaps)
	s.IPPools = appendAll(s.IPPools, o.IPPools)
	s.IPAMBlocks = appendAll(s.IPAMBlocks, o.IPAMBlocks)
	s.ServiceCIDRs = appendAll(s.ServiceCIDRs, o.ServiceCIDRs)
	s.NotRead = appendAll(s.NotRead, o.NotRead)
	s.Skipped += o.Skipped
}
