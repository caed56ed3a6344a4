package kubeadmcfg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnifiedDiff(t *testing.T) {
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"
	b := "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n11\n12\n13\n"
	want := `--- a
+++ b
@@ -2,7 +2,7 @@
 2
 3
 4
-5
+five
 6
 7
 8
@@ -10,3 +10,4 @@
 10
 11
 12
+13
`
	assert.Equal(t, want, UnifiedDiff("a", "b", []byte(a), []byte(b)))
	assert.Equal(t, "", UnifiedDiff("a", "b", []byte(a), []byte(a)))
	assert.Equal(t, "--- a\n+++ b\n@@ -0,0 +1,1 @@\n+x\n\\ No newline at end of file\n", UnifiedDiff("a", "b", nil, []byte("x")))
	assert.Equal(t, "--- a\n+++ b\n@@ -1,1 +1,1 @@\n-x\n+x\n\\ No newline at end of file\n", UnifiedDiff("a", "b", []byte("x\n"), []byte("x")))
	// A hunk that leaves nothing starts at 0 on its empty side, as diff -u writes it.
	assert.Equal(t, "--- a\n+++ b\n@@ -1,2 +0,0 @@\n-x\n-y\n", UnifiedDiff("a", "b", []byte("x\ny\n"), nil))
}

func TestUnifiedDiffPatchesBack(t *testing.T) {
	cases := [][2]string{
		{"", "a\nb\n"},
		{"a\nb\nc\n", ""},
		{"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n", "a\nB\nc\nd\ne\nf\ng\nh\nI\nj\nk\n"},
		{"x\ny\n", "y\nx\n"},
		{"same\n", "same\nmore\nlines\n"},
	}
	for _, version := range goldenVersions {
		a := golden(t, version, "kube-controller-manager.yaml")
		b := golden(t, version, "kube-controller-manager.yaml.edited")
		cases = append(cases, [2]string{string(a), string(b)}, [2]string{string(b), string(a)})
	}
	for i, c := range cases {
		d := UnifiedDiff("a", "b", []byte(c[0]), []byte(c[1]))
		got, err := applyUnified(c[0], d)
		require.NoError(t, err, "case %d:\n%s", i, d)
		assert.Equal(t, c[1], got, "case %d", i)
	}
}

var hunkRE = regexp.MustCompile(`^@@ -(\d+),(\d+) \+(\d+),(\d+) @@$`)

// applyUnified is a minimal patch(1) for diffs of whole files. Unlike
// patch and git apply, it holds each hunk to both sides of its header: the
// old file's lines at the old start, the new file's lines at the new start,
// and both counts.
func applyUnified(a, d string) (string, error) {
	if d == "" {
		return a, nil
	}
	src := splitKeep(a)
	var out []string
	pos := 0
	lines := strings.Split(strings.TrimSuffix(d, "\n"), "\n")[2:]
	for i := 0; i < len(lines); i++ {
		m := hunkRE.FindStringSubmatch(lines[i])
		if m == nil {
			return "", fmt.Errorf("bad hunk header %q", lines[i])
		}
		start, _ := strconv.Atoi(m[1])
		alen, _ := strconv.Atoi(m[2])
		bstart, _ := strconv.Atoi(m[3])
		blen, _ := strconv.Atoi(m[4])
		if alen > 0 {
			start--
		}
		if blen > 0 {
			bstart--
		}
		if start < pos || start > len(src) {
			return "", fmt.Errorf("hunk %q starts outside the old file's remaining lines %d to %d", lines[i], pos, len(src))
		}
		out = append(out, src[pos:start]...)
		pos = start
		if len(out) != bstart {
			return "", fmt.Errorf("hunk %q: its new lines start after line %d of the new file, not %d", lines[i], len(out), bstart)
		}
		header, aStart, bStart := lines[i], pos, len(out)
		for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "@@") {
			i++
			l := lines[i]
			noEOL := i+1 < len(lines) && lines[i+1] == `\ No newline at end of file`
			text := l[1:] + "\n"
			if noEOL {
				text = l[1:]
				i++
			}
			switch l[0] {
			case ' ':
				if pos >= len(src) || src[pos] != text {
					return "", fmt.Errorf("context mismatch at %d: %q", pos, l)
				}
				out = append(out, text)
				pos++
			case '-':
				if pos >= len(src) || src[pos] != text {
					return "", fmt.Errorf("removal mismatch at %d: %q", pos, l)
				}
				pos++
			case '+':
				out = append(out, text)
			}
		}
		if pos-aStart != alen || len(out)-bStart != blen {
			return "", fmt.Errorf("hunk %q has %d old and %d new lines", header, pos-aStart, len(out)-bStart)
		}
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, ""), nil
}

