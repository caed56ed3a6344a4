package cli

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cidrshift/cidrshift/internal/lease"
)

func TestLockFlags(t *testing.T) {
	parse := func(args ...string) (*LockFlags, error) {
		var f LockFlags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return &f, f.Check()
	}
	f, err := parse()
	require.NoError(t, err)
	assert.Equal(t, LockFlags{Namespace: "kube-system", Duration: time.Minute}, *f)
	for args, msg := range map[string]string{
		"--lock-namespace=":         `--lock-namespace ""`,
		"--lock-namespace=Kube_Sys": `--lock-namespace "Kube_Sys"`,
		"--lock-namespace=ops.team": `--lock-namespace "ops.team"`,
		"--lock-duration=1500ms":    "--lock-duration 1.5s: want whole seconds, at least 1s",
		"--lock-duration=0s":        "--lock-duration 0s",
		"--lock-duration=-3s":       "--lock-duration -3s",
		"--steal-lock --no-lock":    "--steal-lock and --no-lock exclude each other",
	} {
		_, err := parse(strings.Fields(args)...)
		var ue *UsageError
		require.ErrorAs(t, err, &ue, args)
		assert.Contains(t, err.Error(), msg, args)
	}
	f, err = parse("--no-lock")
	require.NoError(t, err)
	l, err := f.Lease(nil, "cidrshift-nodecidr")
	require.NoError(t, err)
	assert.Nil(t, l)
	f, err = parse("--lock-namespace=ops", "--lock-duration=5s", "--steal-lock")
	require.NoError(t, err)
	l, err = f.Lease(fake.NewClientset(), "cidrshift-nodecidr")
	require.NoError(t, err)
	assert.Equal(t, "ops/cidrshift-nodecidr", l.String())
}

func TestLockFlagsHold(t *testing.T) {
	c := fake.NewClientset()
	a := LockFlags{Namespace: "kube-system", Duration: time.Minute}
	release, err := a.Hold(context.Background(), c, "cidrshift-servicecidr")
	require.NoError(t, err)
	release2, err := (&LockFlags{Namespace: "kube-system", Duration: time.Minute}).Hold(context.Background(), c, "cidrshift-calico-pool")
	require.NoError(t, err, "scopes are independent")
	defer release2()
	// Another process's Lease object with another identity is refused.
	other, err := lease.New(c, lease.Options{Name: "cidrshift-servicecidr", Identity: "bob@desk/7"})
	require.NoError(t, err)
	_, err = other.Lock(context.Background())
	require.ErrorIs(t, err, lease.ErrHeld)
	release()
	r2, err := other.Lock(context.Background())
	require.NoError(t, err, "released")
	r2()
	off := LockFlags{Off: true}
	release, err = off.Hold(context.Background(), nil, "cidrshift-servicecidr")
	require.NoError(t, err)
	release()
}
