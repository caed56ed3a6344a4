package kubeadmcfg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// This file holds the YAML editor the package is built on. A document is
// kept as its original bytes. An edit is defined on a yaml.Node tree (which
// says what the edit means) and rendered as the smallest text change to the
// original bytes (a scalar token replaced, lines inserted or deleted), so
// every byte the edit does not touch survives: key order, comments, quoting,
// indentation. The text result is parsed again and must decode exactly like
// the edited tree; when it does not, or when the layout is too unusual to
// edit in place, the stream is re-encoded from the tree (key order and
// comments still survive) if the caller allows it, or the edit fails with
// ErrUnsupportedLayout.

// ypath addresses a node: a string selects a mapping key, an int a sequence item.
type ypath []any

// String renders the path as a field path: networking.podSubnet, extraArgs[0].
func (p ypath) String() string {
	var b strings.Builder
	for i, s := range p {
		switch s := s.(type) {
		case string:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		case int:
			fmt.Fprintf(&b, "[%d]", s)
		}
	}
	return b.String()
}

// yamlStream is a YAML stream being edited, one of whose documents is the target.
type yamlStream struct {
	src []byte
	// doc is the index of the edited document in the stream.
	doc int
	// reencode allows re-encoding the whole stream when an in-place edit is impossible.
	reencode bool
	// what names the stream in errors.
	what string
	// top caches the top node of the edited document; nil until parsed,
	// replaced after every edit, never modified, so readers may share it.
	top *yaml.Node
}

var errNoText = errors.New("no in-place edit for this layout")

// parseStream parses every document of src. It never panics.
func parseStream(src []byte) (docs []*yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			docs, err = nil, fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return nil, err
		}
		docs = append(docs, &n)
	}
}

// decodeDocs decodes each document into generic values, the meaning of the stream.
func decodeDocs(docs []*yaml.Node) (out []any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("YAML decoder failed: %v", r)
		}
	}()
	for _, d := range docs {
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseDecode(src []byte) ([]any, error) {
	docs, err := parseStream(src)
	if err != nil {
		return nil, err
	}
	return decodeDocs(docs)
}

func encodeDocs(docs []*yaml.Node, indent int) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("YAML encoder failed: %v", r)
		}
	}()
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(indent)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// keepLineComments moves the line comment of a block collection that is a
// mapping value onto its key. The parser gives the comment after
// "key: {a: b}" to the flow mapping; once an edit has made that mapping a
// block one, the encoder would drop it, and its place is after "key:".
func keepLineComments(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if (v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode) && v.Style&yaml.FlowStyle == 0 && v.LineComment != "" {
				k.LineComment = strings.TrimSpace(k.LineComment + " " + v.LineComment)
				v.LineComment = ""
			}
		}
	}
	for _, c := range n.Content {
		keepLineComments(c)
	}
}

// content returns the top node of a document node (nil for an empty document).
func content(doc *yaml.Node) *yaml.Node {
	if doc == nil {
		return nil
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		return doc.Content[0]
	}
	return doc
}

// mapGet returns the key and value nodes of key in mapping m, and the index
// of the key in m.Content (-1 when absent). With duplicate keys the last wins,
// as the decoder would refuse them anyway.
func mapGet(m *yaml.Node, key string) (k, v *yaml.Node, idx int) {
	idx = -1
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil, -1
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Kind == yaml.ScalarNode && m.Content[i].Value == key {
			k, v, idx = m.Content[i], m.Content[i+1], i
		}
	}
	return k, v, idx
}

