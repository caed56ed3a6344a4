package nodenet

import (
	"errors"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

// runtimeRefusesCNI says why a container runtime would skip the CNI config
// file at path with contents data, or returns nil when it would load it.
// containerd (go-cni) and CRI-O (ocicni) load the files of their CNI config
// directory with libcni: a .conflist as a network list, which must have a
// name and at least one plugin, each with a type, inline or in
// <dir>/<name>/*.conf; any other file (.conf, .json) as a single plugin,
// which must have a type. nodenet must pick the file the runtime picks, so
// a file the runtime skips is skipped here too, whatever ParseCNIConfig
// makes of it.
func runtimeRefusesCNI(path string, data []byte) error {
	refused := func(err error) error {
		return fieldErr(ErrBadCNIConfig, "(file)", filepath.Base(path), "is skipped by container runtimes (libcni: %v)", err)
	}
	if filepath.Ext(path) != ".conflist" {
		if _, err := libcni.NetworkPluginConfFromBytes(data); err != nil {
			return refused(err)
		}
		return nil
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return refused(err)
	}
	if !list.LoadOnlyInlinedPlugins {
		more, err := libcni.NetworkPluginConfsFromFiles(filepath.Dir(path), list.Name)
		if err != nil {
			return refused(err)
		}
		list.Plugins = append(list.Plugins, more...)
	}
	if len(list.Plugins) == 0 {
		return refused(errors.New("no plugin configs found"))
	}
	return nil
}
