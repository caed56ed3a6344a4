package flannel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// jsonMember locates one member of a top-level JSON object in its text.
type jsonMember struct {
	key       string
	leadStart int // just after the ',' or '{' before the member
	keyStart  int // the key's opening quote
	keyEnd    int // just after the key's closing quote
	valStart  int
	valEnd    int
}

// topLevelMembers returns the members of the JSON object in raw, in order, and
// the offset of the object's closing brace.
func topLevelMembers(raw []byte) ([]jsonMember, int, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, 0, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, 0, errors.New("the config is not a JSON object")
	}
	var out []jsonMember
	for dec.More() {
		lead := int(dec.InputOffset())
		for lead < len(raw) && (isJSONSpace(raw[lead]) || raw[lead] == ',') {
			lead++
		}
		// lead now points at the key's quote; the member's lead-in is the white
		// space between the separator and the key.
		leadStart := lead
		for leadStart > 0 && isJSONSpace(raw[leadStart-1]) {
			leadStart--
		}
		keyTok, err := dec.Token()
		if err != nil {
			return nil, 0, err
		}
		key, _ := keyTok.(string)
		keyEnd := int(dec.InputOffset())
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, 0, err
		}
		valEnd := int(dec.InputOffset())
		valStart := keyEnd
		for valStart < valEnd && (isJSONSpace(raw[valStart]) || raw[valStart] == ':') {
			valStart++
		}
		out = append(out, jsonMember{key: key, leadStart: leadStart, keyStart: lead, keyEnd: keyEnd, valStart: valStart, valEnd: valEnd})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, 0, err
	}
	closeBrace := int(dec.InputOffset()) - 1
	if _, err := dec.Token(); err != io.EOF {
		return nil, 0, errors.New("unexpected data after the top-level object")
	}
	return out, closeBrace, nil
}

func isJSONSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// memberEdit sets one top-level member to Value (JSON text).
type memberEdit struct {
	Key   string
	Value string
}

// editTopLevel returns raw with the given top-level members set, changing as
// little text as possible: the value of every member whose name matches
// (case-insensitively, as flanneld's decoder matches) is replaced in place;
// a member that does not exist is appended after the last one with the same
// indentation and key/value spacing. All other bytes are kept.
func editTopLevel(raw []byte, edits []memberEdit) ([]byte, error) {
	members, closeBrace, err := topLevelMembers(raw)
	if err != nil {
		return nil, fmt.Errorf("cannot edit the config text: %w", err)
	}
	type repl struct {
		start, end int
		text       string
	}
	var repls []repl
	var appendText strings.Builder
	for _, e := range edits {
		found := false
		for _, m := range members {
			if strings.EqualFold(m.key, e.Key) {
				repls = append(repls, repl{m.valStart, m.valEnd, e.Value})
				found = true
			}
		}
		if found {
			continue
		}
		keyJSON, _ := json.Marshal(e.Key)
		if len(members) == 0 && appendText.Len() == 0 {
			appendText.WriteString(string(keyJSON) + ": " + e.Value)
			continue
		}
		lead, sep := "\n", ": "
		if len(members) > 0 {
			last := members[len(members)-1]
			lead = string(raw[last.leadStart:last.keyStart])
			sep = string(raw[last.keyEnd:last.valStart])
		}
		appendText.WriteString("," + lead + string(keyJSON) + sep + e.Value)
	}
	if appendText.Len() > 0 {
		at := closeBrace
		if len(members) > 0 {
			at = members[len(members)-1].valEnd
		}
		repls = append(repls, repl{at, at, appendText.String()})
	}
	slices.SortFunc(repls, func(a, b repl) int { return b.start - a.start })
	out := slices.Clone(raw)
	for _, r := range repls {
		out = slices.Concat(out[:r.start], []byte(r.text), out[r.end:])
	}
	return out, nil
}