// lookup follows p from n and returns the node found, or nil.
func lookup(n *yaml.Node, p ypath) *yaml.Node {
	for _, seg := range p {
		if n == nil {
			return nil
		}
		switch s := seg.(type) {
		case string:
			_, n, _ = mapGet(n, s)
		case int:
			if n.Kind != yaml.SequenceNode || s < 0 || s >= len(n.Content) {
				return nil
			}
			n = n.Content[s]
		}
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// strNode returns a string scalar node.
func strNode(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
}

func mapNode(kv ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: kv}
}

func seqNode(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

func strSeq(values []string) *yaml.Node {
	s := seqNode()
	for _, v := range values {
		s.Content = append(s.Content, strNode(v))
	}
	return s
}

const quoteStyles = yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle

// keepStyle gives a new scalar the quoting of the scalar it replaces (an
// empty string is quoted by necessity, not by choice, so it passes nothing on).
func keepStyle(old, val *yaml.Node) *yaml.Node {
	if old != nil && old.Kind == yaml.ScalarNode && old.Value != "" && val.Kind == yaml.ScalarNode && val.Style == 0 && old.Style&quoteStyles != 0 {
		c := *val
		c.Style = old.Style & quoteStyles
		return &c
	}
	return val
}

// replacement is val as it replaces old in the tree: with old's quoting
// (keepStyle), old's flow style when both are collections of one kind, and
// old's comments when val has none, so that a document the edit cannot
// render in place and re-encodes keeps the form and the comments it had.
func replacement(old, val *yaml.Node) *yaml.Node {
	c := *keepStyle(old, val)
	if (old.Kind == yaml.SequenceNode || old.Kind == yaml.MappingNode) && old.Kind == c.Kind && c.Style == 0 {
		c.Style = old.Style & yaml.FlowStyle
	}
	if c.HeadComment == "" && c.LineComment == "" && c.FootComment == "" {
		c.HeadComment, c.LineComment, c.FootComment = old.HeadComment, old.LineComment, old.FootComment
	}
	return &c
}

// insertIndex is where a new key goes among the keys of m: in order when the
// keys are sorted (kubeadm and sigs.k8s.io/yaml write them sorted), else last.
func insertIndex(m *yaml.Node, key string) int {
	var keys []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		keys = append(keys, m.Content[i].Value)
	}
	if sort.StringsAreSorted(keys) {
		return sort.SearchStrings(keys, key)
	}
	return len(keys)
}

// --- edits on the tree (the meaning of an edit) ---

func treeSet(n *yaml.Node, p ypath, val *yaml.Node) error {
	if n == nil {
		return fmt.Errorf("document is empty")
	}
	for i, seg := range p {
		last := i == len(p)-1
		switch s := seg.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return fmt.Errorf("%s is not a mapping", p[:i])
			}
			_, v, idx := mapGet(n, s)
			if last {
				if v == nil {
					at := insertIndex(n, s) * 2
					n.Content = slices.Insert(n.Content, at, strNode(s), val)
					n.Style &^= yaml.FlowStyle
				} else {
					n.Content[idx+1] = replacement(v, val)
				}
				return nil
			}
			if v == nil || isNull(v) {
				nv := mapNode()
				if v == nil {
					at := insertIndex(n, s) * 2
					n.Content = slices.Insert(n.Content, at, strNode(s), nv)
					n.Style &^= yaml.FlowStyle
				} else {
					n.Content[idx+1] = nv
				}
				v = nv
			}
			n = v
		case int:
			if n.Kind != yaml.SequenceNode || s < 0 || s >= len(n.Content) {
				return fmt.Errorf("%s has no item %d", p[:i], s)
			}
			if last {
				n.Content[s] = replacement(n.Content[s], val)
				return nil
			}
			n = n.Content[s]
		}
	}
	return nil
}

func treeDelete(n *yaml.Node, p ypath) error {
	if len(p) == 0 {
		return fmt.Errorf("empty path")
	}
	parent := lookup(n, p[:len(p)-1])
	switch s := p[len(p)-1].(type) {
	case string:
		_, _, idx := mapGet(parent, s)
		if idx < 0 {
			return fmt.Errorf("%s not found", p)
		}
		parent.Content = slices.Delete(parent.Content, idx, idx+2)
	case int:
		if parent == nil || parent.Kind != yaml.SequenceNode || s < 0 || s >= len(parent.Content) {
			return fmt.Errorf("%s not found", p)
		}
		parent.Content = slices.Delete(parent.Content, s, s+1)
	}
	return nil
}

