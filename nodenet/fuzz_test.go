package nodenet

import (
	"path/filepath"
	"testing"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzParseCNIConfig: never panics; an accepted config has a network name
// and bridge nodenet can use as a directory and an interface name, canonical
// subnets, and a clean dataDir, so host-local's directory never escapes it.
func FuzzParseCNIConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCNIConfig(b)
		if err != nil {
			return
		}
		if !cniNameRE.MatchString(c.Name) || !validIfName(c.Bridge) {
			t.Fatalf("accepted name %q bridge %q", c.Name, c.Bridge)
		}
		for _, s := range c.Subnets {
			if s.Masked() != s {
				t.Fatalf("accepted subnet with host bits %v", s)
			}
		}
		if c.DataDir != "" && (!filepath.IsAbs(c.DataDir) || filepath.Clean(c.DataDir) != c.DataDir) {
			t.Fatalf("accepted dataDir %q", c.DataDir)
		}
		_, dir := layout(Want{CNIDataDir: "/host/var/lib/cni"}, c)
		if filepath.Base(dir) != c.Name || filepath.Clean(dir) != dir {
			t.Fatalf("host-local directory %q escapes its dataDir for name %q", dir, c.Name)
		}
	})
}

// FuzzAuditSubnetEnv: whatever subnet.env holds, auditing it never panics
// and the plan made from the findings passes its own validation.
func FuzzAuditSubnetEnv(f *testing.F) {
	w, err := Want{Node: "n1", PodCIDR: pfx("10.244.9.0/24"), Network: pfx("10.244.0.0/16"), Backend: BackendHostGW, LivePodsComplete: true}.normalize()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &snapshot{iptables: IPTablesNFT, envFile: "/run/flannel/subnet.env", envData: b, resDir: "/var/lib/cni/networks/cbr0"}
		r := analyze(w, s)
		if _, err := NewPlan(r); err != nil {
			t.Fatalf("plan from %q: %v", b, err)
		}
	})
}
