package nodecidr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// jsonReader reads a stream of JSON values (`kubectl get -o json` writes
// one). An object's "items" array is streamed element by element; its
// other fields are kept and decoded once the object ends. The reader only
// finds where values end (strings and nesting); the workers validate them.
type jsonReader struct {
	p        *pipeline
	r        io.Reader
	data     []byte
	pos, end int
	eof      bool
}

var errJSONEnd = errors.New("unexpected end of JSON input")

func readJSON(p *pipeline, r io.Reader) {
	// Reads of at least the bufio.Reader's size (1 MB) bypass its buffer:
	// each byte is copied once.
	s := &jsonReader{p: p, r: r, data: make([]byte, 4<<20)}
	for doc := 1; ; doc++ {
		err := s.document(doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if !errors.Is(err, errStopped) {
				p.fail(doc, fmt.Errorf("%w: document %d: %w", ErrDump, doc, err))
			}
			return
		}
	}
}

// errStopped: the pipeline stopped (context ended); nothing to report.
var errStopped = errors.New("stopped")

func (s *jsonReader) fill() error {
	if s.eof {
		return errJSONEnd
	}
	n := copy(s.data, s.data[s.pos:s.end])
	s.pos, s.end = 0, n
	if s.end == len(s.data) {
		s.data = append(s.data, make([]byte, len(s.data))...)
	}
	m, err := s.r.Read(s.data[s.end:])
	s.end += m
	if errors.Is(err, io.EOF) {
		s.eof = true
		return nil
	}
	return err
}

// ended is err from peek where a value must follow: the input's end is
// errJSONEnd, a read error stays itself.
func ended(err error) error {
	if errors.Is(err, io.EOF) {
		return errJSONEnd
	}
	return err
}

// peek skips white space and returns the next byte; io.EOF at the end.
func (s *jsonReader) peek() (byte, error) {
	for {
		for s.pos < s.end {
			switch c := s.data[s.pos]; c {
			case ' ', '\t', '\r', '\n':
				s.pos++
			default:
				return c, nil
			}
		}
		if s.eof {
			return 0, io.EOF
		}
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
}

// expect consumes c (after white space).
func (s *jsonReader) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return ended(err)
	}
	if got != c {
		return fmt.Errorf("invalid character %q, want %q", got, c)
	}
	s.pos++
	return nil
}

// value returns the raw text of the value at the current position (valid
// until the next read).
func (s *jsonReader) value() ([]byte, error) {
	c, err := s.peek()
	if err != nil {
		return nil, ended(err)
	}
	i := s.pos
	switch c {
	case '{', '[', '"':
	default:
		// A number or literal: up to the next delimiter.
		for {
			for ; i < s.end; i++ {
				switch s.data[i] {
				case ' ', '\t', '\r', '\n', ',', ']', '}':
					v := s.data[s.pos:i]
					s.pos = i
					return v, nil
				}
			}
			if s.eof {
				v := s.data[s.pos:s.end]
				s.pos = s.end
				return v, nil
			}
			off := i - s.pos
			if err := s.fill(); err != nil {
				return nil, err
			}
			i = s.pos + off
		}
	}
	depth, inStr := 0, false
	for {
		if i >= s.end {
			off := i - s.pos
			if err := s.fill(); err != nil {
				return nil, err
			}
			if i = s.pos + off; i >= s.end {
				return nil, errJSONEnd
			}
		}
		if inStr {
			k := bytes.IndexByte(s.data[i:s.end], '"')
			if k < 0 {
				i = s.end
				continue
			}
			q := i + k
			n := 0
			for j := q - 1; j > s.pos && s.data[j] == '\\'; j-- {
				n++
			}
			i = q + 1
			if n%2 == 1 {
				continue // an escaped quote
			}
			inStr = false
			if depth == 0 {
				v := s.data[s.pos:i]
				s.pos = i
				return v, nil
			}
			continue
		}
		if i = nextStructural(s.data[:s.end], i); i >= s.end {
			continue
		}
		switch s.data[i] {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				v := s.data[s.pos : i+1]
				s.pos = i + 1
				return v, nil
			}
		}
		i++
	}
}