func treeInsertItem(n *yaml.Node, p ypath, at int, item *yaml.Node) error {
	seq := lookup(n, p)
	if seq == nil || seq.Kind != yaml.SequenceNode || at < 0 || at > len(seq.Content) {
		return fmt.Errorf("%s is not a list with a position %d", p, at)
	}
	seq.Content = slices.Insert(seq.Content, at, item)
	return nil
}

// --- the text ---

type span struct {
	start, end int
	text       string
}

// textBuf indexes the lines of a source the way the YAML parser counts them.
type textBuf struct {
	src    []byte
	starts []int
	nl     string
	step   int  // indentation step of the document
	compat bool // block sequences under a key are not indented ("key:\n- a")
}

func newTextBuf(src []byte, root *yaml.Node) (*textBuf, bool) {
	// Line breaks the parser counts but a split on '\n' would not.
	for i, b := range src {
		if b == '\r' && (i+1 >= len(src) || src[i+1] != '\n') {
			return nil, false
		}
	}
	if bytes.ContainsRune(src, '\u0085') || bytes.ContainsRune(src, '\u2028') || bytes.ContainsRune(src, '\u2029') || bytes.HasPrefix(src, []byte("\xef\xbb\xbf")) {
		return nil, false
	}
	t := &textBuf{src: src, starts: []int{0}, nl: "\n"}
	for i, b := range src {
		if b == '\n' && i+1 < len(src) {
			t.starts = append(t.starts, i+1)
		}
	}
	if bytes.Contains(src, []byte("\r\n")) {
		t.nl = "\r\n"
	}
	t.step, t.compat = detectStyle(root)
	return t, true
}

// detectStyle finds the indentation step and sequence style a document uses.
func detectStyle(root *yaml.Node) (step int, compact bool) {
	var compactVotes, indentedVotes int
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil {
			return
		}
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				// A block collection's first entry on a line below its key
				// shows the indentation. The collection's own position is the
				// first dash of a sequence, unless an anchor or a tag on the
				// key's line holds it.
				if v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 && v.Content[0].Line > k.Line {
					switch {
					case v.Kind == yaml.MappingNode:
						if d := v.Content[0].Column - k.Column; d > 0 && (step == 0 || d < step) {
							step = d
						}
					case v.Kind == yaml.SequenceNode && v.Line > k.Line:
						if v.Column == k.Column {
							compactVotes++
						} else {
							indentedVotes++
						}
					}
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	if step == 0 {
		step = 2
	}
	return step, compactVotes >= indentedVotes
}

func (t *textBuf) lines() int { return len(t.starts) }

// lineStart returns the offset of 1-based line l.
func (t *textBuf) lineStart(l int) int { return t.starts[l-1] }

// lineNext returns the offset just after line l and its line break.
func (t *textBuf) lineNext(l int) int {
	if l < len(t.starts) {
		return t.starts[l]
	}
	return len(t.src)
}

// lineEnd returns the offset of the end of line l, before its line break.
func (t *textBuf) lineEnd(l int) int {
	e := t.lineNext(l)
	if e > t.lineStart(l) && t.src[e-1] == '\n' {
		e--
	}
	if e > t.lineStart(l) && t.src[e-1] == '\r' {
		e--
	}
	return e
}

func (t *textBuf) line(l int) string { return string(t.src[t.lineStart(l):t.lineEnd(l)]) }

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// offset converts a 1-based line and 1-based character column into a byte offset.
func (t *textBuf) offset(line, col int) (int, bool) {
	if line < 1 || line > t.lines() || col < 1 {
		return 0, false
	}
	off, end := t.lineStart(line), t.lineEnd(line)
	for c := 1; c < col; c++ {
		if off >= end {
			return 0, false
		}
		_, w := utf8.DecodeRune(t.src[off:end])
		off += w
	}
	return off, true
}

// scalarSpan returns the bytes of a single-line scalar token.
func (t *textBuf) scalarSpan(n *yaml.Node) (int, int, bool) {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle|yaml.TaggedStyle) != 0 || n.Anchor != "" {
		return 0, 0, false
	}
	start, ok := t.offset(n.Line, n.Column)
	if !ok {
		return 0, 0, false
	}
	s := t.src[start:t.lineEnd(n.Line)]
	switch {
	case n.Style&yaml.DoubleQuotedStyle != 0:
		if len(s) == 0 || s[0] != '"' {
			return 0, 0, false
		}
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '"':
				return start, start + i + 1, true
			}
		}
	case n.Style&yaml.SingleQuotedStyle != 0:
		if len(s) == 0 || s[0] != '\'' {
			return 0, 0, false
		}
		for i := 1; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					i++
					continue
				}
				return start, start + i + 1, true
			}
		}
	default:
		if n.Value == "" || strings.Contains(n.Value, "\n") || !bytes.HasPrefix(s, []byte(n.Value)) {
			return 0, 0, false
		}
		return start, start + len(n.Value), true
	}
	return 0, 0, false
}

