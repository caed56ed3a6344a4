package nodecidr

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// The YAML splitter cuts a stream into documents at "---" lines (exactly as
// k8s.io/apimachinery's YAMLReader does) and a List document into its items,
// without holding either whole.
//
// A document is a List to stream when a line "items:" in column 0 is
// followed by a line "- ..." indented by some n >= 0 columns: every
// following line indented by more than n columns (or blank, or a comment)
// belongs to the current item, a line "- ..." indented by exactly n starts
// the next item, and any other line ends the items. The rest of the
// document (apiVersion, kind, metadata) is kept with "items: []" in place of
// the items and decoded at the end: its kind must end in "List". Any other
// document is decoded whole.

type splitMode int

const (
	modeHeader  splitMode = iota // before the items (or a document that is not a streamed List)
	modeItems                    // inside the items
	modeTrailer                  // after the items
)

type splitter struct {
	p        *pipeline
	r        io.Reader
	data     []byte // data[pos:end] is read and not yet consumed
	pos, end int
	eof      bool

	doc       int
	nonEmpty  bool // the document has a line (YAMLReader's rule for counting documents)
	mode      splitMode
	header    []byte // text before the items, or the whole document
	trailer   []byte
	itemsLine []byte // the "items:" line while waiting for the first item
	blank     []byte // blank lines after it
	listSeen  bool   // an "items:" line was already considered in this document
	indent    int    // column of the items' "-"
	cur       *job   // the batch being filled
	open      bool   // cur's last item is not closed yet
	items     int    // items of this document so far
}

func readYAML(p *pipeline, r io.Reader) {
	s := &splitter{p: p, r: r, doc: 1, data: make([]byte, 1<<20)}
	s.run()
}

// readLine returns the next line with its line break (valid until the next
// call), or io.EOF.
func (s *splitter) readLine() ([]byte, error) {
	for {
		if i := bytes.IndexByte(s.data[s.pos:s.end], '\n'); i >= 0 {
			line := s.data[s.pos : s.pos+i+1]
			s.pos += i + 1
			return line, nil
		}
		if s.eof {
			if s.pos < s.end {
				line := s.data[s.pos:s.end]
				s.pos = s.end
				return line, nil
			}
			return nil, io.EOF
		}
		if err := s.fill(); err != nil {
			return nil, err
		}
	}
}

