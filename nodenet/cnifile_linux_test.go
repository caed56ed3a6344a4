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

	r, err := readCNI(dir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "10-flannel.conflist"), r.file)
	require.NotNil(t, r.cfg)
	assert.Equal(t, "cbr0", r.cfg.Name)
	assert.Equal(t, "flannel", r.cfg.Plugin)
	assert.Nil(t, r.inUse, "the runtime uses the flannel conflist")
	got := map[string]string{}
	for _, b := range r.bad {
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

// TestReadCNINamesTheRuntimesFileWhenNodenetCannotParseIt: when the file
// the runtime uses is valid for it but not a config nodenet handles (a
// calico list, a multus config), readCNI says which and why, and reads
// the layout from the first later file it parses, or none. The files the
// runtime skips stay problems of their own; a later one it would load is
// none: the runtime never reads it.
func TestReadCNINamesTheRuntimesFileWhenNodenetCannotParseIt(t *testing.T) {
	const calico = `{"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [{"type": "calico", "ipam": {"type": "calico-ipam"}}, {"type": "portmap"}]}`
	const multus = `{"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus", "delegates": [` + flannelConflist + `]}`
	for _, tc := range []struct {
		name        string
		files       map[string]string
		inUse, file string
		inUseErr    string
		bad         []string
	}{{
		name:     "calico alone",
		files:    map[string]string{"10-calico.conflist": calico},
		inUse:    "10-calico.conflist",
		inUseErr: `nodenet: invalid CNI config: plugins "2 plugins": has no plugin of type bridge or flannel; nodenet handles the bridge plugin, directly or through flannel`,
	}, {
		name:     "multus before flannel",
		files:    map[string]string{"00-multus.conf": multus, "10-flannel.conflist": flannelConflist, "05-broken.conflist": "{"},
		inUse:    "00-multus.conf",
		inUseErr: `nodenet: invalid CNI config: type "multus": must be bridge or flannel`,
		file:     "10-flannel.conflist",
		bad:      []string{"05-broken.conflist"},
	}, {
		name:  "a skipped file, calico, one the runtime would load, one it skips, flannel",
		files: map[string]string{"00-untyped.conf": `{"name": "x"}`, "10-calico.conflist": calico, "20-ptp.conf": `{"name": "p", "type": "ptp"}`, "40-untyped.conf": `{"name": "y"}`, "50-flannel.conflist": flannelConflist},
		inUse: "10-calico.conflist", inUseErr: "has no plugin of type bridge or flannel",
		file: "50-flannel.conflist",
		bad:  []string{"00-untyped.conf", "40-untyped.conf"},
	}, {
		name:  "flannel first",
		files: map[string]string{"10-flannel.conflist": flannelConflist, "20-calico.conflist": calico},
		file:  "10-flannel.conflist",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
			}
			r, err := readCNI(dir)
			require.NoError(t, err)
			if tc.inUse == "" {
				assert.Nil(t, r.inUse)
			} else if assert.NotNil(t, r.inUse) {
				assert.Equal(t, filepath.Join(dir, tc.inUse), r.inUse.path)
				assert.ErrorIs(t, r.inUse.err, ErrBadCNIConfig)
				assert.Contains(t, r.inUse.err.Error(), tc.inUseErr)
			}
			if tc.file == "" {
				assert.Empty(t, r.file)
				assert.Nil(t, r.cfg)
			} else {
				assert.Equal(t, filepath.Join(dir, tc.file), r.file)
				assert.NotNil(t, r.cfg)
			}
			var bad []string
			for _, b := range r.bad {
				bad = append(bad, filepath.Base(b.path))
			}
			assert.Equal(t, tc.bad, bad)
		})
	}
}

// TestReadCNISeesTheListsPluginsFromItsDirectory: libcni 1.3 runs a list's
// plugins from <dir>/<name>/*.conf after the inline ones, unless the list
// sets loadOnlyInlinedPlugins; nodenet reads the list the same way, so it
// finds a flannel plugin there, and an inline bridge plugin still comes
// first.
func TestReadCNISeesTheListsPluginsFromItsDirectory(t *testing.T) {
	const flannel = `{"type": "flannel", "delegate": {"bridge": "br5", "isDefaultGateway": true}}`
	const bridge = `{"type": "bridge", "bridge": "br6"}`
	for _, tc := range []struct {
		name, list, plugin string
		bridge             string // "" when the runtime's list is not one nodenet handles
	}{
		{"no inline plugins", `{"cniVersion": "1.1.0", "name": "cbr0"}`, flannel, "br5"},
		{"after an inline portmap", `{"cniVersion": "1.1.0", "name": "cbr0", "plugins": [{"type": "portmap", "capabilities": {"portMappings": true}}]}`, flannel, "br5"},
		{"after an inline bridge", `{"cniVersion": "1.1.0", "name": "cbr0", "plugins": [` + bridge + `]}`, flannel, "br6"},
		{"before a tuning plugin", `{"cniVersion": "1.1.0", "name": "cbr0", "plugins": [` + bridge + `]}`, `{"type": "tuning"}`, "br6"},
		{"inline only", `{"cniVersion": "1.1.0", "name": "cbr0", "loadOnlyInlinedPlugins": true, "plugins": [{"type": "portmap"}]}`, flannel, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "10-flannel.conflist"), []byte(tc.list), 0o644))
			require.NoError(t, os.Mkdir(filepath.Join(dir, "cbr0"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "cbr0", "10-plugin.conf"), []byte(tc.plugin), 0o644))
			r, err := readCNI(dir)
			require.NoError(t, err)
			assert.Empty(t, r.bad)
			if tc.bridge == "" {
				assert.Nil(t, r.cfg)
				if assert.NotNil(t, r.inUse) {
					assert.Equal(t, filepath.Join(dir, "10-flannel.conflist"), r.inUse.path)
					assert.Contains(t, r.inUse.err.Error(), "has no plugin of type bridge or flannel")
				}
				return
			}
			assert.Nil(t, r.inUse)
			assert.Equal(t, filepath.Join(dir, "10-flannel.conflist"), r.file)
			require.NotNil(t, r.cfg)
			assert.Equal(t, "cbr0", r.cfg.Name)
			assert.Equal(t, map[string]string{"br5": "flannel", "br6": "bridge"}[tc.bridge], r.cfg.Plugin)
			assert.Equal(t, tc.bridge, r.cfg.Bridge)
		})
	}
}
