package migrate

import "time"

// SetEvictionClock replaces the clock of m's eviction backoff (time.Now
// and time.After), so a test reads the waits instead of timing them.
func (m *FlannelPodCIDRMigration) SetEvictionClock(now func() time.Time, after func(time.Duration) <-chan time.Time) {
	m.now, m.after = now, after
}
