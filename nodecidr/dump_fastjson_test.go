package nodecidr

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSkipWSIsALoop checks the 8-at-a-time skip of spaces against the
// byte loop it stands for, from every start, on every string of up to six
// of ' ', '\t', '\n', '\r' and 'x', and on runs of up to 40 spaces.
func TestSkipWSIsALoop(t *testing.T) {
	ref := func(b []byte, i int) int {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
		return i
	}
	ins := []string{""}
	eachString(" \t\n\rx", 6, func(s string) { ins = append(ins, s) })
	for n := range 41 {
		for _, tail := range []string{"", "x", "\tx", " x", "\n  x"} {
			ins = append(ins, strings.Repeat(" ", n)+tail, "x"+strings.Repeat(" ", n)+tail)
		}
	}
	for _, in := range ins {
		for i := range len(in) + 1 {
			if got, want := skipWS([]byte(in), i), ref([]byte(in), i); got != want {
				t.Fatalf("skipWS(%q, %d) = %d, want %d", in, i, got, want)
			}
		}
	}
}

// TestNextStructuralIsALoop puts every byte value in every position of
// strings of up to 24 bytes, alone and after another structural byte.
func TestNextStructuralIsALoop(t *testing.T) {
	ref := func(b []byte, i int) int {
		for i < len(b) && strings.IndexByte(`"{}[]`, b[i]) < 0 {
			i++
		}
		return i
	}
	for n := range 25 {
		for pos := range n {
			for c := range 256 {
				for _, before := range []int{-1, 0, pos / 2} {
					b := []byte(strings.Repeat("a", n))
					if before >= 0 && before < pos {
						b[before] = ']'
					}
					b[pos] = byte(c)
					for from := range min(n, 3) + 1 {
						if got, want := nextStructural(b, from), ref(b, from); got != want {
							t.Fatalf("nextStructural(%q, %d) = %d, want %d", b, from, got, want)
						}
					}
				}
			}
		}
	}
}

