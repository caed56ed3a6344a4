package nodecidr

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
)

// The fast path reads one object of the block-style YAML that kubectl
// writes (go-yaml v2's emitter, through sigs.k8s.io/yaml) line by line and
// extracts apiVersion, kind and the fields of a PodSummary. It never decodes
// anything else, but it checks every line, so that it only succeeds on text
// that sigs.k8s.io/yaml converts to JSON without error and for which the
// full decoder (dump_decode.go) yields exactly the same fields. Whenever it
// is not certain (tabs, carriage returns, non-ASCII or control characters,
// comments, anchors, aliases, tags, directives, flow collections other than
// {} and [], quoted scalars that span lines or hold escapes, explicit block
// scalar indentation, a wanted field written in an unusual form or twice,
// keys that JSON would match to a wanted field case-insensitively, values
// YAML resolves to ±Inf or NaN, null or merge keys, ...) it gives up and
// the item goes to the full decoder.
//
// The subset it accepts, with n the column of the enclosing collection:
//
//	key: value            plain (no ": ", " #", trailing ':'), continued
//	                      on lines indented more than n; '...' or "..." on
//	                      one line; {} or []; a block scalar header | |- |+
//	                      > >- >+ and its lines
//	key:                  followed by a deeper block, a "- " sequence at the
//	                      same column, or nothing (null)
//	- item                sequence entries; an entry may hold a mapping
//	                      whose first key is on the "- " line, or another
//	                      sequence ("- - a")

type fastPod struct {
	apiVersion, kind           []byte
	name, namespace, component []byte
	nodeName, phase, podIP     []byte
	hostNetwork                bool
	podIPs                     [][]byte
	// items: the object has a key "items" (in any case).
	items bool

	// emit: also write the object as JSON to out, with the values
	// sigs.k8s.io/yaml would give them (used for Nodes).
	emit bool
	out  []byte
	keys [][]byte // keys of the open mappings, for duplicate checks
	fold []byte   // scratch for folded plain scalars

	buf  []byte
	next int    // offset of the line after the current one
	line []byte // the current line, without its line break
	ind  int    // its indentation
	eof  bool
	bad  bool // a line with a character the fast path does not handle
}

// Where a mapping or sequence lies, as far as the fast path is concerned.
type fctx uint8

const (
	ctxSkip   fctx = iota // nothing wanted below
	ctxTop                // the object
	ctxMeta               // metadata
	ctxLabels             // metadata.labels
	ctxSpec               // spec
	ctxStatus             // status
	ctxPodIPs             // status.podIPs (a sequence)
	ctxPodIP              // an element of status.podIPs
)

// What a key is wanted for.
type fwant uint8

const (
	wNone fwant = iota
	wAPIVersion
	wKind
	wMeta
	wSpec
	wStatus
	wName
	wNamespace
	wLabels
	wComponent
	wNodeName
	wHostNetwork
	wPhase
	wPodIP
	wPodIPs
	wIP
)

type wantedKey struct {
	name string
	want fwant
}

// Keys JSON matches to the struct fields of podJSON (case-insensitively).
var wantedKeys = [...][]wantedKey{
	ctxTop:    {{"apiVersion", wAPIVersion}, {"kind", wKind}, {"metadata", wMeta}, {"spec", wSpec}, {"status", wStatus}},
	ctxMeta:   {{"name", wName}, {"namespace", wNamespace}, {"labels", wLabels}},
	ctxSpec:   {{"nodeName", wNodeName}, {"hostNetwork", wHostNetwork}},
	ctxStatus: {{"phase", wPhase}, {"podIP", wPodIP}, {"podIPs", wPodIPs}},
	ctxPodIP:  {{"ip", wIP}},
	ctxSkip:   nil, ctxLabels: nil, ctxPodIPs: nil,
}

// parse reads one object. indent is the column of the "- " that starts a
// List item, or -1 for a whole document. It reports whether the fields are
// certain.
func (f *fastPod) parse(buf []byte, indent int) bool {
	*f = fastPod{podIPs: f.podIPs[:0], buf: buf, out: f.out[:0], keys: f.keys[:0], fold: f.fold[:0]}
	return f.parseObject(indent)
}

