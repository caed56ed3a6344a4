package kubeadmcfg

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

func TestYAMLEditInPlace(t *testing.T) {
	tests := []struct {
		name string
		in   string
		edit func(y *yamlStream) error
		want string
	}{
		{
			name: "scalar replaced, comments and order kept",
			in:   "# head\nb: 1 # keep\nnet:\n  pod: 10.0.0.0/8   # pods\n  svc: x\na: 2\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"net", "pod"}, strNode("10.20.0.0/16")) },
			want: "# head\nb: 1 # keep\nnet:\n  pod: 10.20.0.0/16   # pods\n  svc: x\na: 2\n",
		},
		{
			name: "double quotes kept",
			in:   "a: \"24\"\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a"}, strNode("25")) },
			want: "a: \"25\"\n",
		},
		{
			name: "single quotes kept",
			in:   "a: '10.0.0.0/8'\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a"}, strNode("10.1.0.0/16")) },
			want: "a: '10.1.0.0/16'\n",
		},
		{
			name: "a value that needs quotes gets them",
			in:   "a: x\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a"}, strNode("true")) },
			want: "a: \"true\"\n",
		},
		{
			name: "new key in sorted position",
			in:   "networking:\n  dnsDomain: cluster.local\n  serviceSubnet: 10.96.0.0/12\nscheduler: {}\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"networking", "podSubnet"}, strNode("10.244.0.0/16")) },
			want: "networking:\n  dnsDomain: cluster.local\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\nscheduler: {}\n",
		},
		{
			name: "new key last, after nested content",
			in:   "a:\n  b:\n  - x\n  - y\nc: 1\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a", "z"}, strNode("v")) },
			want: "a:\n  b:\n  - x\n  - y\n  z: v\nc: 1\n",
		},
		{
			name: "empty flow mapping becomes a block",
			in:   "controllerManager: {}\ndns: {}\n",
			edit: func(y *yamlStream) error {
				return y.set(ypath{"controllerManager", "extraArgs"}, seqNode(mapNode(strNode("name"), strNode("v"), strNode("value"), strNode("2"))))
			},
			want: "controllerManager:\n  extraArgs:\n  - name: v\n    value: \"2\"\ndns: {}\n",
		},
		{
			name: "missing parents are created",
			in:   "apiVersion: x\nkind: Y\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"networking", "podSubnet"}, strNode("10.0.0.0/8")) },
			want: "apiVersion: x\nkind: Y\nnetworking:\n  podSubnet: 10.0.0.0/8\n",
		},
		{
			name: "indentation of four spaces followed",
			in:   "a:\n    b: 1\nc:\n    d: 2\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"c", "e", "f"}, strNode("3")) },
			want: "a:\n    b: 1\nc:\n    d: 2\n    e:\n        f: \"3\"\n",
		},
		{
			name: "implicit null gets a value",
			in:   "a:\nb: 1\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a"}, strNode("x")) },
			want: "a: x\nb: 1\n",
		},
		{
			name: "implicit null after a space before the colon",
			in:   "a :\nb: 1\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a"}, strNode("x")) },
			want: "a : x\nb: 1\n",
		},
		{
			name: "a new key goes above the comments of the key after it",
			in:   "# head\nb: 1\nnet:\n  dns: x\n  # services\n    # deeper\n  # Services\n  svc: y\n",
			edit: func(y *yamlStream) error {
				if err := y.set(ypath{"a"}, strNode("1")); err != nil {
					return err
				}
				return y.set(ypath{"net", "pod"}, strNode("z"))
			},
			want: "a: \"1\"\n# head\nb: 1\nnet:\n  dns: x\n  # services\n    # deeper\n  pod: z\n  # Services\n  svc: y\n",
		},
		{
			name: "the only item removed leaves []",
			in:   "l:\n- a\nx: 1\n",
			edit: func(y *yamlStream) error { return y.del(ypath{"l", 0}) },
			want: "l: []\nx: 1\n",
		},
		{
			name: "a key indented by one space removed with what it holds",
			in:   "a:\n b:\n  c: 1\nx: 1\n",
			edit: func(y *yamlStream) error { return y.del(ypath{"a", "b"}) },
			want: "a: {}\nx: 1\n",
		},
		{
			name: "spaces after the emptied key's colon go",
			in:   "a:   \n  b: 1\nx: 1\n",
			edit: func(y *yamlStream) error { return y.del(ypath{"a", "b"}) },
			want: "a: {}\nx: 1\n",
		},
		{
			name: "flow mapping stays flow",
			in:   "a: {x: 1}\nb: 1\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a"}, mapNode(strNode("x"), strNode("2"))) },
			want: "a: {x: \"2\"}\nb: 1\n",
		},
		{
			name: "list item by item",
			in:   "clusterDNS:\n- 10.96.0.10 # dns\nclusterDomain: cluster.local\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"clusterDNS"}, strSeq([]string{"172.24.0.10"})) },
			want: "clusterDNS:\n- 172.24.0.10 # dns\nclusterDomain: cluster.local\n",
		},
		{
			name: "list grows",
			in:   "clusterDNS:\n  - 10.96.0.10\nx: 1\n",
			edit: func(y *yamlStream) error {
				return y.set(ypath{"clusterDNS"}, strSeq([]string{"10.96.0.10", "fd00::a"}))
			},
			want: "clusterDNS:\n  - 10.96.0.10\n  - fd00::a\nx: 1\n",
		},
		{
			name: "list shrinks",
			in:   "clusterDNS:\n- 10.96.0.10\n- fd00::a\nx: 1\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"clusterDNS"}, strSeq([]string{"10.1.0.10"})) },
			want: "clusterDNS:\n- 10.1.0.10\nx: 1\n",
		},
		{
			name: "flow list stays flow",
			in:   "clusterDNS: [10.96.0.10]\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"clusterDNS"}, strSeq([]string{"10.1.0.10", "fd00::a"})) },
			want: "clusterDNS: [10.1.0.10, fd00::a]\n",
		},
		{
			// A bracket inside a quoted item does not end the list: the
			// scan skips double quotes (with their backslash escapes) and
			// single quotes (with their doubled quote).
			name: "flow list with brackets in quoted items",
			in:   "certSANs: [\"a]b\", 'c''d]', \"e\\\"]\", f] # sans\nx: 1\n",
			edit: func(y *yamlStream) error {
				return y.set(ypath{"certSANs"}, strSeq([]string{"k8s.example", "10.1.0.1"}))
			},
			want: "certSANs: [k8s.example, 10.1.0.1] # sans\nx: 1\n",
		},
		{
			name: "last key removed leaves {}",
			in:   "apiServer:\n  extraArgs:\n  - name: a\n    value: b\nx: 1\n",
			edit: func(y *yamlStream) error { return y.del(ypath{"apiServer", "extraArgs"}) },
			want: "apiServer: {}\nx: 1\n",
		},
		{
			name: "item inserted after a multi-line item",
			in:   "l:\n- name: a\n  value: b\nz: 1\n",
			edit: func(y *yamlStream) error {
				return y.insertItem(ypath{"l"}, 1, mapNode(strNode("name"), strNode("c"), strNode("value"), strNode("d")))
			},
			want: "l:\n- name: a\n  value: b\n- name: c\n  value: d\nz: 1\n",
		},
		{
			name: "CRLF line breaks kept",
			in:   "a:\r\n  b: 1\r\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a", "c"}, strNode("2")) },
			want: "a:\r\n  b: 1\r\n  c: \"2\"\r\n",
		},
		{
			name: "CRLF: the last key removed leaves {}",
			in:   "a:\r\n  b:\r\n    c: 1\r\nx: 1\r\n",
			edit: func(y *yamlStream) error { return y.del(ypath{"a", "b", "c"}) },
			want: "a:\r\n  b: {}\r\nx: 1\r\n",
		},
		{
			name: "single quotes with an escaped quote, then a comment",
			in:   "a: 'it''s' # c\nb: 1\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a"}, strNode("its")) },
			want: "a: 'its' # c\nb: 1\n",
		},
		{
			name: "a block scalar running to the end is deleted whole",
			in:   "a: 1\nb: |\n  x\n  y\n",
			edit: func(y *yamlStream) error { return y.del(ypath{"b"}) },
			want: "a: 1\n",
		},
		{
			name: "the last line, with no final line break, deleted",
			in:   "a: 1\nb: 2",
			edit: func(y *yamlStream) error { return y.del(ypath{"b"}) },
			want: "a: 1\n",
		},
		{
			name: "no final line break",
			in:   "a: 1",
			edit: func(y *yamlStream) error { return y.set(ypath{"b"}, strNode("x")) },
			want: "a: 1\nb: x",
		},
		{
			name: "other documents untouched",
			in:   "kind: A\nx: 1\n---\n# second\nkind: B\nx: 1\n",
			edit: func(y *yamlStream) error { y.doc = 1; return y.set(ypath{"x"}, strNode("2")) },
			want: "kind: A\nx: 1\n---\n# second\nkind: B\nx: \"2\"\n",
		},
		{
			name: "block scalar after the insertion point is kept whole",
			in:   "a:\n  b: |\n    text\n    # not a comment\nc: 1\n",
			edit: func(y *yamlStream) error { return y.set(ypath{"a", "d"}, strNode("x")) },
			want: "a:\n  b: |\n    text\n    # not a comment\n  d: x\nc: 1\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := &yamlStream{src: []byte(tt.in), what: "test"}
			require.NoError(t, tt.edit(y))
			assert.Equal(t, tt.want, string(y.src))
		})
	}
}