// flowSpan returns the bytes of a single-line flow collection.
func (t *textBuf) flowSpan(n *yaml.Node) (int, int, bool) {
	if n.Style&yaml.FlowStyle == 0 || n.Anchor != "" || n.Tag != "" && n.Style&yaml.TaggedStyle != 0 {
		return 0, 0, false
	}
	start, ok := t.offset(n.Line, n.Column)
	if !ok {
		return 0, 0, false
	}
	s := t.src[start:t.lineEnd(n.Line)]
	if len(s) == 0 || (s[0] != '[' && s[0] != '{') {
		return 0, 0, false
	}
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				return start, start + i + 1, true
			}
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '\'':
			for i++; i < len(s); i++ {
				if s[i] == '\'' {
					if i+1 < len(s) && s[i+1] == '\'' {
						i++
						continue
					}
					break
				}
			}
		}
	}
	return 0, 0, false
}

// lastLine is the last line on which n or one of its descendants starts.
func lastLine(n *yaml.Node) int {
	m := n.Line
	for _, c := range n.Content {
		if l := lastLine(c); l > m {
			m = l
		}
	}
	return m
}

// extendEnd extends the last line of an entry whose first line is indented by
// indent over the lines that continue it (more indented: block scalar text,
// continuation lines, nested comments), but not over trailing blank lines.
func (t *textBuf) extendEnd(last, indent int) int {
	for l := last + 1; l <= t.lines(); l++ {
		s := t.line(l)
		if strings.TrimSpace(s) == "" {
			continue
		}
		if indentOf(s) > indent {
			last = l
			continue
		}
		break
	}
	return last
}

// startsLine reports whether n is the first thing on its line.
func (t *textBuf) startsLine(n *yaml.Node) bool {
	return n.Line >= 1 && n.Line <= t.lines() && indentOf(t.line(n.Line)) == n.Column-1
}

// itemPrefix returns the text before a block sequence item on its line
// ("  - "), when that text is only indentation and the dash.
func (t *textBuf) itemPrefix(item *yaml.Node) (string, bool) {
	start, ok := t.offset(item.Line, item.Column)
	if !ok {
		return "", false
	}
	pre := string(t.src[t.lineStart(item.Line):start])
	trimmed := strings.TrimSpace(pre)
	if trimmed != "-" || !strings.HasSuffix(pre, " ") {
		return "", false
	}
	return pre, true
}

// insertBefore inserts lines before line l.
func (t *textBuf) insertBefore(l int, lines []string) span {
	at := t.lineStart(l)
	return span{at, at, strings.Join(lines, t.nl) + t.nl}
}

// insertAfter inserts lines after line l.
func (t *textBuf) insertAfter(l int, lines []string) span {
	at := t.lineNext(l)
	if at == len(t.src) && (len(t.src) == 0 || t.src[len(t.src)-1] != '\n') {
		return span{at, at, t.nl + strings.Join(lines, t.nl)}
	}
	return span{at, at, strings.Join(lines, t.nl) + t.nl}
}

// deleteLines removes lines from..to inclusive.
func (t *textBuf) deleteLines(from, to int) span {
	return span{t.lineStart(from), t.lineNext(to), ""}
}

