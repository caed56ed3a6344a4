// Package b holds a helper another package's tests call.
package b

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func MustDo(t *testing.T) { require.NoError(t, nil) } // want MustDo:"stops"

func Quiet(t *testing.T) error { t.Log("x"); return nil }