// toJSON converts one object to JSON as sigs.k8s.io/yaml.YAMLToJSON would
// (up to the order of keys); false when the fast path is not certain.
func (f *fastPod) toJSON(buf []byte, indent int) ([]byte, bool) {
	*f = fastPod{podIPs: f.podIPs[:0], buf: buf, out: f.out[:0], keys: f.keys[:0], fold: f.fold[:0], emit: true}
	if !f.parseObject(indent) {
		return nil, false
	}
	return f.out, true
}

func (f *fastPod) parseObject(indent int) bool {
	f.advance()
	col := 0
	if indent >= 0 {
		// "- key: ..." in column indent.
		if f.ind != indent || len(f.line) < indent+2 || f.line[indent] != '-' || f.line[indent+1] != ' ' {
			return false
		}
		col = indent + 2
		for col < len(f.line) && f.line[col] == ' ' {
			col++
		}
	} else {
		if !f.skipBlank() || f.eof {
			return false
		}
		col = f.ind
	}
	if col >= len(f.line) || !isKeyLine(f.line[col:]) {
		return false
	}
	if !f.mapping(col, ctxTop) || !f.eof || f.bad {
		return false
	}
	return true
}

// advance moves to the next line.
func (f *fastPod) advance() {
	if f.next >= len(f.buf) {
		f.eof, f.line, f.ind = true, nil, 0
		return
	}
	rest := f.buf[f.next:]
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		f.line = rest[:i]
		f.next += i + 1
	} else {
		f.line = rest
		f.next = len(f.buf)
	}
	n := 0
	for n < len(f.line) && f.line[n] == ' ' {
		n++
	}
	f.ind = n
	if !printableASCII(f.line[n:]) {
		f.bad = true
	}
	if n == 0 && len(f.line) >= 3 && (string(f.line[:3]) == "---" || string(f.line[:3]) == "...") && (len(f.line) == 3 || f.line[3] == ' ') {
		f.bad = true // a document marker
	}
}

// skipBlank moves past blank lines; false on a comment line.
func (f *fastPod) skipBlank() bool {
	for !f.eof && f.ind == len(f.line) {
		f.advance()
	}
	return f.eof || f.line[f.ind] != '#'
}

// printableASCII reports whether every byte of b is in ' '..'~'.
func printableASCII(b []byte) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		// A byte > 0x7e sets its high bit in (x+1)|x (a carry out of
		// 0xff only happens where that byte is already caught); a byte
		// < 0x20 in (x-0x20)&^x.
		if ((x+lo)|x|((x-lo*0x20)&^x))&hi != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// mapping reads a block mapping whose keys are in column col, starting
// with the current line; it stops at the first non-blank line indented
// less than col (or the end).
func (f *fastPod) mapping(col int, ctx fctx) bool {
	if !f.emit {
		return f.mappingBody(col, ctx)
	}
	f.out = append(f.out, '{')
	nkeys := len(f.keys)
	ok := f.mappingBody(col, ctx)
	f.keys = f.keys[:nkeys]
	f.out = append(f.out, '}')
	return ok
}

func (f *fastPod) mappingBody(col int, ctx fctx) bool {
	var seen uint32
	first := len(f.keys)
	for {
		if f.bad {
			return false
		}
		key, rest, ok := splitKey(f.line[col:])
		if !ok {
			return false
		}
		if f.emit && !f.emitKey(key, f.line[col], first) {
			return false
		}
		if ctx == ctxTop && len(key) == len("items") && equalFoldASCII("items", key) {
			f.items = true
		}
		want := wNone
		if wk := wantedKeys[ctx]; wk != nil || ctx == ctxLabels {
			if ctx == ctxLabels {
				// A map, not a struct: only the exact key counts.
				if string(key) == "component" {
					want = wComponent
				}
			} else {
				for _, k := range wk {
					if len(k.name) == len(key) && equalFoldASCII(k.name, key) {
						if k.name != string(key) {
							return false // JSON would match it to the field too
						}
						want = k.want
						break
					}
				}
			}
			if want != wNone {
				if seen&(1<<want) != 0 {
					return false // given twice: the last one would win
				}
				seen |= 1 << want
			}
		}
		if len(rest) == 0 {
			f.advance()
			if !f.skipBlank() {
				return false
			}
			switch {
			case f.eof || f.ind < col:
				f.null()
				return true
			case f.ind == col:
				if isSeqEntry(f.line[col:]) {
					if !f.sequenceFor(col, want) {
						return false
					}
				} else {
					f.null() // and this line is the next key
				}
			default:
				c := f.line[f.ind:]
				switch {
				case isSeqEntry(c):
					if !f.sequenceFor(f.ind, want) {
						return false
					}
				case isKeyLine(c):
					sub, ok := mappingCtx(want)
					if !ok || !f.mapping(f.ind, sub) {
						return false
					}
				default:
					return false // a scalar on the next line
				}
			}
		} else if !f.value(rest, col, want) {
			return false
		}
		// The next key, or the end of this mapping.
		if f.eof || f.ind < col {
			return true
		}
		if f.ind > col || isSeqEntry(f.line[col:]) {
			return false
		}
	}
}

