package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cidrshift/cidrshift/internal/cli/clitest"
)

// The Job manifest runs the runbook with flags it accepts.
func TestJobManifest(t *testing.T) {
	o, err := parseFlags(clitest.JobArgs(t, "job.yaml"), io.Discard)
	require.NoError(t, err)
	clitest.AppliesInCluster(t, o.apply, o.journalDir, o.kubeconfig, o.lock)
}
