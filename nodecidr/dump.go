package nodecidr

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// ErrDump means an offline dump could not be read.
var ErrDump = errors.New("cannot read dump")

// Dump is what an offline dump holds that nodecidr audits.
type Dump struct {
	// Nodes are the dump's Nodes, decoded in full (plans keep them as backups).
	Nodes []corev1.Node
	// Pods are the dump's Pods, reduced to what the audit reads.
	Pods []PodSummary
	// ControlPlanePods are the kube-system Pods labelled
	// component=kube-controller-manager or component=kube-apiserver, decoded
	// in full so that their command lines can be read
	// (ParseControllerManagerArgs). They are in Pods as well.
	ControlPlanePods []corev1.Pod
	// Objects are the objects of other kinds that DumpOptions.Keep accepted,
	// in input order.
	Objects []Object
	// Skipped counts objects of other kinds (Services, ...) that were not
	// kept, and kept ones that DumpOptions.Decode dropped.
	Skipped int
}

// DumpOptions tunes ReadDumpWith.
type DumpOptions struct {
	// Keep, when set, is asked about every object that is neither a core/v1
	// Pod nor a core/v1 Node, with the object's apiVersion and kind; an
	// object it accepts is kept in Dump.Objects instead of being counted in
	// Skipped. It is called from several goroutines at once.
	Keep func(apiVersion, kind string) bool
	// Decode, when set, decodes every object Keep accepted inside the
	// decoding workers, on every CPU, instead of leaving its JSON in
	// Object.JSON for the caller to decode afterwards on one. It gets the
	// object's apiVersion, kind and JSON (valid JSON, converted from YAML
	// when the dump is YAML, and only valid during the call: copy what you
	// keep) and returns the value to keep in Object.Value, or nil to drop
	// the object (counted in Dump.Skipped). Its error fails the read, naming
	// the document and item. It is called from several goroutines at once.
	Decode func(apiVersion, kind string, js []byte) (any, error)
}

// Object is an object of another kind than Pod or Node that a dump held and
// DumpOptions.Keep accepted.
type Object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// JSON is the whole object as JSON (converted from YAML when the dump
	// was YAML), for the caller to decode into the type it needs; nil when
	// DumpOptions.Decode decoded it.
	JSON []byte `json:"json,omitempty"`
	// Value is what DumpOptions.Decode returned for the object.
	Value any `json:"value,omitempty"`
}

// PodSummary is the part of a Pod the audit reads.
type PodSummary struct {
	Namespace   string          `json:"namespace,omitempty"`
	Name        string          `json:"name"`
	NodeName    string          `json:"nodeName,omitempty"`
	HostNetwork bool            `json:"hostNetwork,omitempty"`
	Phase       corev1.PodPhase `json:"phase,omitempty"`
	// IPs are status.podIPs[*].ip, or status.podIP when podIPs is empty.
	IPs []string `json:"ips,omitempty"`
}

// SummarizePod returns the part of p the audit reads.
func SummarizePod(p *corev1.Pod) PodSummary {
	s := PodSummary{Namespace: p.Namespace, Name: p.Name, NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork, Phase: p.Status.Phase}
	switch {
	case len(p.Status.PodIPs) > 0:
		s.IPs = make([]string, len(p.Status.PodIPs))
		for i, ip := range p.Status.PodIPs {
			s.IPs[i] = ip.IP
		}
	case p.Status.PodIP != "":
		s.IPs = []string{p.Status.PodIP}
	}
	return s
}

// DecodeObjects is ReadDump for a dump held in memory, such as a bundled
// sample or a test fixture.
func DecodeObjects(data []byte) (*Dump, error) {
	return ReadDump(context.Background(), bytes.NewReader(data))
}

