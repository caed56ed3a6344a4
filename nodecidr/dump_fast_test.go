package nodecidr

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestPrintableASCIIIsEveryByteInSpaceToTilde checks the word-at-a-time
// test against the byte loop it stands for, with every byte value in every
// position of a word, in the tail after the words, and in both at once.
func TestPrintableASCIIIsEveryByteInSpaceToTilde(t *testing.T) {
	for n := range 20 {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("k", n))
				b[pos] = byte(c)
				want := c >= 0x20 && c <= 0x7e
				if got := printableASCII(b); got != want {
					t.Fatalf("printableASCII(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}

// TestEqualFoldASCIIIsStringsEqualFold checks it against strings.EqualFold
// on every pair of ASCII bytes.
func TestEqualFoldASCIIIsStringsEqualFold(t *testing.T) {
	for x := range 128 {
		for y := range 128 {
			a, b := string([]byte{'k', byte(x)}), []byte{'K', byte(y)}
			if got, want := equalFoldASCII(a, b), strings.EqualFold(a, string(b)); got != want {
				t.Fatalf("equalFoldASCII(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
}

// TestResolvePlainIsGoYAMLs checks resolvePlain against sigs.k8s.io/yaml on
// every plain scalar of up to four characters from the characters numbers
// are written with, and on the words YAML gives a meaning to: each is read
// as the same kind (string, null, bool or number), and ±Inf and NaN, which
// sigs.k8s.io/yaml cannot turn into JSON, are numbers the fast path gives
// up on.
func TestResolvePlainIsGoYAMLs(t *testing.T) {
	scalars := []string{
		".inf", "-.inf", "+.inf", ".Inf", "-.Inf", ".INF", "+.INF", ".nan", ".NaN", ".NAN", ".infx", "-.infx", ".in", "-.nan",
		"<", "<a", "<<<", "~", "null", "Null", "NULL", "nULL", "y", "Y", "yes", "Yes", "YES", "n", "No", "on", "Off", "OFF", "oN",
		"true", "True", "TRUE", "tRUE", "false", "FALSE", "0x1F", "0X1f", "0o17", "0O17", "017", "1_000", "0b101", "-0b101", "0b-1",
		"9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616", "1e308", "1e309", "-1.5E+3",
		"2024-01-01", "1.2.3", "1..2", "0xG", "+0x1_F", "1f", "0.5.", "12:30", "a", "0xa", "0xA", "-0xaF", "0XAf", "0x9",
	}
	const digits = "01.eE+-_xob"
	eachString(digits, 4, func(v string) {
		if v[0] != '-' { // "-" and "- x" start a sequence, not a scalar
			scalars = append(scalars, v)
		}
	})
	for _, c := range digits {
		for _, d := range digits {
			scalars = append(scalars, "-"+string(c)+string(d)) // the '-' ones after all
		}
	}
	for _, v := range scalars {
		js, err := yaml.YAMLToJSON([]byte("k: " + v))
		want := yNumber // ±Inf and NaN: refused, so not read as anything else
		if err == nil {
			var m map[string]any
			require.NoError(t, json.Unmarshal(js, &m), v)
			switch m["k"].(type) {
			case string:
				want = yStr
			case nil:
				want = yNull
			case bool:
				want = yBool
			case float64:
				want = yNumber
			default:
				t.Fatalf("%q: sigs.k8s.io/yaml gives %T", v, m["k"])
			}
		}
		if v == "<<" {
			want = yOther
		}
		got, b := resolvePlain([]byte(v))
		if got != want {
			t.Fatalf("resolvePlain(%q) = %v, sigs.k8s.io/yaml reads it as %v (%s, %v)", v, got, want, js, err)
		}
		if want == yBool && string(js) != fmt.Sprintf(`{"k":%v}`, b) {
			t.Fatalf("resolvePlain(%q) = %v, sigs.k8s.io/yaml reads it as %s", v, b, js)
		}
	}
	t.Logf("%d scalars", len(scalars))
}

// TestFastPathTakesWhatItDocuments: objects at the edges of the YAML subset
// the fast path reads (dump_fast.go's comment) are either taken by it, with
// the full decoder's result and sigs.k8s.io/yaml's JSON (checkFast), or
// left to the full decoder, as listed. An object it stops taking costs
// speed only, which no other test sees; one it takes wrongly costs
// correctness, which checkFast sees.
func TestFastPathTakesWhatItDocuments(t *testing.T) {
	pod := "kind: Pod\nmetadata:\n  name: a\n"
	node := "kind: Node\nmetadata:\n  name: a\n  annotations:\n"
	keys := func(n, width int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "    k%0*d: v\n", width-1, i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name     string
		in       string
		indent   int
		fast, js bool // taken by the fast path, converted to JSON by it
	}{
		{"an item's first key on the next line", "- \n  kind: Pod\n  metadata:\n    name: a\n", 0, false, false},
		{"an item's first key after more spaces", "-   kind: Pod\n    metadata:\n      name: a\n", 0, true, true},
		{"keys without a value", "kind: Pod\nmetadata:\n  x:\n  name: a\nspec:\n  y:\n", -1, true, true},
		{"a blank line between keys", "kind: Pod\n\nmetadata:\n  name: a\n", -1, true, true},
		{"a key that starts like a document marker", "kind: Pod\n---x: 1\nmetadata:\n  name: a\n", -1, true, true},
		{"a sequence entry on the next line", "kind: Pod\nstatus:\n  podIPs:\n  - \n    ip: 1.2.3.4\n", -1, false, false},
		{"a sequence in a sequence", "kind: Pod\nspec:\n  x:\n  - - a\n    - b\n  - c\n", -1, true, true},
		{"empty flow collections", "kind: Pod\nmetadata: {}\nspec: {}\nstatus:\n  podIPs: []\n  x: []\n  y: {}\n", -1, true, true},
		{"empty labels", "kind: Pod\nmetadata:\n  labels: {}\n", -1, true, true},
		{"a wanted string given as []", "kind: Pod\nspec:\n  nodeName: []\n", -1, false, false},
		{"a wanted string given as {}", "kind: Pod\nspec:\n  nodeName: {}\n", -1, false, false},
		{"podIPs given as {}", "kind: Pod\nstatus:\n  podIPs: {}\n", -1, false, false},
		{"a wanted scalar continued", pod + "    b\n", -1, false, false},
		{"another scalar continued", pod + "  x: long\n    words\n    more\n", -1, true, true},
		{"another scalar continued, then a key", pod + "  x: long\n    words\n  y: b\n", -1, true, true},
		{"a scalar continued, converted", node + "    x: long\n      words\n      more\n", -1, true, true},
		{"a scalar continued after a blank line", node + "    x: long\n\n      words\n", -1, false, false},
		{"a blank line after a scalar", node + "    x: long\n\n    y: b\n", -1, true, true},
		{"a blank line after a continued scalar", node + "    x: long\n      words\n\n    y: b\n", -1, false, false},
		{"a continuation that starts with #", node + "    x: long\n      # not a comment\n", -1, false, false},
		{"a # inside a continuation", node + "    x: long\n      wo#rds\n", -1, true, true},
		{"a comment after a continuation", node + "    x: long\n      wo #rds\n", -1, false, false},
		{"a # inside a value", pod + "  x: a#b\n", -1, true, true},
		{"a comment after a wanted value", "kind: Pod\nmetadata:\n  name: a #b\n", -1, false, false},
		{"a comment after a value, converted", node + "    x: a #b\n", -1, false, false},
		{"a # inside a key", pod + "  x#y: 1\n", -1, true, true},
		{"a comment inside a key", pod + "  x #y: 1\n", -1, false, false},
		{"spaces before a key's colon", pod + "  x  : 1\n", -1, true, true},
		{"block scalars", pod + "  x: |\n    one\n    two\n  y: |-\n    one\n  z: |+\n    one\n  w: >-\n    one\n", -1, true, false},
		{"a block scalar with an indentation indicator", pod + "  x: |2\n    one\n", -1, false, false},
		{"a block scalar header with junk", pod + "  x: |x\n    one\n", -1, false, false},
		{"an empty block scalar, then a key", "kind: Pod\nmetadata:\n  x: |\n  name: a\n", -1, true, false},
		{"a block scalar's blank line as deep as its text", "kind: Pod\nmetadata:\n  x: |\n    \n    one\n  name: a\n", -1, true, false},
		{"a block scalar's blank line deeper than its text", "kind: Pod\nmetadata:\n  x: |\n      \n    one\n  name: a\n", -1, false, false},
		{"plain scalars that start with an indicator", "kind: Pod\nmetadata:\n  name: -a\n  x: ?a\n  y: :a\n", -1, true, true},
		{"a lone -", "kind: Pod\nmetadata:\n  name: -\n", -1, false, false},
		{"single-quoted scalars", "kind: Pod\nmetadata:\n  name: 'it''s'\n  x: 'a'''\n  y: '''a'\n  z: ''\n  w: 'a''b''c'\n", -1, true, true},
		{"double-quoted scalars", "kind: Pod\nmetadata:\n  name: \"a\"\n  x: \"\"\n", -1, true, true},
		{"a double-quoted scalar that starts with an escape", "kind: Pod\nmetadata:\n  name: \"\\\\x\"\n", -1, false, false},
		{"quoted keys", "kind: Pod\nmetadata:\n  'na''me': a\n  \"x\": b\n", -1, true, true},
		{"a space before a quoted key's colon", "kind: Pod\nmetadata:\n  'x' : a\n", -1, false, false},
		{"a key of 512 bytes", node + "    " + strings.Repeat("k", 512) + ": v\n", -1, true, true},
		{"a key of 513 bytes", node + "    " + strings.Repeat("k", 513) + ": v\n", -1, false, false},
		{"257 keys in a mapping", node + keys(257, 4), -1, true, true},
		{"258 keys in a mapping", node + keys(258, 4), -1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.fast, checkFast(t, []byte(tc.in), tc.indent), "taken by the fast path")
			var f fastPod
			_, js := f.toJSON([]byte(tc.in), tc.indent)
			assert.Equal(t, tc.js, js, "converted by the fast path")
		})
	}
}

// eachString calls fn with every string of 1 to n bytes of alphabet.
func eachString(alphabet string, n int, fn func(string)) {
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if prefix != "" {
			fn(prefix)
		}
		if n > 0 {
			for _, c := range alphabet {
				gen(prefix+string(c), n-1)
			}
		}
	}
	gen("", n)
}