// TestFastJSONStringIsEncodingJSONs: the string scanner accepts exactly the
// string literals encoding/json accepts, ends them where it does, and calls
// plain (its text is its value) only those without escapes or non-ASCII
// bytes. Every byte value in every position of literals of up to 18 bytes,
// after a backslash, and in each digit of a \u escape.
func TestFastJSONStringIsEncodingJSONs(t *testing.T) {
	var ins []string
	for n := range 19 {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("k", n))
				b[pos] = byte(c)
				ins = append(ins, `"`+string(b)+`"`)
			}
		}
	}
	for c := range 256 {
		ins = append(ins, `"\`+string([]byte{byte(c)})+`"`, `"ab\`+string([]byte{byte(c)})+`x"`)
		for d := range 4 {
			h := []byte("00e9")
			h[d] = byte(c)
			ins = append(ins, `"\u`+string(h)+`"`, `"abcdefgh\u`+string(h)+`"`)
		}
	}
	ins = append(ins, `"`, `"\`, `"\u`, `"\u00`, `"\u00e`, `"abc`, `"abcdefgh\u12`, `"abcdefghijklmno`)
	for _, in := range ins {
		checkStr(t, in, in+",")
		checkStr(t, in, in) // no spare capacity: a read past the end panics
	}
}

func checkStr(t *testing.T, in, buf string) {
	t.Helper()
	s := jsonPod{b: slices.Clip([]byte(buf))}
	v, plain, ok := s.str()
	dec := json.NewDecoder(strings.NewReader(in))
	tok, err := dec.Token()
	if ok != (err == nil) {
		t.Fatalf("str(%q): ok %v, encoding/json: %v", in, ok, err)
	}
	if !ok {
		return
	}
	want, end := tok.(string), int(dec.InputOffset())
	if s.i != end {
		t.Fatalf("str(%q) ends at %d, encoding/json at %d", in, s.i, end)
	}
	isPlain := !strings.ContainsAny(in[:end], `\`) && strings.IndexFunc(in[:end], func(r rune) bool { return r >= 0x80 }) < 0
	if plain != isPlain {
		t.Fatalf("str(%q): plain %v, want %v", in, plain, isPlain)
	}
	if plain && string(v) != want {
		t.Fatalf("str(%q) = %q, want %q", in, v, want)
	}
}

// TestFastJSONNumberIsJSONsGrammar: number accepts a text whole exactly when
// encoding/json does, on every text of up to six of "019-+.eE".
func TestFastJSONNumberIsJSONsGrammar(t *testing.T) {
	eachString("019-+.eE", 6, func(in string) {
		s := jsonPod{b: []byte(in)}
		got := s.number() && s.i == len(in)
		if want := json.Valid([]byte(in)); got != want {
			t.Fatalf("number(%q) reads %d bytes: whole %v, encoding/json: %v", in, s.i, got, want)
		}
	})
}

// TestFastJSONTakesWhatItDocuments: JSON items at the edges of what the
// JSON fast path reads (dump_fastjson.go's comment) are either taken by it,
// with encoding/json's result (checkFastJSON), or left to encoding/json,
// as listed.
func TestFastJSONTakesWhatItDocuments(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	nestObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	siblings := func(n int, v string) string { return "[" + strings.Repeat(v+",", n) + v + "]" }
	pod := func(rest string) string { return `{"kind":"Pod","metadata":{"name":"a"}` + rest + `}` }
	for _, tc := range []struct {
		name string
		in   string
		fast bool
	}{
		{"a Node", `{"kind":"Node","metadata":{"name":"a"},"spec":{"podCIDR":"10.0.0.0/24"}}`, true},
		{"a Node without a name", `{"kind":"Node","metadata":{}}`, false},
		{"an item without a kind", `{"metadata":{"name":"a"}}`, false},
		{"literals", pod(`,"spec":{"hostNetwork":true},"status":{"phase":null},"x":[true,false,null]`), true},
		{"hostNetwork false", pod(`,"spec":{"hostNetwork":false}`), true},
		{"hostNetwork null", pod(`,"spec":{"hostNetwork":null}`), true},
		{"hostNetwork a string", pod(`,"spec":{"hostNetwork":"true"}`), false},
		{"a wanted string given as true", pod(`,"spec":{"nodeName":true}`), false},
		{"metadata null", `{"kind":"Pod","metadata":null}`, true},
		{"a literal cut short", `{"kind":"Pod","x":tru`, false},
		{"a literal misspelt", pod(`,"x":nul`), false},
		{"numbers", pod(`,"x":[0,-1,1.5,-0.5e10,1E+2,2e-3,10]`), true},
		{"a number cut short", pod(`,"x":1.`), false},
		{"escapes in a string nobody wants", pod(`,"x":"\u00e9\n\"\\"`), true},
		{"an escape in a wanted string", `{"kind":"Pod","metadata":{"name":"\u0061"}}`, false},
		{"non-ASCII in a wanted string", `{"kind":"Pod","metadata":{"name":"é"}}`, false},
		{"white space everywhere", " {\n\t\"kind\" :\r\n \"Pod\" , \"metadata\" : { \"name\" : \"a\" } , \"x\" : [ 1 , { } , [ ] ] } \n", true},
		{"1000 levels of arrays", pod(`,"x":` + nest(999)), true},
		{"1001 levels of arrays", pod(`,"x":` + nest(1000)), false},
		{"1000 levels of objects", pod(`,"x":` + nestObj(999)), true},
		{"1001 levels of objects", pod(`,"x":` + nestObj(1000)), false},
		{"2000 empty arrays side by side", pod(`,"x":` + siblings(2000, "[[]]")), true},
		{"2000 empty objects side by side", pod(`,"x":` + siblings(2000, `{"a":{}}`)), true},
		{"an object cut short", pod(`,"x":{"a":1`), false},
		{"an array cut short", pod(`,"x":[1`), false},
		{"a key without a colon", pod(`,"x" 1`), false},
		{"an object's key not a string", pod(`,"x":{1:2}`), false},
		{"podIPs not objects", `{"kind":"Pod","status":{"podIPs":["10.0.0.1"]}}`, false},
		{"podIPs", `{"kind":"Pod","status":{"podIPs":[{"ip":"10.0.0.1"},{"ip":"fd00::1"}]}}`, true},
		{"a trailing comma", pod(`,"x":[1,]`), false},
		{"cut after a colon", `{"kind":"Pod","x":`, false},
		{"cut after a key", `{"kind":"Pod","x"`, false},
		{"cut after a comma", `{"kind":"Pod",`, false},
		{"cut after a value", `{"kind":"Pod","x":1`, false},
		{"cut after a {", `{"kind":"Pod","x":{`, false},
		{"cut after a [", `{"kind":"Pod","x":[`, false},
		{"cut after an array's value", `{"kind":"Pod","x":[1`, false},
		{"cut in podIPs", `{"kind":"Pod","status":{"podIPs":[{"ip":"10.0.0.1"},`, false},
		{"text after the item", pod(``) + ` x`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No spare capacity: a read past the end panics instead of
			// finding whatever the allocation left there.
			assert.Equal(t, tc.fast, checkFastJSON(t, slices.Clip([]byte(tc.in))), "taken by the JSON fast path")
		})
	}

	// Items of a typed List without a kind are its kind's.
	w := newWorker()
	w.defKind, w.defAPIVersion = "Pod", "v1"
	var r jobResult
	require.True(t, w.fastJSON([]byte(`{"metadata":{"name":"a"}}`), &r), "a kindless item of a PodList")
	require.True(t, w.fastJSON([]byte(`{"kind":"Node","metadata":{"name":"b"}}`), &r), "an item with its own kind")
	assert.Equal(t, []PodSummary{{Name: "a"}}, r.pods)
	require.Len(t, r.nodes, 1)
	assert.Equal(t, "b", r.nodes[0].Name, "the item's own kind wins")
}