func (t *textBuf) apply(spans []span) []byte {
	slices.SortFunc(spans, func(a, b span) int { return b.start - a.start })
	out := slices.Clone(t.src)
	for _, s := range spans {
		out = slices.Concat(out[:s.start], []byte(s.text), out[s.end:])
	}
	return out
}

// renderScalar renders a scalar as one line of YAML.
func renderScalar(n *yaml.Node) (s string, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = "", fmt.Errorf("YAML encoder failed: %v", r)
		}
	}()
	c := *n
	c.Line, c.Column = 0, 0
	out, err := yaml.Marshal(&c)
	if err != nil {
		return "", err
	}
	s = strings.TrimSuffix(string(out), "\n")
	if strings.Contains(s, "\n") {
		return "", errNoText
	}
	return s, nil
}

// renderFlow renders a node as one line of flow-style YAML.
func renderFlow(n *yaml.Node) (string, error) {
	if n.Kind == yaml.ScalarNode {
		return renderScalar(n)
	}
	var parts []string
	for i, c := range n.Content {
		s, err := renderFlow(c)
		if err != nil {
			return "", err
		}
		if n.Kind == yaml.MappingNode {
			if i%2 == 0 {
				parts = append(parts, s)
			} else {
				parts[len(parts)-1] += ": " + s
			}
			continue
		}
		parts = append(parts, s)
	}
	if n.Kind == yaml.MappingNode {
		return "{" + strings.Join(parts, ", ") + "}", nil
	}
	return "[" + strings.Join(parts, ", ") + "]", nil
}

// renderKV renders key: value in block style at the given indentation.
func (t *textBuf) renderKV(key string, v *yaml.Node, indent int) ([]string, error) {
	pad := strings.Repeat(" ", indent)
	k, err := renderScalar(strNode(key))
	if err != nil {
		return nil, err
	}
	switch v.Kind {
	case yaml.ScalarNode:
		s, err := renderScalar(v)
		if err != nil {
			return nil, err
		}
		return []string{pad + k + ": " + s}, nil
	case yaml.MappingNode:
		if len(v.Content) == 0 {
			return []string{pad + k + ": {}"}, nil
		}
		out := []string{pad + k + ":"}
		for i := 0; i+1 < len(v.Content); i += 2 {
			lines, err := t.renderKV(v.Content[i].Value, v.Content[i+1], indent+t.step)
			if err != nil {
				return nil, err
			}
			out = append(out, lines...)
		}
		return out, nil
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			return []string{pad + k + ": []"}, nil
		}
		out := []string{pad + k + ":"}
		at := indent
		if !t.compat {
			at += t.step
		}
		for _, item := range v.Content {
			lines, err := t.renderItem(item, strings.Repeat(" ", at)+"- ")
			if err != nil {
				return nil, err
			}
			out = append(out, lines...)
		}
		return out, nil
	}
	return nil, errNoText
}

// renderItem renders a sequence item whose first line starts with prefix ("  - ").
func (t *textBuf) renderItem(item *yaml.Node, prefix string) ([]string, error) {
	switch item.Kind {
	case yaml.ScalarNode:
		s, err := renderScalar(item)
		if err != nil {
			return nil, err
		}
		return []string{prefix + s}, nil
	case yaml.MappingNode:
		if len(item.Content) == 0 {
			return []string{prefix + "{}"}, nil
		}
		var out []string
		for i := 0; i+1 < len(item.Content); i += 2 {
			lines, err := t.renderKV(item.Content[i].Value, item.Content[i+1], len(prefix))
			if err != nil {
				return nil, err
			}
			out = append(out, lines...)
		}
		out[0] = prefix + out[0][len(prefix):]
		return out, nil
	}
	return nil, errNoText
}

// --- edits on the text (the same edits, as minimal changes) ---