func splitKeep(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.SplitAfter(s, "\n")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// TestUnifiedDiffGitApplies checks UnifiedDiff against git apply, which is
// strict about every hunk header's start and count: each diff of random
// texts (small alphabets, so that lines repeat and hunks merge and split)
// applied to a must give b.
func TestUnifiedDiffGitApplies(t *testing.T) {
	git, err := exec.LookPath("git")
	require.NoError(t, err, "git applies the diffs")
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(21, 27))
	text := func() string {
		var b strings.Builder
		for range rng.IntN(14) {
			b.WriteString([]string{"a", "b", "c", "d"}[rng.IntN(4)])
			b.WriteByte('\n')
		}
		s := b.String()
		if s != "" && rng.IntN(5) == 0 {
			s = strings.TrimSuffix(s, "\n") // no newline at the end
		}
		return s
	}
	f := filepath.Join(dir, "f")
	// Prefix and suffix that would overlap, and texts that are empty.
	fixed := [][2]string{{"a\n", "a\na\n"}, {"a\na\n", "a\n"}, {"a\nb\na\n", "a\n"}, {"", "a\n"}, {"a\nb\n", ""}, {"a", "a\n"},
		{"x\ny\nz\n", "y\nz\n"}, {"y\nz\n", "x\ny\nz\n"}} // a change at the start, then only the common suffix
	for i := range 150 + len(fixed) {
		a, b := text(), text()
		if i < len(fixed) {
			a, b = fixed[i][0], fixed[i][1]
		}
		d := UnifiedDiff("a/f", "b/f", []byte(a), []byte(b))
		if a == b {
			require.Empty(t, d)
			continue
		}
		got, err := gitApply(git, f, a, d)
		require.NoError(t, err, "case %d: a=%q\nb=%q\n%s", i, a, b, d)
		require.Equal(t, b, got, "case %d: a=%q\n%s", i, a, d)
		patched, err := applyUnified(a, d)
		require.NoError(t, err, "case %d: a=%q\nb=%q\n%s", i, a, b, d)
		require.Equal(t, b, patched, "case %d", i)
		require.Equal(t, minimalEdits(a, b), changedLines(d), "case %d: the diff removes and adds no line it could keep\na=%q\nb=%q\n%s", i, a, b, d)
	}
}

// gitApply writes a to the file f, applies the diff d to it with git apply
// (which checks each hunk's context and old start) and returns the result.
func gitApply(git, f, a, d string) (string, error) {
	if err := os.WriteFile(f, []byte(a), 0o600); err != nil {
		return "", err
	}
	cmd := exec.Command(git, "apply", "--whitespace=nowarn", "-")
	cmd.Dir, cmd.Stdin = filepath.Dir(f), strings.NewReader(d)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git apply: %w: %s", err, out)
	}
	got, err := os.ReadFile(f)
	return string(got), err
}

// minimalEdits is the number of lines a shortest diff from a to b removes
// and adds: the lines of both less twice their longest common subsequence
// (a last line without its newline differs from the same text with one).
func minimalEdits(a, b string) int {
	al, bl := splitKeep(a), splitKeep(b)
	lcs := make([][]int, len(al)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(bl)+1)
	}
	for i := range al {
		for j := range bl {
			if al[i] == bl[j] {
				lcs[i+1][j+1] = lcs[i][j] + 1
			} else {
				lcs[i+1][j+1] = max(lcs[i][j+1], lcs[i+1][j])
			}
		}
	}
	return len(al) + len(bl) - 2*lcs[len(al)][len(bl)]
}

// changedLines counts the removed and added lines of a unified diff.
func changedLines(d string) int {
	n := 0
	for _, l := range strings.Split(d, "\n") {
		if (strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "--- ")) || (strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++ ")) {
			n++
		}
	}
	return n
}

