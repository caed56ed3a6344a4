package nodecidr

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if prefix != "" && prefix[0] != '-' { // "-" and "- x" start a sequence, not a scalar
			scalars = append(scalars, prefix)
		}
		if n == 0 {
			return
		}
		for _, c := range digits {
			gen(prefix+string(c), n-1)
		}
	}
	gen("", 4)
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
