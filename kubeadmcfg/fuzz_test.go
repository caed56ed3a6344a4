package kubeadmcfg

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// typedError reports whether err is one of the package's documented errors.
func typedError(err error) bool {
	var fe *FieldError
	var ve *VersionError
	return errors.As(err, &fe) || errors.As(err, &ve) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound)
}

// FuzzManifest feeds arbitrary bytes to the static-pod manifest reader and,
// when they parse, rewrites a flag and checks that exactly that flag changed.
func FuzzManifest(f *testing.F) {
	f.Add([]byte(smallManifest))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command: [kcm, --cluster-cidr, 10.0.0.0/8]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if !typedError(err) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if !bytes.Equal(m.Bytes(), data) {
			t.Fatal("reading changed the bytes")
		}
		before := m.Flags()
		args, err := ManifestArgs(data)
		if err != nil || !reflect.DeepEqual(args, m.Args()) {
			t.Fatalf("ManifestArgs disagrees: %v %v", err, args)
		}
		const v = "10.20.0.0/16"
		if err := m.SetFlag(FlagClusterCIDR, v); err != nil {
			if !errors.Is(err, ErrUnsupportedLayout) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("SetFlag: untyped error %v", err)
			}
			if !bytes.Equal(m.Bytes(), data) {
				t.Fatal("a failed edit changed the bytes")
			}
			return
		}
		again, err := ParseManifest(m.Bytes())
		if err != nil {
			t.Fatalf("the edited manifest does not parse: %v\n%s", err, m.Bytes())
		}
		if got, _ := again.Flag(FlagClusterCIDR); got != v {
			t.Fatalf("--cluster-cidr is %q after the edit\n%s", got, m.Bytes())
		}
		after := again.Flags()
		delete(before, FlagClusterCIDR)
		delete(after, FlagClusterCIDR)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("other flags changed: %v -> %v", before, after)
		}
	})
}

// FuzzClusterConfiguration feeds arbitrary bytes to the ClusterConfiguration
// reader and, when they parse, sets podSubnet and an extra argument and checks
// that nothing else changed.
func FuzzClusterConfiguration(f *testing.F) {
	f.Add([]byte("apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs: {a: b}\nnetworking: {podSubnet: 10.0.0.0/8}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseClusterConfiguration(data)
		if err != nil {
			if !typedError(err) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if !bytes.Equal(c.Bytes(), data) {
			t.Fatal("reading changed the bytes")
		}
		net, version := c.Networking(), c.APIVersion()
		_, _ = c.ControllerManagerFlags()
		if err := c.SetPodSubnet("10.20.0.0/16"); err != nil {
			if !typedError(err) {
				t.Fatalf("SetPodSubnet: untyped error %v", err)
			}
			return
		}
		if err := c.SetExtraArg(ControllerManager, FlagNodeCIDRMaskSize, "23"); err != nil {
			if !typedError(err) {
				t.Fatalf("SetExtraArg: untyped error %v", err)
			}
			return
		}
		again, err := ParseClusterConfiguration(c.Bytes())
		if err != nil {
			t.Fatalf("the edited document does not parse: %v\n%s", err, c.Bytes())
		}
		got := again.Networking()
		if got.PodSubnet != "10.20.0.0/16" || got.ServiceSubnet != net.ServiceSubnet || got.DNSDomain != net.DNSDomain || again.APIVersion() != version {
			t.Fatalf("networking %+v -> %+v, version %s -> %s", net, got, version, again.APIVersion())
		}
		if v, _ := again.ExtraArg(ControllerManager, FlagNodeCIDRMaskSize); v != "23" {
			t.Fatalf("node-cidr-mask-size is %q", v)
		}
	})
}

// FuzzComponentConfig feeds arbitrary bytes to the kube-proxy and kubelet readers.
func FuzzComponentConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if p, err := ParseKubeProxyConfig(data); err == nil {
			if err := p.SetClusterCIDR("10.20.0.0/16"); err == nil {
				again, err := ParseKubeProxyConfig(p.Bytes())
				if err != nil || again.ClusterCIDR() != "10.20.0.0/16" {
					t.Fatalf("kube-proxy edit did not hold: %v\n%s", err, p.Bytes())
				}
			} else if !typedError(err) {
				t.Fatalf("untyped error %v", err)
			}
		} else if !typedError(err) {
			t.Fatalf("untyped error %T: %v", err, err)
		}
		if k, err := ParseKubeletConfig(data); err == nil {
			want := []string{"172.24.0.10", "fd00::a"}
			if err := k.SetClusterDNS(want); err == nil {
				again, err := ParseKubeletConfig(k.Bytes())
				if err != nil || !reflect.DeepEqual(again.ClusterDNS(), want) {
					t.Fatalf("kubelet edit did not hold: %v\n%s", err, k.Bytes())
				}
			} else if !typedError(err) {
				t.Fatalf("untyped error %v", err)
			}
		} else if !typedError(err) {
			t.Fatalf("untyped error %T: %v", err, err)
		}
	})
}

// FuzzUnifiedDiff checks that every diff patches a into b.
func FuzzUnifiedDiff(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 4096 || len(b) > 4096 {
			return
		}
		d := UnifiedDiff("a", "b", []byte(a), []byte(b))
		got, err := applyUnified(a, d)
		if err != nil || got != b {
			t.Fatalf("patch failed: %v\n%q\n%q\n%s", err, a, b, d)
		}
	})
}
