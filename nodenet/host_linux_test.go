package nodenet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// TestDumpRetriesAnInterruptedDumpTenTimes: a netlink dump the kernel
// interrupted (the table changed while it was read, as flanneld changes
// routes and neighbours during a move) is read again, up to ten retries,
// and then reported; any other outcome is returned at once.
func TestDumpRetriesAnInterruptedDumpTenTimes(t *testing.T) {
	calls := 0
	_, err := dump(func() ([]int, error) { calls++; return nil, netlink.ErrDumpInterrupted })
	require.ErrorIs(t, err, netlink.ErrDumpInterrupted)
	assert.Equal(t, 11, calls, "the first read and ten retries")

	calls = 0
	v, err := dump(func() ([]int, error) {
		calls++
		if calls < 3 {
			return nil, netlink.ErrDumpInterrupted
		}
		return []int{7}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, []int{7}, v)
	assert.Equal(t, 3, calls)

	calls = 0
	other := errors.New("EPERM")
	_, err = dump(func() ([]int, error) { calls++; return nil, other })
	assert.ErrorIs(t, err, other)
	assert.Equal(t, 1, calls)
}

// TestDataplaneLinkStateNamesTheMaster: cni0's ports are read with their
// bridge (a veth moved to another master is a finding); a link without a
// master has none.
func TestDataplaneLinkStateNamesTheMaster(t *testing.T) {
	n := newTestNode(t)
	br := n.bridge("brm")
	d := n.addLink(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "d0"}, PeerName: "d0p"})
	require.NoError(t, n.nl.LinkSetMaster(d, br))
	h, err := openHost(n.want("n1", "10.244.1.0/24", ""))
	require.NoError(t, err)
	defer h.close()

	st, err := h.linkState("d0")
	require.NoError(t, err)
	require.NotNil(t, st)
	assert.Equal(t, "brm", st.master)
	st, err = h.linkState("brm")
	require.NoError(t, err)
	require.NotNil(t, st)
	assert.Empty(t, st.master)
}

// TestReadFileReadsUpToItsLimit: a host file of exactly maxFile bytes is
// read whole; one byte more is refused, never read cut short.
func TestReadFileReadsUpToItsLimit(t *testing.T) {
	dir := t.TempDir()
	exact := filepath.Join(dir, "exact")
	require.NoError(t, os.WriteFile(exact, bytes.Repeat([]byte("a"), maxFile), 0o600))
	data, err := readFile(exact)
	require.NoError(t, err)
	assert.Len(t, data, maxFile)

	over := filepath.Join(dir, "over")
	require.NoError(t, os.WriteFile(over, bytes.Repeat([]byte("a"), maxFile+1), 0o600))
	_, err = readFile(over)
	assert.ErrorContains(t, err, fmt.Sprintf("larger than %d bytes", maxFile))
}
