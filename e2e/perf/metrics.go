package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// RequestKey groups kube-apiserver requests. Verb is the metric's verb
// (GET, LIST, WATCH, POST, PUT, PATCH, DELETE, ...) or the audit verb in
// capitals; Resource is empty for non-resource URLs.
type RequestKey struct {
	Verb, Resource, Subresource string
}

func (k RequestKey) String() string {
	r := k.Resource
	if r == "" {
		r = "(non-resource)"
	}
	if k.Subresource != "" {
		r += "/" + k.Subresource
	}
	return k.Verb + " " + r
}

// IsWrite says whether the verb changes state.
func (k RequestKey) IsWrite() bool {
	switch k.Verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE":
		return true
	}
	return false
}

// Counts are request counts by key.
type Counts map[RequestKey]float64

// Total sums the counts selected by keep (all when keep is nil).
func (c Counts) Total(keep func(RequestKey) bool) float64 {
	var n float64
	for k, v := range c {
		if keep == nil || keep(k) {
			n += v
		}
	}
	return n
}

// Writes sums the write requests.
func (c Counts) Writes() float64 { return c.Total(RequestKey.IsWrite) }

// Sub returns c - old per key, dropping zeros.
func (c Counts) Sub(old Counts) Counts {
	out := Counts{}
	for k, v := range c {
		if d := v - old[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Breakdown renders the counts divided by per as "VERB resource x.y, ...",
// largest first, leaving out those under 0.01 and, when top > 0, all but
// the top largest.
func (c Counts) Breakdown(per float64, top int) string {
	keys := make([]RequestKey, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b RequestKey) int {
		if c[a] != c[b] {
			if c[a] > c[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a.String(), b.String())
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if c[k]/per < 0.005 || (top > 0 && len(parts) == top) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", k, trimFloat(c[k]/per)))
	}
	return strings.Join(parts, ", ")
}

func trimFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-" {
		return "0"
	}
	return s
}

// Latency is the sum and count of apiserver_request_duration_seconds.
type Latency struct{ Sum, Count float64 }

// Mean is the average request duration.
func (l Latency) Mean() time.Duration {
	if l.Count == 0 {
		return 0
	}
	return time.Duration(l.Sum / l.Count * float64(time.Second))
}

// Metrics is what perf reads from kube-apiserver's /metrics.
type Metrics struct {
	// Requests is apiserver_request_total summed over codes, groups and scopes.
	Requests Counts
	// Latency is apiserver_request_duration_seconds by key.
	Latency map[RequestKey]Latency
}

// Sub returns m - old.
func (m *Metrics) Sub(old *Metrics) *Metrics {
	out := &Metrics{Requests: m.Requests.Sub(old.Requests), Latency: map[RequestKey]Latency{}}
	for k, v := range m.Latency {
		o := old.Latency[k]
		if d := (Latency{Sum: v.Sum - o.Sum, Count: v.Count - o.Count}); d.Count != 0 {
			out.Latency[k] = d
		}
	}
	return out
}

// ScrapeAPIServer reads kube-apiserver's /metrics through client (for
// example clientset.CoreV1().RESTClient()).
func ScrapeAPIServer(ctx context.Context, client rest.Interface) (*Metrics, error) {
	data, err := client.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver /metrics: %w", err)
	}
	return ParseMetrics(data)
}

// ParseMetrics reads apiserver_request_total and
// apiserver_request_duration_seconds_{sum,count} from Prometheus text.
func ParseMetrics(data []byte) (*Metrics, error) {
	m := &Metrics{Requests: Counts{}, Latency: map[RequestKey]Latency{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		var name string
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			name = "total"
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_sum{"):
			name = "sum"
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_count{"):
			name = "count"
		default:
			continue
		}
		open := strings.IndexByte(line, '{')
		close := strings.LastIndexByte(line, '}')
		if close < open {
			return nil, fmt.Errorf("metrics line %q: no closing brace", line)
		}
		labels, err := parseLabels(line[open+1 : close])
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		v, err := strconv.ParseFloat(strings.Fields(line[close+1:])[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: value: %w", line, err)
		}
		if labels["dry_run"] != "" {
			continue
		}
		k := RequestKey{Verb: labels["verb"], Resource: labels["resource"], Subresource: labels["subresource"]}
		switch name {
		case "total":
			m.Requests[k] += v
		case "sum":
			l := m.Latency[k]
			l.Sum += v
			m.Latency[k] = l
		case "count":
			l := m.Latency[k]
			l.Count += v
			m.Latency[k] = l
		}
	}
	return m, sc.Err()
}

// parseLabels parses `a="x",b="y\"z"`.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, fmt.Errorf("bad label list at %q", s)
		}
		name := s[:eq]
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				if s[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated label value at %q", s)
		}
		out[name] = val.String()
		s = strings.TrimPrefix(s[i+1:], ",")
	}
	return out, nil
}

// AuditPolicy logs every request at Metadata level except node Lease
// renewals (kwok renews one per node every 10 s) and health and metrics
// probes, so the log attributes the rest to their clients by user agent.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
- level: None
  nonResourceURLs: ["/metrics", "/healthz*", "/readyz*", "/livez*"]
- level: Metadata
`

type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// ReadAudit reads the audit log at path from byte offset from and counts
// the requests per client, the client being the user agent up to its first
// "/" or space ("kubectl", "cidrshift-noderecreate", "kwok", ...). A watch
// counts when its response starts, every other request when it completes.
// It returns the offset to read from next time.
func ReadAudit(path string, from int64) (map[string]Counts, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, from, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, from, err
	}
	out := map[string]Counts{}
	r := bufio.NewReaderSize(f, 1<<20)
	off := from
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			// A partial last line is read next time.
			return out, off, nil
		}
		if err != nil {
			return nil, off, err
		}
		off += int64(len(line))
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, off, fmt.Errorf("audit log %s: %w", path, err)
		}
		if ev.Verb == "watch" {
			if ev.Stage != "ResponseStarted" {
				continue
			}
		} else if ev.Stage != "ResponseComplete" && ev.Stage != "Panic" {
			continue
		}
		k := RequestKey{Verb: strings.ToUpper(ev.Verb)}
		if ev.ObjectRef != nil {
			k.Resource, k.Subresource = ev.ObjectRef.Resource, ev.ObjectRef.Subresource
		}
		client := ev.UserAgent
		if i := strings.IndexAny(client, "/ "); i >= 0 {
			client = client[:i]
		}
		if out[client] == nil {
			out[client] = Counts{}
		}
		out[client][k]++
	}
}

// LoadAvg returns the 1, 5 and 15 minute load averages as uptime prints them.
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TimeV is what GNU time -v reports about a command.
type TimeV struct {
	Wall     time.Duration
	User     time.Duration
	System   time.Duration
	MaxRSSKB int64
}

// ParseTimeV reads GNU time -v's report from a command's standard error.
func ParseTimeV(stderr string) (TimeV, error) {
	var t TimeV
	found := 0
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		key, val, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Elapsed (wall clock) time (h:mm:ss or m:ss)":
			d, err := parseClock(val)
			if err != nil {
				return t, err
			}
			t.Wall = d
			found++
		case "User time (seconds)":
			f, _ := strconv.ParseFloat(val, 64)
			t.User = time.Duration(f * float64(time.Second))
		case "System time (seconds)":
			f, _ := strconv.ParseFloat(val, 64)
			t.System = time.Duration(f * float64(time.Second))
		case "Maximum resident set size (kbytes)":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return t, fmt.Errorf("time -v: max RSS %q: %w", val, err)
			}
			t.MaxRSSKB = n
			found++
		}
	}
	if found < 2 {
		return t, fmt.Errorf("no GNU time -v report in %q", tail(stderr, 400))
	}
	return t, nil
}

// parseClock parses "h:mm:ss" or "m:ss.ss".
func parseClock(s string) (time.Duration, error) {
	parts := strings.Split(s, ":")
	var d float64
	for _, p := range parts {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return 0, fmt.Errorf("time -v: wall clock %q: %w", s, err)
		}
		d = d*60 + f
	}
	return time.Duration(d * float64(time.Second)), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