// When no in-place edit exists, a document that may be reformatted is
// re-encoded with the same meaning; a manifest (reencode off) is refused.
func TestYAMLEditFallback(t *testing.T) {
	in := "a: {x: 1, y: 2}\n"
	y := &yamlStream{src: []byte(in), reencode: true, what: "doc"}
	require.NoError(t, y.set(ypath{"a", "z"}, strNode("3")))
	got, err := parseDecode(y.src)
	require.NoError(t, err)
	assert.Equal(t, []any{map[string]any{"a": map[string]any{"x": 1, "y": 2, "z": "3"}}}, got)

	y = &yamlStream{src: []byte(in), what: "manifest.yaml"}
	err = y.set(ypath{"a", "z"}, strNode("3"))
	require.ErrorIs(t, err, ErrUnsupportedLayout)
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "manifest.yaml", fe.Source)
	assert.Equal(t, "a.z", fe.Field)
	assert.Equal(t, in, string(y.src), "a refused edit changes nothing")
}

func TestYAMLEditErrors(t *testing.T) {
	y := &yamlStream{src: []byte("a: [1]\n"), reencode: true, what: "doc"}
	err := y.set(ypath{"a", "b"}, strNode("x"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "a is not a mapping")

	y = &yamlStream{src: []byte("a: [1]\n"), reencode: true}
	require.ErrorIs(t, y.del(ypath{"a", 5}), ErrInvalid)
	y = &yamlStream{src: []byte("a: 1\nb: 2\n"), reencode: true}
	err = y.del(ypath{"c"})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "c not found")
	assert.Equal(t, "a: 1\nb: 2\n", string(y.src), "a refused delete changes nothing")
	// A path through a list, past its end, or through a key that is not
	// there finds nothing to delete.
	for _, p := range []ypath{{"l", "b"}, {"l", 3}, {"l", 3, "x"}, {"x", "y"}} {
		y = &yamlStream{src: []byte("l: [1, 2, 3]\n"), reencode: true}
		err = y.del(p)
		require.ErrorIs(t, err, ErrInvalid, "%s", p)
		assert.Contains(t, err.Error(), p.String()+" not found")
		assert.Equal(t, "l: [1, 2, 3]\n", string(y.src), "%s: a refused delete changes nothing", p)
	}
	// Nor is there an item past the end to set.
	for _, p := range []ypath{{"l", 3}, {"l", 3, "x"}} {
		y = &yamlStream{src: []byte("l: [1, 2, 3]\n"), reencode: true}
		err = y.set(p, strNode("v"))
		require.ErrorIs(t, err, ErrInvalid, "%s", p)
		assert.Contains(t, err.Error(), "l has no item 3")
		assert.Equal(t, "l: [1, 2, 3]\n", string(y.src), "%s: a refused set changes nothing", p)
	}
	require.ErrorIs(t, y.insertItem(ypath{"b"}, 0, strNode("x")), ErrInvalid)

	_, err = parseStream([]byte("a: [1\n"))
	require.Error(t, err)
}