// ReadDump reads the output of `kubectl get nodes[,pods,...] -o yaml` (or
// -o json) from r: a v1 List, a NodeList or PodList, single objects, or
// several YAML documents separated by "---" lines. Objects of other kinds
// are counted and skipped. Errors wrap ErrDump and name the document and
// item ("document 1 item 517: Pod: ...", items counted from 0).
//
// The input is streamed, never held whole: a YAML List whose items are
// "- ..." lines under a line "items:" (as kubectl writes it) is cut into
// items, and a JSON document is read item by item. Items are decoded on
// every CPU (runtime.GOMAXPROCS) and kept in input order; memory is bounded
// by the result plus a few MB of batches. Pods and Nodes are read by fast
// paths for the text kubectl writes; whatever they are not certain of is
// decoded by sigs.k8s.io/yaml and encoding/json instead, with the same
// result. Other YAML layouts (flow style, say) are decoded one document at
// a time.
//
// Pods are reduced to PodSummary and their other fields are not
// type-checked. Because a List's items are decoded before its kind (which
// kubectl writes after them) is known: an object with items whose kind does
// not end in "List" is refused; anchors and aliases are resolved within one
// item; and a quoted scalar must not continue on a line that starts with
// "- " in the items' column. Input that starts with `{"` (after white space)
// is read as JSON, a stream of JSON values.
func ReadDump(ctx context.Context, r io.Reader) (*Dump, error) {
	return ReadDumpWith(ctx, r, DumpOptions{})
}

// ReadDumpWith is ReadDump that also keeps the objects of other kinds that
// opts.Keep accepts (Services, ConfigMaps, Calico IPPools, ...) in
// Dump.Objects. Pods and Nodes take the same fast paths as in ReadDump. A
// kept object's block-style YAML is turned into JSON by the fast path's
// parser, and a kept item of a JSON List is checked by the fast path's
// scanner; whatever they are not certain of goes through the full decoder
// (sigs.k8s.io/yaml, encoding/json), so keep only the kinds needed.
// opts.Decode, when set, decodes kept objects in the workers.
func ReadDumpWith(ctx context.Context, r io.Reader, opts DumpOptions) (*Dump, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := newPipeline(ctx, cancel, opts)
	br := bufio.NewReaderSize(&stickyReader{r: r}, 1<<20)
	go func() {
		defer p.closeJobs()
		if isJSON(br) {
			readJSON(p, br)
		} else {
			readYAML(p, br)
		}
	}()
	return p.collect()
}

// stickyReader returns r's first error, io.EOF included, from every read
// after it. bufio.Reader hands an error back once: isJSON's Peek would
// otherwise take a read error that no reader sees, and the next read
// would go on past it.
type stickyReader struct {
	r   io.Reader
	err error
}

func (s *stickyReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	s.err = err
	return n, err
}

// isJSON reports whether the input starts (after white space) with '{'
// followed by '"' or '}': a JSON object rather than a YAML flow mapping
// with plain keys.
func isJSON(br *bufio.Reader) bool {
	seen := 0
	for n := 64; n <= 1<<16; n *= 4 {
		b, _ := br.Peek(n)
		for ; seen < len(b); seen++ {
			switch b[seen] {
			case ' ', '\t', '\r', '\n':
				continue
			}
			if b[seen] != '{' {
				return false
			}
			for i := seen + 1; i < len(b); i++ {
				switch b[i] {
				case ' ', '\t', '\r', '\n':
					continue
				case '"', '}':
					return true
				}
				return false
			}
			break
		}
		if len(b) < n {
			return false
		}
	}
	return false
}

// Pipeline: one reader goroutine cuts the input into jobs (batches of List
// items, whole documents), GOMAXPROCS workers decode them, and collect
// merges the results in input order. At most maxInFlight jobs exist at a
// time, which bounds memory to about maxInFlight*batchBytes plus the result.
const (
	batchBytes  = 256 << 10
	batchItems  = 512
	maxInFlight = 24
)

type jobKind int

const (
	jobYAMLItems   jobKind = iota // List items, each starting with "- " in column 0
	jobYAMLDoc                    // one whole YAML document
	jobYAMLListEnd                // a List's text around its items, to check kind
	jobJSONItems                  // JSON List items
	jobJSONDoc                    // one whole JSON document
	jobJSONListEnd                // a JSON List's other fields, to check kind
	jobError                      // the reader failed here
)

