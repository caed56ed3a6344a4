// Package timing summarises measured durations, such as the gap between a
// delete and the matching create, as p50/p99/max.
package timing

import (
	"slices"
	"time"
)

// Summary is a distribution of durations.
type Summary struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	Max   time.Duration `json:"max"`
}

// Summarize returns the nearest-rank p50, p99 and the maximum of ds.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		i = max(0, min(i, len(s)-1))
		return s[i]
	}
	return Summary{Count: len(s), P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1]}
}
