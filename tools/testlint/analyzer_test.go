package main

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
)

// The cases, with the reports each line should get, are in testdata/src/a
// (and b, a helper package whose fact a reads).
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), Analyzer, "a")
}
