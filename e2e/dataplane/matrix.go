package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Target is something pods connect to.
type Target struct {
	// Name labels the matrix column.
	Name string
	Addr netip.AddrPort
	// Responders are the echo servers that may answer (a pod name, the
	// backends of a Service, "outside").
	Responders []string
	// Source returns the client address the responder must see for a
	// connection from pod p; nil accepts any.
	Source func(p *Pod) netip.Addr
	// Of is the pod the target belongs to: it does not probe itself.
	Of string
}

// PodTarget is a pod's echo server: only that pod may answer, and it must
// see the client pod's own address (no SNAT between pods).
func PodTarget(p *Pod) Target {
	return Target{
		Name: p.Name, Addr: netip.AddrPortFrom(p.IP, EchoPort), Responders: []string{p.Name},
		Source: func(c *Pod) netip.Addr { return c.IP }, Of: p.Name,
	}
}

// PodTarget6 is a dual-stack pod's echo server on its IPv6 address (column
// "<pod>/v6"): only that pod may answer, and it must see the client pod's
// own IPv6 address.
func PodTarget6(p *Pod) Target {
	return Target{
		Name: p.Name + "/v6", Addr: netip.AddrPortFrom(p.IP6, EchoPort), Responders: []string{p.Name},
		Source: func(c *Pod) netip.Addr { return c.IP6 }, Of: p.Name,
	}
}

// OutsideTarget is the outside namespace's echo server: it must see the
// client pod's node address (flannel's MASQUERADE for traffic leaving the
// pod network).
func OutsideTarget() Target {
	return Target{
		Name: "outside", Addr: netip.AddrPortFrom(OutsideIP, EchoPort), Responders: []string{"outside"},
		Source: func(c *Pod) netip.Addr { return c.Node.IP },
	}
}

// ServiceTarget is a ClusterIP whose endpoints are the given pods; the
// source is not checked (kube-proxy may masquerade hairpin traffic).
func ServiceTarget(name string, ip netip.Addr, port int, backends ...*Pod) Target {
	t := Target{Name: name, Addr: netip.AddrPortFrom(ip, uint16(port))}
	for _, b := range backends {
		t.Responders = append(t.Responders, b.Name)
	}
	return t
}

// Cell is one pod -> target result.
type Cell struct {
	From, To string
	Reply    EchoReply
	Err      error
	// Problem is empty when the connection worked as expected.
	Problem string
}

// OK reports whether the cell passed.
func (c Cell) OK() bool { return c.Problem == "" }

// Matrix is the result of Check.
type Matrix struct {
	From  []string
	To    []string
	Cells []Cell
}

// ProbeOptions bound each connection attempt.
type ProbeOptions struct {
	Timeout  time.Duration // per attempt, default 1s
	Attempts int           // default 3
	Gap      time.Duration // between attempts, default 300ms
}

func (o *ProbeOptions) complete() {
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.Attempts == 0 {
		o.Attempts = 3
	}
	if o.Gap == 0 {
		o.Gap = 300 * time.Millisecond
	}
}

// Check connects from every pod to every target (a pod's own echo server
// excluded), with bounded retries, in parallel. It never fails a test
// itself: callers assert on the Matrix, on the test goroutine.
func Check(pods []*Pod, targets []Target, opts ProbeOptions) *Matrix {
	opts.complete()
	m := &Matrix{}
	for _, p := range pods {
		m.From = append(m.From, p.Name)
	}
	for _, t := range targets {
		m.To = append(m.To, t.Name)
	}
	type job struct {
		p *Pod
		t Target
	}
	var jobs []job
	for _, p := range pods {
		for _, t := range targets {
			if t.Name == p.Name || t.Of == p.Name {
				continue
			}
			jobs = append(jobs, job{p, t})
		}
	}
	m.Cells = make([]Cell, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m.Cells[i] = probeCell(j.p, j.t, opts)
		}()
	}
	wg.Wait()
	return m
}

func probeCell(p *Pod, t Target, opts ProbeOptions) Cell {
	c := Cell{From: p.Name, To: t.Name}
	for a := 0; a < opts.Attempts; a++ {
		if a > 0 {
			time.Sleep(opts.Gap)
		}
		c.Reply, c.Err = Probe(p.NS, t.Addr, opts.Timeout)
		c.Problem = judge(p, t, c)
		if c.Problem == "" {
			return c
		}
	}
	return c
}

func judge(p *Pod, t Target, c Cell) string {
	if c.Err != nil {
		return c.Err.Error()
	}
	if !slices.Contains(t.Responders, c.Reply.Responder) {
		return fmt.Sprintf("answered by %s, want %s", c.Reply.Responder, strings.Join(t.Responders, " or "))
	}
	if t.Source != nil {
		if want := t.Source(p); c.Reply.Source != want {
			return fmt.Sprintf("server saw source %s, want %s", c.Reply.Source, want)
		}
	}
	return ""
}

// Failing returns the failed cells.
func (m *Matrix) Failing() []Cell {
	var out []Cell
	for _, c := range m.Cells {
		if !c.OK() {
			out = append(out, c)
		}
	}
	return out
}

// FailingPods returns the sorted names of pods (as source or target) in a
// failed cell; targets that are not pods are included by name too.
func (m *Matrix) FailingPods() []string {
	set := map[string]bool{}
	for _, c := range m.Failing() {
		set[c.From] = true
		set[c.To] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Full reports whether every cell passed.
func (m *Matrix) Full() bool { return len(m.Failing()) == 0 }

// String prints the matrix ("." passed, "X" failed, " " not probed) and
// names every failing pair with the reason.
func (m *Matrix) String() string {
	cell := map[[2]string]Cell{}
	for _, c := range m.Cells {
		cell[[2]string{c.From, c.To}] = c
	}
	w := 4
	for _, s := range append(slices.Clone(m.From), m.To...) {
		w = max(w, len(s))
	}
	var b strings.Builder
	ok := len(m.Cells) - len(m.Failing())
	fmt.Fprintf(&b, "connectivity %d/%d (rows: from, columns: to)\n", ok, len(m.Cells))
	fmt.Fprintf(&b, "%-*s", w+1, "")
	for _, to := range m.To {
		fmt.Fprintf(&b, " %-*s", w, to)
	}
	b.WriteString("\n")
	for _, from := range m.From {
		fmt.Fprintf(&b, "%-*s", w+1, from)
		for _, to := range m.To {
			mark := " "
			if c, found := cell[[2]string{from, to}]; found {
				mark = "."
				if !c.OK() {
					mark = "X"
				}
			}
			fmt.Fprintf(&b, " %-*s", w, mark)
		}
		b.WriteString("\n")
	}
	for _, c := range m.Failing() {
		fmt.Fprintf(&b, "FAIL %s -> %s: %s\n", c.From, c.To, c.Problem)
	}
	return b.String()
}

// FailuresNotTouching returns the failed cells in which neither end is one
// of names: failures the named pods do not explain.
func (m *Matrix) FailuresNotTouching(names ...string) []Cell {
	var out []Cell
	for _, c := range m.Failing() {
		if !slices.Contains(names, c.From) && !slices.Contains(names, c.To) {
			out = append(out, c)
		}
	}
	return out
}

// BrokenExactly reports whether the failures are explained by exactly the
// named pods: every failed cell has one of them at an end, and each of
// them is at an end of some failed cell.
func (m *Matrix) BrokenExactly(names ...string) bool {
	if len(m.FailuresNotTouching(names...)) > 0 {
		return false
	}
	touched := m.FailingPods()
	for _, n := range names {
		if !slices.Contains(touched, n) {
			return false
		}
	}
	return true
}