// fill reads more input after what is left, growing the buffer for a long line.
func (s *splitter) fill() error {
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

// bulk appends to the open item, in one copy, the complete lines that
// follow and stay in it (indented, or blank); the common case of a List
// written by kubectl.
func (s *splitter) bulk() {
	if s.indent != 0 || s.cur == nil || !s.open {
		return
	}
	start, i := s.pos, s.pos
	for i < s.end && (s.data[i] == ' ' || s.data[i] == '\n') {
		nl := bytes.IndexByte(s.data[i:s.end], '\n')
		if nl < 0 {
			break
		}
		i += nl + 1
	}
	s.cur.buf = append(s.cur.buf, s.data[start:i]...)
	s.pos = i
}

func (s *splitter) run() {
	for n := 0; ; n++ {
		if n&0xfff == 0 && s.p.ctx.Err() != nil {
			return
		}
		if s.mode == modeItems {
			s.bulk()
		}
		line, err := s.readLine()
		if errors.Is(err, io.EOF) {
			if s.nonEmpty {
				s.endDoc()
			}
			return
		}
		if err != nil {
			s.dropOpenItem()
			if !s.endItems() { // earlier items' errors come first
				return
			}
			s.p.fail(s.doc, fmt.Errorf("%w: document %d: %w", ErrDump, s.doc, err))
			return
		}
		if line[0] == '-' && bytes.HasPrefix(line, []byte("---")) {
			trimmed := bytes.TrimSpace(line[3:])
			if len(trimmed) > 0 && trimmed[0] != '#' {
				if s.endItems() {
					s.p.fail(s.doc, fmt.Errorf("%w: document %d: invalid Yaml document separator: %s", ErrDump, s.doc, trimmed))
				}
				return
			}
			if s.nonEmpty {
				if !s.endDoc() {
					return
				}
				s.doc++
			}
			continue
		}
		s.nonEmpty = true
		if !s.add(line) {
			return
		}
	}
}

func isBlankLine(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// itemStart returns the column of a "- ..." (or "-") line, or -1.
func itemStart(line []byte) int {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	if i < len(line) && line[i] == '-' {
		if i+1 == len(line) || line[i+1] == ' ' || line[i+1] == '\n' || line[i+1] == '\r' {
			return i
		}
	}
	return -1
}

func (s *splitter) add(line []byte) bool {
	switch s.mode {
	case modeHeader:
		if s.itemsLine != nil {
			if isBlankLine(line) {
				s.blank = append(s.blank, line...)
				return true
			}
			if c := itemStart(line); c >= 0 {
				s.mode, s.indent = modeItems, c
				s.header = append(s.header, "items: []\n"...)
				s.itemsLine, s.blank = nil, s.blank[:0]
				return s.startItem(line)
			}
			s.header = append(append(s.header, s.itemsLine...), s.blank...)
			s.itemsLine, s.blank = nil, s.blank[:0]
		} else if !s.listSeen && line[0] == 'i' && string(bytes.TrimRight(line, " \r\n")) == "items:" {
			s.listSeen = true
			s.itemsLine = append([]byte(nil), line...)
			return true
		}
		s.header = append(s.header, line...)
	case modeItems:
		if s.inItem(line) {
			s.cur.buf = append(s.cur.buf, line...)
			return true
		}
		if itemStart(line) == s.indent {
			return s.startItem(line)
		}
		if !s.endItems() {
			return false
		}
		s.mode = modeTrailer
		s.trailer = append(s.trailer, line...)
	case modeTrailer:
		s.trailer = append(s.trailer, line...)
	}
	return true
}

// inItem reports whether line continues the current item: it is indented
// by more than the items' "-", blank, or a comment.
func (s *splitter) inItem(line []byte) bool {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	if i > s.indent || i == len(line) {
		return true
	}
	switch line[i] {
	case '\n', '\r', '#':
		return true
	}
	return false
}

func (s *splitter) closeItem() bool {
	if s.cur == nil || !s.open {
		return true
	}
	s.cur.ends = append(s.cur.ends, len(s.cur.buf))
	s.open = false
	if len(s.cur.buf) >= batchBytes || len(s.cur.ends) >= batchItems {
		j := s.cur
		s.cur = nil
		return s.p.send(j)
	}
	return true
}

func (s *splitter) startItem(line []byte) bool {
	if !s.closeItem() {
		return false
	}
	if s.cur == nil {
		if s.cur = s.p.newJob(jobYAMLItems, s.doc); s.cur == nil {
			return false
		}
		s.cur.firstItem = s.items
		s.cur.indent = s.indent
	}
	s.items++
	s.cur.buf = append(s.cur.buf, line...)
	s.open = true
	return true
}

// dropOpenItem takes the item not closed yet out of the batch: a read
// error cut it short, and its decoding error would hide the read error.
func (s *splitter) dropOpenItem() {
	if s.cur == nil || !s.open {
		return
	}
	end := 0
	if n := len(s.cur.ends); n > 0 {
		end = s.cur.ends[n-1]
	}
	s.cur.buf, s.open = s.cur.buf[:end], false
}

func (s *splitter) endItems() bool {
	if !s.closeItem() {
		return false
	}
	if s.cur != nil {
		j := s.cur
		s.cur = nil
		return s.p.send(j)
	}
	return true
}

func (s *splitter) endDoc() bool {
	var j *job
	switch s.mode {
	case modeHeader:
		if s.itemsLine != nil {
			s.header = append(append(s.header, s.itemsLine...), s.blank...)
		}
		if j = s.p.newJob(jobYAMLDoc, s.doc); j == nil {
			return false
		}
	default:
		if !s.endItems() {
			return false
		}
		if j = s.p.newJob(jobYAMLListEnd, s.doc); j == nil {
			return false
		}
		s.header = append(s.header, s.trailer...)
	}
	// The job takes the document's text; the splitter takes the job's buffer.
	j.buf, s.header = s.header, j.buf[:0]
	s.trailer, s.blank, s.itemsLine = s.trailer[:0], s.blank[:0], nil
	s.mode, s.listSeen, s.nonEmpty, s.items = modeHeader, false, false, 0
	return s.p.send(j)
}
