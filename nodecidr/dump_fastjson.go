package nodecidr

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"

	corev1 "k8s.io/api/core/v1"
)

// jsonPod is the fast path for one JSON List item: a validating scan that
// extracts apiVersion, kind and the fields of a PodSummary, and gives up
// (the item then goes to encoding/json) whenever encoding/json might read
// it differently: escapes or non-ASCII text in a wanted string or in a key
// of a wanted object, a key that matches a wanted field only
// case-insensitively or twice, a wanted field of an unexpected type, or
// nesting deeper than maxJSONDepth. Invalid JSON also gives up, so that
// encoding/json reports it.
type jsonPod struct {
	fastPod // the extracted fields (the YAML parser's state is unused)
	b       []byte
	i       int
	depth   int
}

const maxJSONDepth = 1000

func (w *worker) fastJSON(raw []byte, r *jobResult) bool {
	s := &w.jp
	s.fastPod = fastPod{podIPs: s.podIPs[:0]}
	s.b, s.i, s.depth = raw, 0, 0
	if !s.value(wTop) || !s.end() {
		return false
	}
	if len(s.kind) == 0 && w.defKind != "" {
		s.kind, s.apiVersion = []byte(w.defKind), []byte(w.defAPIVersion)
	}
	core := len(s.apiVersion) == 0 || string(s.apiVersion) == "v1"
	switch {
	case string(s.kind) == "Pod" && core:
		if isControlPlane(string(s.namespace), string(s.component)) {
			return false
		}
		r.pods = append(r.pods, w.summary(&s.fastPod))
	case string(s.kind) == "Node" && core:
		var n corev1.Node
		if err := json.Unmarshal(raw, &n); err != nil || n.Name == "" {
			return false
		}
		r.nodes = append(r.nodes, n)
	case len(s.kind) == 0:
		return false
	case w.kept(s.apiVersion, s.kind):
		// The scan checked the whole item and read apiVersion and kind as
		// encoding/json would: keep it as it is. A Decode error goes to
		// the full decoder, which reports it.
		if w.keepObject(string(s.apiVersion), string(s.kind), raw, r) != nil {
			return false
		}
	default:
		r.skipped++
	}
	return true
}

func (s *jsonPod) ws() { s.i = skipWS(s.b, s.i) }

// skipWS returns the index of the first byte of b[i:] that is not JSON
// white space (len(b) if none); runs of spaces (indentation) go 8 at a time.
func skipWS(b []byte, i int) int {
	const spaces = 0x2020202020202020
	for i < len(b) {
		switch b[i] {
		case ' ':
			for i+8 <= len(b) {
				if x := binary.LittleEndian.Uint64(b[i:]) ^ spaces; x != 0 {
					i += bits.TrailingZeros64(x) / 8
					break
				}
				i += 8
			}
			if i < len(b) && b[i] == ' ' {
				i++
			}
		case '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// nextStructural returns the index of the first '"', '{', '}', '[' or ']'
// in b[i:], or len(b).
func nextStructural(b []byte, i int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		y := x | lo*0x20 // '[' → '{', ']' → '}'
		q, o, c := x^(lo*'"'), y^(lo*'{'), y^(lo*'}')
		if m := ((q-lo)&^q | (o-lo)&^o | (c-lo)&^c) & hi; m != 0 {
			return i + bits.TrailingZeros64(m)/8 // the lowest flag is exact
		}
		i += 8
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case '"', '{', '}', '[', ']':
			return i
		}
	}
	return i
}

func (s *jsonPod) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// wTop is the want of the item itself (an object in ctxTop).
const wTop = wMeta + 100

// value reads one value for want.
func (s *jsonPod) value(want fwant) bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '{':
		ctx := ctxSkip
		switch want {
		case wTop:
			ctx = ctxTop
		case wNone:
		default:
			var ok bool
			if ctx, ok = mappingCtx(want); !ok {
				return false
			}
		}
		return s.object(ctx)
	case '[':
		switch want {
		case wNone:
			return s.array(false)
		case wPodIPs:
			s.podIPs = s.podIPs[:0]
			return s.array(true)
		}
		return false
	case '"':
		v, plain, ok := s.str()
		if !ok {
			return false
		}
		if want == wNone {
			return true
		}
		if !plain || want == wTop {
			return false
		}
		p := s.field(want)
		if p == nil {
			return false
		}
		*p = v
		return true
	case 't', 'f', 'n':
		lit := "null"
		if c == 't' {
			lit = "true"
		} else if c == 'f' {
			lit = "false"
		}
		if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
			return false
		}
		s.i += len(lit)
		switch {
		case want == wNone, c == 'n' && want != wTop:
			return true // null leaves a field as it is
		case want == wHostNetwork && c != 'n':
			s.hostNetwork = c == 't'
			return true
		}
		return false
	default:
		return want == wNone && s.number()
	}
}

func (s *jsonPod) object(ctx fctx) bool {
	if s.depth++; s.depth > maxJSONDepth {
		return false
	}
	defer func() { s.depth-- }()
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	var seen uint32
	wk := wantedKeys[ctx]
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		key, plain, ok := s.str()
		if !ok {
			return false
		}
		want := wNone
		if ctx != ctxSkip {
			if !plain {
				return false // an escape might spell a wanted key
			}
			if ctx == ctxLabels {
				if string(key) == "component" {
					want = wComponent
				}
			} else {
				for _, k := range wk {
					if len(k.name) == len(key) && equalFoldASCII(k.name, key) {
						if k.name != string(key) {
							return false
						}
						want = k.want
						break
					}
				}
			}
			if want != wNone {
				if seen&(1<<want) != 0 {
					return false
				}
				seen |= 1 << want
			}
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		if !s.value(want) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

func (s *jsonPod) array(podIPs bool) bool {
	if s.depth++; s.depth > maxJSONDepth {
		return false
	}
	defer func() { s.depth-- }()
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if podIPs {
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] != '{' {
				return false
			}
			s.podIPs = append(s.podIPs, []byte{})
			if !s.object(ctxPodIP) {
				return false
			}
		} else if !s.value(wNone) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string; plain means it has neither escapes nor non-ASCII
// bytes, so its text is its value.
func (s *jsonPod) str() (v []byte, plain, ok bool) {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	start := s.i + 1
	i := start
	plain = true
	for {
		for i+8 <= len(s.b) {
			x := binary.LittleEndian.Uint64(s.b[i:])
			q, bs := x^(lo*'"'), x^(lo*'\\')
			if ((q-lo)&^q|(bs-lo)&^bs|(x-lo*0x20)&^x|x)&hi != 0 {
				break
			}
			i += 8
		}
		if i >= len(s.b) {
			return nil, false, false
		}
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return s.b[start:i], plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(s.b) {
				return nil, false, false
			}
			switch s.b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return nil, false, false
					}
				}
				i += 6
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default:
			if c >= 0x80 {
				plain = false
			}
			i++
		}
	}
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonPod) number() bool {
	b, i := s.b, s.i
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	s.i = i
	return true
}
