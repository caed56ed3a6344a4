package migrate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/internal/journal"
)

// SetEvictionClock replaces the clock of m's eviction backoff (time.Now
// and time.After), so a test reads the waits instead of timing them.
func (m *FlannelPodCIDRMigration) SetEvictionClock(now func() time.Time, after func(time.Duration) <-chan time.Time) {
	m.now, m.after = now, after
}

// JournalKeys lists the keys of the journal in dir, opening and closing it.
func JournalKeys(t *testing.T, dir string) []string {
	t.Helper()
	j, err := journal.Open(dir)
	require.NoError(t, err)
	defer j.Close()
	k, err := j.Keys("")
	require.NoError(t, err)
	return k
}
