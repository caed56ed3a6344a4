//go:build linux

package nodenet

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadCNISkipsWhatTheRuntimeSkips: the files before the flannel
// conflist all parse for ParseCNIConfig, but libcni, with which containerd
// and CRI-O load the directory, refuses each of them; the runtime then uses
// the flannel conflist, and so must nodenet, or it would manage a bridge
// and a range no pod gets.
func TestReadCNISkipsWhatTheRuntimeSkips(t *testing.T) {
	dir := t.TempDir()
	const bridge = `{"type": "bridge", "bridge": "br9", "ipam": {"type": "host-local", "subnet": "10.99.1.0/24"}}`
	files := map[string]string{
		"01-list-in.conf":        `{"cniVersion": "1.0.0", "name": "other", "plugins": [` + bridge + `]}`,
		"02-single-in.conflist":  `{"cniVersion": "1.0.0", "name": "other", "type": "bridge", "bridge": "br9"}`,
		"03-capitals.conflist":   `{"cniVersion": "1.0.0", "Name": "other", "Plugins": [` + bridge + `]}`,
		"04-untyped.conflist":    `{"cniVersion": "1.0.0", "name": "other", "plugins": [{"bridge": "br8"}, ` + bridge + `]}`,
		"05-no-type.json":        `{"cniVersion": "1.0.0", "name": "other", "bridge": "br9"}`,
		"10-flannel.conflist":    flannelConflist,
		"20-bridge.conf":         `{"cniVersion": "1.0.0", "name": "late", "type": "bridge", "bridge": "br7"}`,
		"README":                 "not a config",
		"99-not-json.conflist~":  "{",
		"00-ignored-ext.yaml":    "name: x",
		"06-directory.conflist/": "",
	}
	for name, data := range files {
		if name[len(name)-1] == '/' {
			require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o755))
			continue
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
	for _, name := range []string{"01-list-in.conf", "02-single-in.conflist", "03-capitals.conflist", "04-untyped.conflist"} {
		c, err := ParseCNIConfig([]byte(files[name]))
		require.NoError(t, err, "%s parses on its own", name)
		require.NotEqual(t, "cbr0", c.Name)
	}

	path, c, bad, err := readCNI(dir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "10-flannel.conflist"), path)
	require.NotNil(t, c)
	assert.Equal(t, "cbr0", c.Name)
	assert.Equal(t, "flannel", c.Plugin)
	got := map[string]string{}
	for _, b := range bad {
		got[filepath.Base(b.path)] = b.err.Error()
		assert.ErrorIs(t, b.err, ErrBadCNIConfig)
	}
	assert.Equal(t, map[string]string{
		"01-list-in.conf":       `nodenet: invalid CNI config: (file) "01-list-in.conf": is skipped by container runtimes (libcni: error parsing configuration: missing 'type')`,
		"02-single-in.conflist": `nodenet: invalid CNI config: (file) "02-single-in.conflist": is skipped by container runtimes (libcni: no plugin configs found)`,
		"03-capitals.conflist":  `nodenet: invalid CNI config: (file) "03-capitals.conflist": is skipped by container runtimes (libcni: error parsing configuration list: no name)`,
		"04-untyped.conflist":   `nodenet: invalid CNI config: (file) "04-untyped.conflist": is skipped by container runtimes (libcni: failed to parse plugin config 0: error parsing configuration: missing 'type')`,
		"05-no-type.json":       `nodenet: invalid CNI config: (file) "05-no-type.json": is skipped by container runtimes (libcni: error parsing configuration: missing 'type')`,
	}, got)
}
