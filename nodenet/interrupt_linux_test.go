//go:build linux

package nodenet

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/coreos/go-iptables/iptables"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeIPTables is an iptables binary that answers --version and runs body
// for every other command.
func fakeIPTables(t *testing.T, body string) *iptables.IPTables {
	t.Helper()
	path := filepath.Join(t.TempDir(), "iptables")
	script := "#!/bin/sh\ncase \"$1\" in --version) echo 'iptables v1.8.9 (nf_tables)'; exit 0;; esac\n" + body + "\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	ipt, err := iptables.New(iptables.Path(path))
	require.NoError(t, err)
	return ipt
}

// An iptables command killed by a signal (its caller's service being
// stopped) is marked ErrInterrupted, with the signal; one that exits with
// an error of its own is not.
func TestIPTablesKilledBySignalIsInterrupted(t *testing.T) {
	_, err := fakeIPTables(t, "kill -TERM $$").List("nat", "POSTROUTING")
	require.Error(t, err)
	werr := wrapIPT(err, "list", "nat", "POSTROUTING")
	assert.ErrorIs(t, werr, ErrInterrupted)
	assert.ErrorContains(t, werr, "nodenet: iptables list nat POSTROUTING: iptables command killed by a signal (terminated): ")
	var ie *iptables.Error
	assert.True(t, errors.As(werr, &ie), "go-iptables' error is kept: %v", werr)

	_, err = fakeIPTables(t, "echo 'iptables: Resource temporarily unavailable.' >&2; exit 4").List("nat", "POSTROUTING")
	require.Error(t, err)
	werr = wrapIPT(err, "list", "nat", "POSTROUTING")
	assert.NotErrorIs(t, werr, ErrInterrupted)
	assert.ErrorContains(t, werr, "nodenet: iptables list nat POSTROUTING: ")
}