// textSet renders treeSet(root, p, val) as text changes.
func (t *textBuf) textSet(root *yaml.Node, p ypath, val *yaml.Node) ([]span, error) {
	n := root
	var parentKey *yaml.Node
	for i, seg := range p {
		last := i == len(p)-1
		switch s := seg.(type) {
		case string:
			if n == nil || n.Kind != yaml.MappingNode {
				return nil, errNoText
			}
			k, v, _ := mapGet(n, s)
			if v == nil {
				return t.insertKey(n, parentKey, p[i:], val)
			}
			if last {
				return t.replaceValue(k, v, val)
			}
			if isNull(v) {
				return nil, errNoText
			}
			parentKey, n = k, v
		case int:
			if n == nil || n.Kind != yaml.SequenceNode || s < 0 || s >= len(n.Content) {
				return nil, errNoText
			}
			if last {
				return t.replaceValue(nil, n.Content[s], val)
			}
			parentKey, n = nil, n.Content[s]
		}
	}
	return nil, errNoText
}

// replaceValue replaces the value old (of key k, nil for a sequence item) with val.
func (t *textBuf) replaceValue(k, old, val *yaml.Node) ([]span, error) {
	val = keepStyle(old, val)
	switch {
	case old.Kind == yaml.ScalarNode && val.Kind == yaml.ScalarNode:
		s, err := renderScalar(val)
		if err != nil {
			return nil, err
		}
		if isNull(old) && old.Value == "" {
			// key: (nothing) — write the value after the colon.
			if k == nil {
				return nil, errNoText
			}
			_, ke, ok := t.scalarSpan(k)
			if !ok {
				return nil, errNoText
			}
			i := ke
			for i < len(t.src) && t.src[i] == ' ' {
				i++
			}
			if i >= len(t.src) || t.src[i] != ':' {
				return nil, errNoText
			}
			return []span{{i + 1, i + 1, " " + s}}, nil
		}
		a, b, ok := t.scalarSpan(old)
		if !ok {
			return nil, errNoText
		}
		return []span{{a, b, s}}, nil
	case old.Style&yaml.FlowStyle != 0 && (old.Kind == yaml.SequenceNode || old.Kind == yaml.MappingNode):
		a, b, ok := t.flowSpan(old)
		if !ok {
			return nil, errNoText
		}
		s, err := renderFlow(val)
		if err != nil {
			return nil, err
		}
		return []span{{a, b, s}}, nil
	case old.Kind == yaml.SequenceNode && val.Kind == yaml.SequenceNode && len(old.Content) > 0 && len(val.Content) > 0:
		return t.replaceBlockList(old, val)
	}
	return nil, errNoText
}

// replaceBlockList rewrites a block sequence of one-line scalars item by item.
func (t *textBuf) replaceBlockList(old, val *yaml.Node) ([]span, error) {
	var prefix string
	for _, it := range slices.Concat(old.Content, val.Content) {
		if it.Kind != yaml.ScalarNode {
			return nil, errNoText
		}
	}
	for _, it := range old.Content {
		p, ok := t.itemPrefix(it)
		if !ok {
			return nil, errNoText
		}
		prefix = p
	}
	var spans []span
	for i, it := range old.Content {
		if i >= len(val.Content) {
			spans = append(spans, t.deleteLines(it.Line, t.extendEnd(lastLine(it), indentOf(prefix))))
			continue
		}
		s, err := renderScalar(keepStyle(it, val.Content[i]))
		if err != nil {
			return nil, err
		}
		a, b, ok := t.scalarSpan(it)
		if !ok {
			return nil, errNoText
		}
		spans = append(spans, span{a, b, s})
	}
	if len(val.Content) > len(old.Content) {
		var lines []string
		for _, it := range val.Content[len(old.Content):] {
			l, err := t.renderItem(it, prefix)
			if err != nil {
				return nil, err
			}
			lines = append(lines, l...)
		}
		lastItem := old.Content[len(old.Content)-1]
		spans = append(spans, t.insertAfter(t.extendEnd(lastLine(lastItem), indentOf(prefix)), lines))
	}
	return spans, nil
}