type job struct {
	seq       int
	kind      jobKind
	doc       int // 1-based document number
	firstItem int // index of the first item of this job in its List
	indent    int // column of the "-" that starts each item (jobYAMLItems)
	// defKind and defAPIVersion are the kind of JSON List items that name
	// none (the items of a typed List such as NodeList).
	defKind, defAPIVersion string
	buf                    []byte
	ends                   []int // item i is buf[ends[i-1]:ends[i]] (ends[-1] = 0)
	err                    error
	res                    jobResult
}

type jobResult struct {
	nodes   []corev1.Node
	pods    []PodSummary
	cp      []corev1.Pod
	objects []Object
	skipped int
	err     error
}

func (j *job) item(i int) []byte {
	start := 0
	if i > 0 {
		start = j.ends[i-1]
	}
	return j.buf[start:j.ends[i]]
}

type pipeline struct {
	ctx     context.Context
	cancel  context.CancelFunc
	jobs    chan *job
	results chan *job
	slots   chan struct{}
	free    chan *job
	seq     int
	wg      sync.WaitGroup
}

func newPipeline(ctx context.Context, cancel context.CancelFunc, opts DumpOptions) *pipeline {
	n := runtime.GOMAXPROCS(0)
	p := &pipeline{
		ctx:     ctx,
		cancel:  cancel,
		jobs:    make(chan *job, n),
		results: make(chan *job, maxInFlight),
		slots:   make(chan struct{}, maxInFlight),
		free:    make(chan *job, maxInFlight),
	}
	for range n {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			w := newWorker()
			w.keep, w.decode = opts.Keep, opts.Decode
			for j := range p.jobs {
				if ctx.Err() != nil {
					return
				}
				w.run(j)
				select {
				case p.results <- j:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		p.wg.Wait()
		close(p.results)
	}()
	return p
}

// newJob returns an empty job, waiting while maxInFlight jobs exist; nil
// when the context ends.
func (p *pipeline) newJob(kind jobKind, doc int) *job {
	select {
	case p.slots <- struct{}{}:
	case <-p.ctx.Done():
		return nil
	}
	var j *job
	select {
	case j = <-p.free:
		buf, ends := j.buf[:0], j.ends[:0]
		*j = job{buf: buf, ends: ends}
	default:
		j = &job{}
	}
	j.kind, j.doc = kind, doc
	return j
}

// send hands j to the workers; false when the context ended. Jobs are
// numbered here, so a job dropped unsent leaves no gap.
func (p *pipeline) send(j *job) bool {
	j.seq = p.seq
	p.seq++
	select {
	case p.jobs <- j:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// fail queues a reader error in input order.
func (p *pipeline) fail(doc int, err error) {
	if j := p.newJob(jobError, doc); j != nil {
		j.err = err
		p.send(j)
	}
}

func (p *pipeline) closeJobs() { close(p.jobs) }

// collect merges results in input order. On the first error, or when the
// context ends, it stops the pipeline and returns at once: a reader blocked
// in Read (a pipe) finishes in the background.
func (p *pipeline) collect() (*Dump, error) {
	d := &Dump{}
	pending := map[int]*job{}
	next := 0
	for {
		var j *job
		var ok bool
		select {
		case j, ok = <-p.results:
		case <-p.ctx.Done():
		}
		if err := p.ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDump, err)
		}
		if !ok {
			return d, nil
		}
		pending[j.seq] = j
		for {
			j, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if err := d.merge(j); err != nil {
				p.cancel()
				return nil, err
			}
			<-p.slots
			if len(j.buf) <= 2*batchBytes {
				select {
				case p.free <- j:
				default:
				}
			}
		}
	}
}

func (d *Dump) merge(j *job) error {
	if j.err != nil {
		return j.err
	}
	r := &j.res
	if r.err != nil {
		return r.err
	}
	d.Nodes = append(d.Nodes, r.nodes...)
	d.Pods = append(d.Pods, r.pods...)
	d.ControlPlanePods = append(d.ControlPlanePods, r.cp...)
	d.Objects = append(d.Objects, r.objects...)
	d.Skipped += r.skipped
	return nil
}

func where(doc, item int) string {
	if item < 0 {
		return fmt.Sprintf("document %d", doc)
	}
	return fmt.Sprintf("document %d item %d", doc, item)
}