func TestDetectStyle(t *testing.T) {
	for _, tt := range []struct {
		in      string
		step    int
		compact bool
	}{
		{"a:\n  b: 1\nl:\n- x\n", 2, true},
		{"a:\n    b: 1\nl:\n    - x\n", 4, false},
		{"a: 1\n", 2, true},
		{"a:\n  b:\n      c: 1\n", 2, true}, // the smallest step seen
		// An anchor or a tag on the key's line: the mapping's first key
		// still shows the step; the sequence's position is the anchor's,
		// so it does not vote (the other sequence decides).
		{"a: &x\n    b: 1\n", 4, true},
		{"a: !!map\n    b: 1\n", 4, true},
		{"a: &y\n    - 1\nb:\n- 2\n", 2, true},
		{"a: &y\n- 1\nb:\n    - 2\n", 2, false},
	} {
		var n yaml.Node
		require.NoError(t, yaml.Unmarshal([]byte(tt.in), &n))
		step, compact := detectStyle(content(&n))
		assert.Equal(t, tt.step, step, tt.in)
		assert.Equal(t, tt.compact, compact, tt.in)
	}
}

// A carriage return that is not part of a CRLF is a line break to the YAML
// parser but not to the line index, so there is no in-place edit; one that
// ends the text is no exception.
func TestYAMLEditBareCarriageReturn(t *testing.T) {
	for _, in := range []string{"a: 1\r", "a: 1\rb: 2\n"} {
		requireNoInPlaceEdit(t, in, "2")
	}
}

// A quoted scalar or a flow list that goes on to the next line has no
// one-line token to replace: the edit is refused (or the stream
// re-encoded), never a guess.
func TestYAMLEditMultiLineQuotedScalar(t *testing.T) {
	for _, in := range []string{"a: \"x\n  y\"\nb: 1\n", "a: 'x\n  y'\nb: 1\n", "a: [1,\n  2]\nb: 1\n"} {
		requireNoInPlaceEdit(t, in, "z")
	}
}

// An explicit key with no value at the end of the text ("? a") has no colon
// to write a value after: no in-place edit, and no read past the end.
func TestYAMLEditExplicitKeyWithoutAValue(t *testing.T) {
	for _, in := range []string{"? a", "? a   "} {
		requireNoInPlaceEdit(t, in, "x")
	}
}

// requireNoInPlaceEdit sets a to value in a stream that may not be
// re-encoded, and requires the edit to be refused with the text unchanged.
func requireNoInPlaceEdit(t *testing.T, in, value string) {
	t.Helper()
	y := &yamlStream{src: []byte(in), what: "m"}
	require.ErrorIs(t, y.set(ypath{"a"}, strNode(value)), ErrUnsupportedLayout, "%q", in)
	assert.Equal(t, in, string(y.src))
}
