package migrate

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// flSuggest proposes a Network four times as large as the current one, down
// to the whole address space, and words for a /1 or /0.
func TestFlSuggest(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.0.0/16":    "10.244.0.0/14",
		"10.245.0.0/16":    "10.244.0.0/14",
		"64.0.0.0/2":       "0.0.0.0/0",
		"128.0.0.0/1":      "a shorter prefix",
		"0.0.0.0/0":        "a shorter prefix",
		"fd00:10:244::/48": "fd00:10:244::/46",
	} {
		assert.Equal(t, want, flSuggest(netip.MustParsePrefix(in)), in)
	}
}
