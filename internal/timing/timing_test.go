package timing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSummarize(t *testing.T) {
	assert.Equal(t, Summary{}, Summarize(nil))
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	assert.Equal(t, Summary{Count: 100, P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}, s)
	assert.Equal(t, 100*time.Millisecond, ds[0], "input is not reordered")
	assert.Equal(t, Summary{Count: 1, P50: time.Second, P99: time.Second, Max: time.Second}, Summarize([]time.Duration{time.Second}))
}