// insertKey inserts the missing path rest (its first element a key of m) with val.
func (t *textBuf) insertKey(m, parentKey *yaml.Node, rest ypath, val *yaml.Node) ([]span, error) {
	for j := len(rest) - 1; j >= 1; j-- {
		s, ok := rest[j].(string)
		if !ok {
			return nil, errNoText
		}
		val = mapNode(strNode(s), val)
	}
	key, ok := rest[0].(string)
	if !ok {
		return nil, errNoText
	}
	if m.Style&yaml.FlowStyle != 0 {
		// key: {}  becomes  key:\n  new: value
		if len(m.Content) != 0 || parentKey == nil || !t.startsLine(parentKey) {
			return nil, errNoText
		}
		a, b, ok := t.flowSpan(m)
		if !ok || m.Line != parentKey.Line {
			return nil, errNoText
		}
		for a > 0 && t.src[a-1] == ' ' {
			a--
		}
		lines, err := t.renderKV(key, val, parentKey.Column-1+t.step)
		if err != nil {
			return nil, err
		}
		return []span{{a, b, ""}, t.insertAfter(m.Line, lines)}, nil
	}
	if len(m.Content) == 0 {
		return nil, errNoText
	}
	indent := m.Content[0].Column - 1
	lines, err := t.renderKV(key, val, indent)
	if err != nil {
		return nil, err
	}
	at := insertIndex(m, key)
	if at < len(m.Content)/2 {
		kn := m.Content[2*at]
		if t.startsLine(kn) {
			l := kn.Line
			for l > 1 && strings.HasPrefix(strings.TrimSpace(t.line(l-1)), "#") && indentOf(t.line(l-1)) == indent {
				l--
			}
			return []span{t.insertBefore(l, lines)}, nil
		}
	}
	lk, lv := m.Content[len(m.Content)-2], m.Content[len(m.Content)-1]
	end := t.extendEnd(max(lastLine(lk), lastLine(lv)), indent)
	return []span{t.insertAfter(end, lines)}, nil
}

// textDelete renders treeDelete(root, p) as text changes.
func (t *textBuf) textDelete(root *yaml.Node, p ypath) ([]span, error) {
	parent := lookup(root, p[:len(p)-1])
	if parent == nil || parent.Style&yaml.FlowStyle != 0 || len(parent.Content) < 1 {
		return nil, errNoText
	}
	var spans []span
	only := false
	switch s := p[len(p)-1].(type) {
	case string:
		k, v, _ := mapGet(parent, s)
		if k == nil || !t.startsLine(k) {
			return nil, errNoText
		}
		end := t.extendEnd(max(lastLine(k), lastLine(v)), k.Column-1)
		spans = append(spans, t.deleteLines(k.Line, end))
		only = len(parent.Content) == 2
	case int:
		if s < 0 || s >= len(parent.Content) {
			return nil, errNoText
		}
		it := parent.Content[s]
		pre, ok := t.itemPrefix(it)
		if !ok {
			return nil, errNoText
		}
		spans = append(spans, t.deleteLines(it.Line, t.extendEnd(lastLine(it), indentOf(pre))))
		only = len(parent.Content) == 1
	}
	if only {
		// The collection becomes empty: write it as {} or [] after its key.
		if len(p) < 2 {
			return nil, errNoText
		}
		pkName, ok := p[len(p)-2].(string)
		if !ok {
			return nil, errNoText
		}
		pk, _, _ := mapGet(lookup(root, p[:len(p)-2]), pkName)
		if pk == nil || pk.Line >= parent.Line || !strings.HasSuffix(strings.TrimRight(t.line(pk.Line), " "), ":") {
			return nil, errNoText
		}
		empty := " {}"
		if parent.Kind == yaml.SequenceNode {
			empty = " []"
		}
		e := t.lineEnd(pk.Line)
		for e > t.lineStart(pk.Line) && t.src[e-1] == ' ' {
			e--
		}
		spans = append(spans, span{e, t.lineEnd(pk.Line), empty})
	}
	return spans, nil
}

