package nodenet

import (
	"encoding/json"
	"errors"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

// runtimeCNI returns the CNI config file at path, with contents data, as
// a container runtime loads it, or why the runtime would skip it.
// containerd (go-cni) and CRI-O (ocicni) load the files of their CNI config
// directory with libcni: a .conflist as a network list, which must have a
// name and at least one plugin, each with a type, inline or in
// <dir>/<name>/*.conf (libcni 1.3, unless loadOnlyInlinedPlugins); any
// other file (.conf, .json) as a single plugin, which must have a type.
// nodenet must pick the file the runtime picks, so a file the runtime skips
// is skipped here too, whatever ParseCNIConfig makes of it; and it must see
// the plugins the runtime sees, so a list's plugins from its directory are
// returned in its "plugins", after the inline ones, as libcni runs them.
func runtimeCNI(path string, data []byte) ([]byte, error) {
	refused := func(err error) ([]byte, error) {
		return nil, fieldErr(ErrBadCNIConfig, "(file)", filepath.Base(path), "is skipped by container runtimes (libcni: %v)", err)
	}
	if filepath.Ext(path) != ".conflist" {
		if _, err := libcni.NetworkPluginConfFromBytes(data); err != nil {
			return refused(err)
		}
		return data, nil
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return refused(err)
	}
	var more []*libcni.PluginConfig
	if !list.LoadOnlyInlinedPlugins {
		if more, err = libcni.NetworkPluginConfsFromFiles(filepath.Dir(path), list.Name); err != nil {
			return refused(err)
		}
	}
	if len(list.Plugins)+len(more) == 0 {
		return refused(errors.New("no plugin configs found"))
	}
	if len(more) == 0 {
		return data, nil
	}
	// libcni has parsed data as a JSON object, and kept each plugin's bytes.
	var top map[string]json.RawMessage
	plugins := make([]json.RawMessage, 0, len(list.Plugins)+len(more))
	for _, p := range append(list.Plugins, more...) {
		plugins = append(plugins, p.Bytes)
	}
	raw, err := json.Marshal(plugins)
	if err == nil {
		err = json.Unmarshal(data, &top)
	}
	if err == nil {
		top["plugins"] = raw
		data, err = json.Marshal(top)
	}
	if err != nil {
		return refused(err)
	}
	return data, nil
}