// equalFoldASCII is strings.EqualFold for ASCII text.
func equalFoldASCII(a string, b []byte) bool {
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// mappingCtx is where a block mapping given for want lies; false if want
// is not a mapping.
func mappingCtx(want fwant) (fctx, bool) {
	switch want {
	case wNone:
		return ctxSkip, true
	case wMeta:
		return ctxMeta, true
	case wSpec:
		return ctxSpec, true
	case wStatus:
		return ctxStatus, true
	case wLabels:
		return ctxLabels, true
	}
	return 0, false
}

func (f *fastPod) sequenceFor(col int, want fwant) bool {
	switch want {
	case wNone:
		return f.sequence(col, ctxSkip)
	case wPodIPs:
		return f.sequence(col, ctxPodIPs)
	}
	return false
}

// isSeqEntry reports whether c starts with "- " or is "-".
func isSeqEntry(c []byte) bool {
	return len(c) > 0 && c[0] == '-' && (len(c) == 1 || c[1] == ' ')
}

// sequence reads a block sequence whose "-" are in column col.
func (f *fastPod) sequence(col int, ctx fctx) bool {
	if !f.emit {
		return f.sequenceBody(col, ctx)
	}
	f.out = append(f.out, '[')
	ok := f.sequenceBody(col, ctx)
	f.out = append(f.out, ']')
	return ok
}

func (f *fastPod) sequenceBody(col int, ctx fctx) bool {
	for n := 0; ; n++ {
		if f.bad {
			return false
		}
		if f.emit && n > 0 {
			f.out = append(f.out, ',')
		}
		line := f.line
		j := col + 1
		for j < len(line) && line[j] == ' ' {
			j++
		}
		if j == len(line) {
			return false // an entry on the following lines, or null
		}
		c := line[j:]
		switch {
		case isSeqEntry(c):
			if ctx != ctxSkip || !f.sequence(j, ctxSkip) {
				return false
			}
		case isKeyLine(c):
			sub := ctxSkip
			if ctx == ctxPodIPs {
				sub = ctxPodIP
				f.podIPs = append(f.podIPs, []byte{})
			}
			if !f.mapping(j, sub) {
				return false
			}
		default:
			if ctx != ctxSkip || !f.value(c, col, wNone) {
				return false
			}
		}
		if f.eof || f.ind < col {
			return true
		}
		if f.ind > col {
			return false
		}
		if !isSeqEntry(f.line[col:]) {
			return true
		}
	}
}

// value reads a scalar (or {} or []) that starts on the current line, in a
// collection whose column is parent, and moves to the next non-blank line.
func (f *fastPod) value(v []byte, parent int, want fwant) bool {
	v = bytes.TrimRight(v, " ")
	switch v[0] {
	case '|', '>':
		if want != wNone || !blockHeader(v) || f.emit {
			return false
		}
		return f.blockScalar(parent)
	case '\'', '"':
		s, n, ok := quoted(v)
		if !ok || n != len(v) || !f.setString(want, s) {
			return false
		}
		if f.emit {
			f.out = appendJSONString(f.out, s)
		}
		f.advance()
		return f.skipBlank()
	case '{', '[':
		if len(v) != 2 || v[1] != v[0]+2 { // '{'+2 == '}', '['+2 == ']'
			return false
		}
		switch {
		case want == wPodIPs && v[0] == '[':
			f.podIPs = f.podIPs[:0]
		case v[0] == '{' && (want == wNone || want == wMeta || want == wSpec || want == wStatus || want == wLabels):
		case v[0] == '[' && want == wNone:
		default:
			return false
		}
		if f.emit {
			f.out = append(f.out, v...)
		}
		f.advance()
		return f.skipBlank()
	}
	if !plainStart(v) || !plainBody(v) {
		return false
	}
	if want == wNone {
		if isInfOrNaN(v) {
			return false // JSON has no such number
		}
	} else if !f.setPlain(want, v) {
		return false
	}
	f.advance()
	if f.emit {
		return f.emitPlain(v, parent, want)
	}
	if !f.skipBlank() {
		return false
	}
	if !f.eof && f.ind > parent {
		// The scalar continues on this line.
		if want != wNone {
			return false
		}
		for !f.eof && f.ind > parent {
			if f.bad || !plainBody(bytes.TrimRight(f.line[f.ind:], " ")) {
				return false
			}
			f.advance()
			if !f.skipBlank() {
				return false
			}
		}
	}
	return true
}

// emitPlain writes the plain scalar that starts with v (the line after it
// is current), folding continuation lines into one as YAML does.
func (f *fastPod) emitPlain(v []byte, parent int, want fwant) bool {
	if !f.eof && f.ind == len(f.line) {
		// A blank line: it would fold into a line break if the scalar
		// went on; not handled.
		for !f.eof && f.ind == len(f.line) {
			f.advance()
		}
		if !f.eof && f.ind > parent {
			return false
		}
	}
	if !f.eof && f.ind > parent {
		if want != wNone {
			return false
		}
		f.fold = append(f.fold[:0], v...)
		for !f.eof && f.ind > parent {
			c := bytes.TrimRight(f.line[f.ind:], " ")
			if f.bad || c[0] == '#' || !plainBody(c) {
				return false
			}
			f.fold = append(append(f.fold, ' '), c...)
			f.advance()
			if !f.eof && f.ind == len(f.line) {
				return false // a blank line inside or after it
			}
		}
		v = f.fold
	}
	if !f.skipBlank() {
		return false
	}
	kind, b := resolvePlain(v)
	switch kind {
	case yStr:
		f.out = appendJSONString(f.out, v)
	case yNull:
		f.out = append(f.out, "null"...)
	case yBool:
		f.out = strconv.AppendBool(f.out, b)
	case yNumber:
		n, ok := appendInt(f.out, v)
		if !ok {
			return false // floats are not converted here
		}
		f.out = n
	default:
		return false
	}
	return true
}

// null writes a null value.
func (f *fastPod) null() {
	if f.emit {
		f.out = append(f.out, "null"...)
	}
}

// emitKey writes "key": and checks that no earlier key of the mapping
// (keys[first:]) is equal to it, even ignoring case (JSON would match both
// to one struct field; YAML keeps the last).
func (f *fastPod) emitKey(key []byte, c0 byte, first int) bool {
	if len(f.keys) > first {
		f.out = append(f.out, ',')
	}
	k := key
	if c0 != '\'' && c0 != '"' {
		switch kind, b := resolvePlain(key); kind {
		case yStr:
		case yBool:
			k = strconv.AppendBool(nil, b)
		case yNumber:
			var ok bool
			if k, ok = appendInt(nil, key); !ok {
				return false
			}
			// A key beyond int64 decodes to a uint64, which
			// sigs.k8s.io/yaml refuses as a map key: the full decoder
			// reports it.
			if _, err := strconv.ParseInt(string(k), 10, 64); err != nil {
				return false
			}
		default:
			return false
		}
	}
	if len(f.keys)-first > 256 {
		return false
	}
	for _, o := range f.keys[first:] {
		if bytes.EqualFold(o, k) {
			return false
		}
	}
	f.keys = append(f.keys, k)
	f.out = append(appendJSONString(f.out, k), ':')
	return true
}

// appendInt appends the integer YAML reads v as (go-yaml v2's rules: Go's
// base prefixes 0b, 0o, 0x and 0, underscores ignored, int64 then uint64,
// and a sign after 0b); false if v is not an integer (a float, or beyond
// uint64).
func appendInt(out, v []byte) ([]byte, bool) {
	plain := strings.ReplaceAll(string(v), "_", "")
	if n, err := strconv.ParseInt(plain, 0, 64); err == nil {
		return strconv.AppendInt(out, n, 10), true
	}
	if n, err := strconv.ParseUint(plain, 0, 64); err == nil {
		return strconv.AppendUint(out, n, 10), true
	}
	if rest, ok := strings.CutPrefix(plain, "0b"); ok {
		if n, err := strconv.ParseInt(rest, 2, 64); err == nil {
			return strconv.AppendInt(out, n, 10), true // 0b-1 is -1 to go-yaml v2
		}
	}
	return out, false
}

// appendJSONString appends s (printable ASCII) as a JSON string.
func appendJSONString(out, s []byte) []byte {
	out = append(out, '"')
	for {
		i := bytes.IndexAny(s, `"\`)
		if i < 0 {
			break
		}
		out = append(append(out, s[:i]...), '\\', s[i])
		s = s[i+1:]
	}
	return append(append(out, s...), '"')
}

// blockHeader accepts | and > with an optional chomping indicator.
func blockHeader(v []byte) bool {
	return len(v) == 1 || (len(v) == 2 && (v[1] == '-' || v[1] == '+'))
}

// blockScalar skips the lines of a block scalar in a collection whose
// column is parent.
func (f *fastPod) blockScalar(parent int) bool {
	f.advance()
	maxBlank := 0
	for !f.eof && f.ind == len(f.line) {
		maxBlank = max(maxBlank, f.ind)
		f.advance()
	}
	if f.eof || f.ind <= parent {
		return f.skipBlank() // an empty scalar
	}
	indent := f.ind
	if maxBlank > indent {
		return false
	}
	for !f.eof && (f.ind >= indent || f.ind == len(f.line)) {
		f.advance()
	}
	return f.skipBlank()
}

// plainStart reports whether a plain scalar may start with v's first bytes
// in block context.
func plainStart(v []byte) bool {
	switch v[0] {
	case ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	case '-', '?', ':':
		return len(v) > 1 && v[1] != ' '
	}
	return true
}

// plainBody reports whether a line of a plain scalar (trimmed on the right)
// holds nothing that ends it early: ": ", " #", or a final ':'.
func plainBody(v []byte) bool {
	if len(v) == 0 || v[len(v)-1] == ':' || v[0] == '#' {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ':':
			if v[i+1] == ' ' { // v does not end with ':'
				return false
			}
		case '#':
			if v[i-1] == ' ' { // v does not start with '#'
				return false
			}
		}
	}
	return true
}

// isKeyLine reports whether c (a line from its content on) is a mapping
// entry "key:" or "key: value".
func isKeyLine(c []byte) bool {
	_, _, ok := splitKey(c)
	return ok
}

// splitKey splits "key: rest" (rest without its leading spaces). The key
// is a plain scalar or a quoted one on this line; keys YAML reads as null
// or as the merge key, and very long keys, are refused.
func splitKey(c []byte) (key, rest []byte, ok bool) {
	if len(c) == 0 {
		return nil, nil, false
	}
	var end int
	switch c[0] {
	case '\'', '"':
		var n int
		key, n, ok = quoted(c)
		if !ok || n >= len(c) || c[n] != ':' {
			return nil, nil, false
		}
		end = n
	default:
		if !plainStart(c) {
			return nil, nil, false
		}
		end = -1
		for i := 1; i < len(c); i++ {
			if c[i] == ':' && (i+1 == len(c) || c[i+1] == ' ') {
				end = i
				break
			}
			if c[i] == '#' && c[i-1] == ' ' {
				return nil, nil, false // a comment
			}
		}
		if end < 0 {
			return nil, nil, false
		}
		key = c[:end]
		for len(key) > 0 && key[len(key)-1] == ' ' {
			key = key[:len(key)-1]
		}
		if len(key) == 0 {
			return nil, nil, false
		}
		switch string(key) {
		case "~", "null", "Null", "NULL", "<<":
			return nil, nil, false
		}
	}
	if end+1 < len(c) && c[end+1] != ' ' {
		return nil, nil, false
	}
	if len(key) > 512 {
		return nil, nil, false
	}
	rest = c[end+1:]
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	if len(rest) > 0 && rest[0] == '#' {
		return nil, nil, false // a comment after the key
	}
	return key, rest, true
}

// quoted reads a single- or double-quoted scalar that ends on this line,
// returning its value and the length of its text. Double-quoted scalars
// with escapes are refused.
func quoted(c []byte) ([]byte, int, bool) {
	q := c[0]
	if q == '"' {
		k := bytes.IndexByte(c[1:], '"')
		if k < 0 || bytes.IndexByte(c[1:1+k], '\\') >= 0 {
			return nil, 0, false
		}
		return c[1 : 1+k], k + 2, true
	}
	var out []byte // only when '' occurs
	start := 1
	for i := 1; ; {
		k := bytes.IndexByte(c[i:], '\'')
		if k < 0 {
			return nil, 0, false
		}
		i += k
		if i+1 < len(c) && c[i+1] == '\'' {
			out = append(out, c[start:i+1]...)
			i += 2
			start = i
			continue
		}
		if out == nil {
			return c[1:i], i + 1, true
		}
		return append(out, c[start:i]...), i + 1, true
	}
}

// isInfOrNaN reports whether YAML reads the plain scalar v as ±Inf or NaN,
// which sigs.k8s.io/yaml cannot turn into JSON.
func isInfOrNaN(v []byte) bool {
	if len(v) < 4 || len(v) > 5 {
		return false
	}
	switch string(v) {
	case ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF":
		return true
	}
	return false
}

func (f *fastPod) field(want fwant) *[]byte {
	switch want {
	case wAPIVersion:
		return &f.apiVersion
	case wKind:
		return &f.kind
	case wName:
		return &f.name
	case wNamespace:
		return &f.namespace
	case wComponent:
		return &f.component
	case wNodeName:
		return &f.nodeName
	case wPhase:
		return &f.phase
	case wPodIP:
		return &f.podIP
	case wIP:
		return &f.podIPs[len(f.podIPs)-1]
	}
	return nil
}

// setString stores a quoted scalar.
func (f *fastPod) setString(want fwant, s []byte) bool {
	if want == wNone {
		return true
	}
	p := f.field(want)
	if p == nil {
		return false // a string where JSON wants a bool, object or array
	}
	*p = s
	return true
}

// setPlain stores a plain scalar as YAML resolves it.
func (f *fastPod) setPlain(want fwant, v []byte) bool {
	kind, b := resolvePlain(v)
	switch kind {
	case yNull:
		return true // JSON null leaves the field as it is
	case yStr:
		if p := f.field(want); p != nil {
			*p = v
			return true
		}
	case yBool:
		if want == wHostNetwork {
			f.hostNetwork = b
			return true
		}
	}
	return false
}

type yKind int

const (
	yStr yKind = iota
	yNull
	yBool
	yNumber // int or float
	yOther  // merge key
)

// resolvePlain is go-yaml v2's resolve for a plain scalar (which
// sigs.k8s.io/yaml uses): what the text is read as. Timestamps stay
// strings when decoded into interface{}, so they are strings here.
func resolvePlain(v []byte) (yKind, bool) {
	switch v[0] {
	case 'y', 'Y', 'n', 'N', 't', 'T', 'f', 'F', 'o', 'O', '~':
		switch string(v) {
		case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
			return yBool, true
		case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
			return yBool, false
		case "~", "null", "Null", "NULL":
			return yNull, false
		}
		return yStr, false
	case '<':
		if string(v) == "<<" {
			return yOther, false
		}
		return yStr, false
	case '.':
		if isInfOrNaN(v) {
			return yNumber, false
		}
		if _, err := strconv.ParseFloat(string(v), 64); err == nil {
			return yNumber, false
		}
		return yStr, false
	case '+', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if isInfOrNaN(v) { // before numberLike: "-.inf" has letters
			return yNumber, false
		}
		if !numberLike(v) {
			return yStr, false
		}
		plain := strings.ReplaceAll(string(v), "_", "")
		if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return yNumber, false
		}
		if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return yNumber, false
		}
		if yamlStyleFloat(plain) {
			if _, err := strconv.ParseFloat(plain, 64); err == nil {
				return yNumber, false
			}
		}
		// go-yaml v2 also tries the digits after 0b and -0b in base 2
		// (from before Go read 0b in base 0). Only a sign after 0b gets
		// through there and not above (0b-1 is -1); whatever else those
		// tries accept, base 0 has.
		if rest, ok := strings.CutPrefix(plain, "0b"); ok {
			if _, err := strconv.ParseInt(rest, 2, 64); err == nil {
				return yNumber, false
			}
		}
	}
	return yStr, false
}

// numberLike reports whether v has only characters that Go's ParseInt,
// ParseUint (base 0) and ParseFloat accept, and at most one '.'; anything
// else is a string to YAML.
func numberLike(v []byte) bool {
	dots := 0
	for _, c := range v {
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		case c == 'x', c == 'X', c == 'o', c == 'O', c == '_', c == '+', c == '-':
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return dots <= 1
}

// yamlStyleFloat matches ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$.
func yamlStyleFloat(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	} else {
		if digits() == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits()
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