// textInsertItem renders treeInsertItem(root, p, at, item) as text changes.
func (t *textBuf) textInsertItem(root *yaml.Node, p ypath, at int, item *yaml.Node) ([]span, error) {
	seq := lookup(root, p)
	if seq == nil || seq.Kind != yaml.SequenceNode || seq.Style&yaml.FlowStyle != 0 || len(seq.Content) == 0 {
		return nil, errNoText
	}
	anchor := seq.Content[max(at-1, 0)]
	pre, ok := t.itemPrefix(anchor)
	if !ok {
		return nil, errNoText
	}
	lines, err := t.renderItem(item, pre)
	if err != nil {
		return nil, err
	}
	if at == 0 {
		return []span{t.insertBefore(anchor.Line, lines)}, nil
	}
	return []span{t.insertAfter(t.extendEnd(lastLine(anchor), indentOf(pre)), lines)}, nil
}

// --- the stream operations ---

func (y *yamlStream) set(p ypath, val *yaml.Node) error {
	return y.edit(p, func(root *yaml.Node) error { return treeSet(root, p, val) },
		func(t *textBuf, root *yaml.Node) ([]span, error) { return t.textSet(root, p, val) })
}

func (y *yamlStream) del(p ypath) error {
	return y.edit(p, func(root *yaml.Node) error { return treeDelete(root, p) },
		func(t *textBuf, root *yaml.Node) ([]span, error) { return t.textDelete(root, p) })
}

func (y *yamlStream) insertItem(p ypath, at int, item *yaml.Node) error {
	return y.edit(p, func(root *yaml.Node) error { return treeInsertItem(root, p, at, item) },
		func(t *textBuf, root *yaml.Node) ([]span, error) { return t.textInsertItem(root, p, at, item) })
}

// root returns the top node of the edited document (parsed once per version
// of the text). The node must not be modified.
func (y *yamlStream) root() (*yaml.Node, error) {
	if y.top != nil {
		return y.top, nil
	}
	docs, err := parseStream(y.src)
	if err != nil {
		return nil, err
	}
	if y.doc >= len(docs) {
		return nil, fmt.Errorf("document %d not found", y.doc)
	}
	y.top = content(docs[y.doc])
	return y.top, nil
}

// replace installs an edited text and drops the cached tree.
func (y *yamlStream) replace(src []byte) {
	y.src = src
	y.top = nil
	_, _ = y.root()
}

func (y *yamlStream) edit(p ypath, tree func(*yaml.Node) error, text func(*textBuf, *yaml.Node) ([]span, error)) error {
	fail := func(err error) error {
		return &FieldError{Source: y.what, Field: p.String(), Reason: err.Error(), Err: ErrInvalid}
	}
	docs, err := parseStream(y.src)
	if err != nil {
		return fail(err)
	}
	if y.doc >= len(docs) {
		return fail(fmt.Errorf("document %d not found", y.doc))
	}
	if err := tree(content(docs[y.doc])); err != nil {
		return fail(err)
	}
	want, err := decodeDocs(docs)
	if err != nil {
		return fail(err)
	}
	why := errNoText
	pos, err := parseStream(y.src)
	if err != nil {
		return fail(err)
	}
	if t, ok := newTextBuf(y.src, content(pos[y.doc])); ok {
		spans, err := text(t, content(pos[y.doc]))
		if err == nil {
			out := t.apply(spans)
			if got, err := parseDecode(out); err == nil && reflect.DeepEqual(got, want) {
				y.replace(out)
				return nil
			}
			why = errors.New("the in-place edit did not read back as intended")
		} else {
			why = err
		}
	}
	if !y.reencode {
		return &FieldError{Source: y.what, Field: p.String(), Reason: why.Error(), Err: ErrUnsupportedLayout}
	}
	step := 2
	if t, ok := newTextBuf(y.src, content(pos[y.doc])); ok {
		step = t.step
	}
	for _, d := range docs {
		keepLineComments(d)
	}
	out, err := encodeDocs(docs, step)
	if err != nil {
		return fail(err)
	}
	if got, err := parseDecode(out); err != nil || !reflect.DeepEqual(got, want) {
		return fail(errors.New("re-encoding the document changed its meaning"))
	}
	y.replace(out)
	return nil
}