// Two changes with up to twice the context between them share a hunk, as
// in diff -u; one line further apart they get two. Checked against GNU
// diff's own output for gaps around the boundary.
func TestUnifiedDiffJoinsHunksLikeDiffU(t *testing.T) {
	diff, err := exec.LookPath("diff")
	require.NoError(t, err, "GNU diff is the reference")
	dir := t.TempDir()
	for gap := 2*diffContext - 1; gap <= 2*diffContext+2; gap++ {
		var a, b strings.Builder
		for i := 1; i <= gap+10; i++ {
			fmt.Fprintf(&a, "%d\n", i)
			if i == 4 || i == 5+gap {
				fmt.Fprintf(&b, "changed %d\n", i)
			} else {
				fmt.Fprintf(&b, "%d\n", i)
			}
		}
		fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		require.NoError(t, os.WriteFile(fa, []byte(a.String()), 0o600))
		require.NoError(t, os.WriteFile(fb, []byte(b.String()), 0o600))
		out, err := exec.Command(diff, "-u", "--label", "a/f", "--label", "b/f", fa, fb).Output()
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit) && exit.ExitCode() == 1, "diff exits 1 when the files differ: %v", err)
		got := UnifiedDiff("a/f", "b/f", []byte(a.String()), []byte(b.String()))
		assert.Equal(t, string(out), got, "%d equal lines between the changes", gap)
		hunks := 1
		if gap > 2*diffContext {
			hunks = 2
		}
		assert.Equal(t, hunks, strings.Count(got, "\n@@ "), "%d equal lines between the changes", gap)
	}
}

// Past maxDiffCells the line matcher is not run: the changed middle is shown
// removed and added whole, which is still a diff that applies. Up to the
// bound the diff is a shortest one.
func TestUnifiedDiffReplacesTheMiddleOfLargeFiles(t *testing.T) {
	git, err := exec.LookPath("git")
	require.NoError(t, err, "git applies the diffs")
	dir := t.TempDir()
	// Middles of n and m lines that share every other line but differ at
	// both ends, so no prefix or suffix is set aside.
	text := func(side string, n int) string {
		var s strings.Builder
		s.WriteString("head\n")
		for i := range n {
			if i%2 == 1 || i == 0 || i == n-1 {
				fmt.Fprintf(&s, "%s%d\n", side, i)
			} else {
				fmt.Fprintf(&s, "kept%d\n", i)
			}
		}
		s.WriteString("tail\n")
		return s.String()
	}
	const side = 2048
	require.Equal(t, maxDiffCells, side*side, "the first case sits on the bound")
	for _, tc := range []struct {
		n, m     int
		shortest bool
		// headless drops the common first line: the hunk then starts
		// with the replaced lines, whose numbers its header shows.
		headless bool
	}{{side, side, true, false}, {side + 1, side, false, false}, {side + 1, side, false, true}} {
		a, b := text("a", tc.n), text("b", tc.m)
		if tc.headless {
			a, b = strings.TrimPrefix(a, "head\n"), strings.TrimPrefix(b, "head\n")
		}
		d := UnifiedDiff("a/f", "b/f", []byte(a), []byte(b))
		if tc.headless {
			require.True(t, strings.HasPrefix(d, "--- a/f\n+++ b/f\n@@ -1,"), "%dx%d lines: the hunk starts at line 1 of both files:\n%.60s", tc.n, tc.m, d)
		}
		if got, err := applyUnified(a, d); assert.NoError(t, err, "%dx%d lines", tc.n, tc.m) {
			assert.Equal(t, b, got, "%dx%d lines", tc.n, tc.m)
		}
		if tc.shortest {
			assert.Equal(t, minimalEdits(a, b), changedLines(d), "%dx%d lines: the matcher runs", tc.n, tc.m)
		} else {
			assert.Equal(t, tc.n+tc.m, changedLines(d), "%dx%d lines: the middle is replaced whole", tc.n, tc.m)
			assert.Less(t, minimalEdits(a, b), tc.n+tc.m)
		}
		got, err := gitApply(git, filepath.Join(dir, "f"), a, d)
		require.NoError(t, err, "%dx%d lines", tc.n, tc.m)
		require.Equal(t, b, got)
	}
}
