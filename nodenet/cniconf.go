package nodenet

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
)

// ErrBadCNIConfig means a CNI config file cannot be read. Such errors are
// *FieldError values naming the JSON field.
var ErrBadCNIConfig = errors.New("invalid CNI config")

// CNIConfig is what nodenet needs from a node's CNI config: the network name
// (host-local's directory), the bridge and the host-local ranges.
type CNIConfig struct {
	// Name is the network name; host-local keeps its reservations in
	// <dataDir>/<Name>.
	Name string `json:"name"`
	// Plugin is the type of the plugin that owns the bridge: "bridge", or
	// "flannel" (which delegates to the bridge plugin and fills the range
	// from subnet.env).
	Plugin string `json:"plugin"`
	// Bridge is the bridge name, DefaultBridge unless the config names one.
	Bridge string `json:"bridge"`
	// IPAM is the IPAM plugin type ("host-local" for flannel).
	IPAM string `json:"ipam"`
	// Subnets are the host-local ranges written in the config (none for
	// flannel, which takes the range from subnet.env).
	Subnets []netip.Prefix `json:"subnets,omitempty"`
	// DataDir is host-local's dataDir, empty for its default
	// /var/lib/cni/networks.
	DataDir string `json:"dataDir,omitempty"`
}

// cniNameRE is libcni's rule for network names.
var cniNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

type cniPlugin struct {
	Type     string          `json:"type"`
	Bridge   *string         `json:"bridge"`
	IPAM     *cniIPAM        `json:"ipam"`
	Delegate json.RawMessage `json:"delegate"`
}

type cniIPAM struct {
	Type    string  `json:"type"`
	Subnet  *string `json:"subnet"`
	DataDir string  `json:"dataDir"`
	Ranges  [][]struct {
		Subnet string `json:"subnet"`
	} `json:"ranges"`
}

// ParseCNIConfig reads a CNI network config: a .conflist (the first plugin of
// type bridge or flannel counts) or a single-plugin .conf. For flannel, the
// delegate's bridge and ipam are read. host-local subnets must be written the
// way host-local accepts them (no host bits). Errors are *FieldError values
// wrapping ErrBadCNIConfig.
func ParseCNIConfig(data []byte) (*CNIConfig, error) {
	bad := func(field, value, reason string, args ...any) (*CNIConfig, error) {
		return nil, fieldErr(ErrBadCNIConfig, field, value, reason, args...)
	}
	var top struct {
		cniPlugin
		Name    *string           `json:"name"`
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return bad("(file)", truncate(string(data), 80), "is not a JSON object: %v", err)
	}
	if top.Name == nil || !cniNameRE.MatchString(*top.Name) || len(*top.Name) > 255 {
		v := ""
		if top.Name != nil {
			v = *top.Name
		}
		return bad("name", v, "must be a CNI network name (letters, digits, '_', '.', '-', starting with a letter or digit)")
	}
	c := &CNIConfig{Name: *top.Name}
	plugin, field := &top.cniPlugin, ""
	if top.Plugins != nil {
		plugin = nil
		for i, raw := range top.Plugins {
			var p cniPlugin
			if err := json.Unmarshal(raw, &p); err != nil {
				return bad("plugins["+strconv.Itoa(i)+"]", truncate(string(raw), 80), "is not a plugin object: %v", err)
			}
			if p.Type == "bridge" || p.Type == "flannel" {
				plugin, field = &p, "plugins["+strconv.Itoa(i)+"]."
				break
			}
		}
		if plugin == nil {
			return bad("plugins", strconv.Itoa(len(top.Plugins))+" plugins", "has no plugin of type bridge or flannel; nodenet handles the bridge plugin, directly or through flannel")
		}
	}
	c.Plugin = plugin.Type
	switch plugin.Type {
	case "flannel":
		var d cniPlugin
		if len(plugin.Delegate) > 0 && !bytes.Equal(bytes.TrimSpace(plugin.Delegate), []byte("null")) {
			if err := json.Unmarshal(plugin.Delegate, &d); err != nil {
				return bad(field+"delegate", truncate(string(plugin.Delegate), 80), "is not an object: %v", err)
			}
		}
		if d.Type != "" && d.Type != "bridge" {
			return bad(field+"delegate.type", d.Type, "must be bridge (flannel's default); nodenet handles the bridge plugin only")
		}
		plugin, field = &d, field+"delegate."
	case "bridge":
	default:
		return bad(field+"type", plugin.Type, "must be bridge or flannel")
	}
	c.Bridge = DefaultBridge
	if plugin.Bridge != nil {
		if !validIfName(*plugin.Bridge) {
			return bad(field+"bridge", *plugin.Bridge, "must be an interface name (1-15 characters, no '/', ':' or spaces)")
		}
		c.Bridge = *plugin.Bridge
	}
	c.IPAM = "host-local"
	if plugin.IPAM != nil {
		ipam := plugin.IPAM
		if ipam.Type != "" {
			c.IPAM = ipam.Type
		}
		if ipam.DataDir != "" {
			if !filepath.IsAbs(ipam.DataDir) || filepath.Clean(ipam.DataDir) != ipam.DataDir {
				return bad(field+"ipam.dataDir", ipam.DataDir, "must be a clean absolute path")
			}
			c.DataDir = ipam.DataDir
		}
		var subnets []string
		var fields []string
		if ipam.Subnet != nil {
			subnets, fields = append(subnets, *ipam.Subnet), append(fields, field+"ipam.subnet")
		}
		for i, set := range ipam.Ranges {
			for j, r := range set {
				subnets = append(subnets, r.Subnet)
				fields = append(fields, field+"ipam.ranges["+strconv.Itoa(i)+"]["+strconv.Itoa(j)+"].subnet")
			}
		}
		for i, s := range subnets {
			p, err := netip.ParsePrefix(s)
			if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
				return bad(fields[i], s, "must be a CIDR such as 10.244.3.0/24")
			}
			if p.Masked() != p {
				return bad(fields[i], s, "has host bits set; host-local refuses it (the network is %s)", p.Masked())
			}
			c.Subnets = append(c.Subnets, p)
		}
	}
	return c, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
