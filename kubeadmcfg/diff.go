package kubeadmcfg

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

// maxDiffCells bounds the work of the line matcher; beyond it the changed
// middle of two files is shown as replaced wholesale (still a correct diff).
const maxDiffCells = 4 << 20

// UnifiedDiff returns the changes from a to b as a unified diff (the format
// of diff -u and git diff, three lines of context) with the given file
// labels, or "" when a and b are equal. patch(1) applies it.
func UnifiedDiff(aName, bName string, a, b []byte) string {
	if string(a) == string(b) {
		return ""
	}
	al, bl := splitLines(string(a)), splitLines(string(b))
	ops := diffLines(al, bl)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	// Group the script into hunks: runs of changes with up to 2*context equal lines between them.
	i := 0
	for i < len(ops) {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-diffContext, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(end+diffContext, len(ops))
				break
			}
			end = run
		}
		writeHunk(&out, ops[start:end])
		i = end
	}
	return out.String()
}

type diffOp struct {
	kind  byte // ' ', '-', '+'
	text  string
	aLine int // 1-based line in a (for ' ' and '-')
	bLine int // 1-based line in b (for ' ' and '+')
	noEOL bool
}

func writeHunk(out *strings.Builder, ops []diffOp) {
	aStart, bStart, aLen, bLen := 0, 0, 0, 0
	for _, op := range ops {
		if op.kind != '+' {
			if aLen == 0 {
				aStart = op.aLine
			}
			aLen++
		}
		if op.kind != '-' {
			if bLen == 0 {
				bStart = op.bLine
			}
			bLen++
		}
	}
	if aLen == 0 {
		aStart = ops[0].aLine - 1 // the line before an insertion
	}
	if bLen == 0 {
		bStart = ops[0].bLine - 1
	}
	fmt.Fprintf(out, "@@ -%d,%d +%d,%d @@\n", aStart, aLen, bStart, bLen)
	for _, op := range ops {
		out.WriteByte(op.kind)
		out.WriteString(op.text)
		out.WriteByte('\n')
		if op.noEOL {
			out.WriteString("\\ No newline at end of file\n")
		}
	}
}

type line struct {
	text  string
	noEOL bool
}

func splitLines(s string) []line {
	if s == "" {
		return nil
	}
	parts := strings.SplitAfter(s, "\n")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	out := make([]line, len(parts))
	for i, p := range parts {
		out[i] = line{text: strings.TrimSuffix(p, "\n"), noEOL: !strings.HasSuffix(p, "\n")}
	}
	return out
}

// diffLines returns an edit script from a to b: a longest common subsequence
// of lines after the common prefix and suffix are set aside.
func diffLines(a, b []line) []diffOp {
	var ops []diffOp
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	for i := 0; i < pre; i++ {
		ops = append(ops, diffOp{kind: ' ', text: a[i].text, aLine: i + 1, bLine: i + 1, noEOL: a[i].noEOL})
	}
	am, bm := a[pre:len(a)-suf], b[pre:len(b)-suf]
	n, m := len(am), len(bm)
	if n*m > maxDiffCells {
		for i, l := range am {
			ops = append(ops, diffOp{kind: '-', text: l.text, aLine: pre + i + 1, bLine: pre + 1, noEOL: l.noEOL})
		}
		for j, l := range bm {
			ops = append(ops, diffOp{kind: '+', text: l.text, aLine: pre + n + 1, bLine: pre + j + 1, noEOL: l.noEOL})
		}
	} else {
		// lcs[i][j] = length of the LCS of am[i:] and bm[j:].
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if am[i] == bm[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && am[i] == bm[j]:
				ops = append(ops, diffOp{kind: ' ', text: am[i].text, aLine: pre + i + 1, bLine: pre + j + 1, noEOL: am[i].noEOL})
				i++
				j++
			case j < m && (i == n || lcs[i][j+1] > lcs[i+1][j]):
				ops = append(ops, diffOp{kind: '+', text: bm[j].text, aLine: pre + i + 1, bLine: pre + j + 1, noEOL: bm[j].noEOL})
				j++
			default:
				ops = append(ops, diffOp{kind: '-', text: am[i].text, aLine: pre + i + 1, bLine: pre + j + 1, noEOL: am[i].noEOL})
				i++
			}
		}
	}
	for k := 0; k < suf; k++ {
		ai, bi := len(a)-suf+k, len(b)-suf+k
		ops = append(ops, diffOp{kind: ' ', text: a[ai].text, aLine: ai + 1, bLine: bi + 1, noEOL: a[ai].noEOL})
	}
	return ops
}
