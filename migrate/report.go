package migrate

import (
	"fmt"
	"io"
	"strings"
)

// WriteSteps writes the steps of a Report as numbered text, each detail
// indented below its step, and the operator's instructions of a paused run.
func WriteSteps(w io.Writer, steps []StepReport, waiting *Pause) {
	for _, s := range steps {
		fmt.Fprintf(w, "\n%d. %s [%s] %s\n", s.Number, s.Name, s.Status, s.Title)
		for _, d := range s.Details {
			fmt.Fprintln(w, "   "+strings.ReplaceAll(strings.TrimRight(d, "\n"), "\n", "\n   "))
		}
	}
	if waiting != nil {
		fmt.Fprintf(w, "\nWAITING FOR AN OPERATOR (step %s):\n", waiting.Step)
		for i, in := range waiting.Instructions {
			fmt.Fprintf(w, "  %d) %s\n", i+1, in)
		}
		fmt.Fprintln(w, "then: "+waiting.Resume)
	}
}