// document reads one top-level value.
func (s *jsonReader) document(doc int) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c != '{' {
		v, _ := s.value()
		return fmt.Errorf("not a Kubernetes object: found %.20q, want a JSON object", v)
	}
	s.pos++
	obj := []byte{'{'}
	streamed := false
	var listKind, listAPIVersion string // seen before the items: the kind of items that name none
	if c, err := s.peek(); err == nil && c == '}' {
		s.pos++
	} else {
		for {
			if err := s.expectString(); err != nil {
				return err
			}
			kraw, err := s.value()
			if err != nil {
				return err
			}
			var key string
			if err := json.Unmarshal(kraw, &key); err != nil {
				return err
			}
			kraw = bytes.Clone(kraw)
			if err := s.expect(':'); err != nil {
				return err
			}
			c, err := s.peek()
			if err != nil {
				return ended(err)
			}
			switch {
			case strings.EqualFold(key, "items") && c == '[':
				if streamed {
					return errors.New("items given twice")
				}
				s.pos++
				n, err := s.items(doc, itemKind(listKind), listAPIVersion)
				if err != nil {
					return err
				}
				if n == 0 { // nothing streamed: decode the object whole
					if len(obj) > 1 {
						obj = append(obj, ',')
					}
					obj = append(append(obj, kraw...), ":[]"...)
				}
				streamed = n > 0
			case strings.EqualFold(key, "items") && c == 'n':
				v, err := s.value()
				if err != nil {
					return err
				}
				if string(v) != "null" {
					return fmt.Errorf("not a Kubernetes object: items is %.20q, want a list", v)
				}
			case strings.EqualFold(key, "items"):
				return fmt.Errorf("not a Kubernetes object: items is not a list")
			default:
				v, err := s.value()
				if err != nil {
					return err
				}
				switch key {
				case "kind":
					_ = json.Unmarshal(v, &listKind) // not a string: the decoder reports it
				case "apiVersion":
					_ = json.Unmarshal(v, &listAPIVersion)
				}
				if len(obj) > 1 {
					obj = append(obj, ',')
				}
				obj = append(append(append(obj, kraw...), ':'), v...)
			}
			c, err = s.peek()
			if err != nil {
				return ended(err)
			}
			s.pos++
			if c == '}' {
				break
			}
			if c != ',' {
				return fmt.Errorf("invalid character %q after object key:value pair", c)
			}
		}
	}
	obj = append(obj, '}')
	kind := jobJSONDoc
	if streamed {
		kind = jobJSONListEnd
	}
	j := s.p.newJob(kind, doc)
	if j == nil {
		return errStopped
	}
	j.buf = append(j.buf, obj...)
	if !s.p.send(j) {
		return errStopped
	}
	return nil
}

func (s *jsonReader) expectString() error {
	c, err := s.peek()
	if err != nil {
		return ended(err)
	}
	if c != '"' {
		return fmt.Errorf("invalid character %q looking for beginning of object key string", c)
	}
	return nil
}

// itemKind is the kind of the items of a typed List ("Node" for
// "NodeList"), or "" for a plain List or another kind.
func itemKind(listKind string) string {
	k, ok := strings.CutSuffix(listKind, "List")
	if !ok {
		return ""
	}
	return k
}

// items reads the elements of an "items" array (its '[' consumed) into
// batches, and returns how many there were. Items without a kind are read
// as defKind and defAPIVersion, as a typed List holds them (the output of
// kubectl cluster-info dump).
func (s *jsonReader) items(doc int, defKind, defAPIVersion string) (n int, err error) {
	var j *job
	flush := func() error {
		if j != nil && len(j.ends) > 0 && !s.p.send(j) {
			return errStopped
		}
		j = nil
		return nil
	}
	c, err := s.peek()
	if err != nil {
		return 0, ended(err)
	}
	if c == ']' {
		s.pos++
		return 0, nil
	}
	for {
		if j == nil {
			if j = s.p.newJob(jobJSONItems, doc); j == nil {
				return n, errStopped
			}
			j.firstItem, j.defKind, j.defAPIVersion = n, defKind, defAPIVersion
		}
		v, err := s.value()
		if err != nil {
			if ferr := flush(); ferr != nil { // earlier items' errors come first
				return n, ferr
			}
			return n, fmt.Errorf("item %d: %w", n, err)
		}
		j.buf = append(j.buf, v...)
		j.ends = append(j.ends, len(j.buf))
		n++
		if len(j.buf) >= batchBytes || len(j.ends) >= batchItems {
			if err := flush(); err != nil {
				return n, err
			}
		}
		c, err := s.peek()
		if err != nil {
			c = 0
		}
		s.pos++
		if c == ']' {
			return n, flush()
		}
		if c != ',' {
			if ferr := flush(); ferr != nil {
				return n, ferr
			}
			if err != nil {
				return n, ended(err)
			}
			return n, fmt.Errorf("invalid character %q after array element", c)
		}
	}
}
