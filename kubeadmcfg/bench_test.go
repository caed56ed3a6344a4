package kubeadmcfg

import "testing"

func BenchmarkParseClusterConfiguration(b *testing.B) {
	data := golden(b, "v1.36", "cluster-configuration.yaml")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseClusterConfiguration(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkManifestSetFlag(b *testing.B) {
	data := golden(b, "v1.36", "kube-controller-manager.yaml")
	b.ReportAllocs()
	for b.Loop() {
		m, err := ParseManifest(data)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.SetFlag(FlagClusterCIDR, "10.20.0.0/16"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckStoryOne(b *testing.B) {
	s := storyOne(b)
	b.ReportAllocs()
	for b.Loop() {
		Check(s)
	}
}

func BenchmarkNewPlan(b *testing.B) {
	s := storyOne(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewPlan(s, Intent{PodSubnet: "10.20.0.0/16", ServiceSubnet: "172.24.0.0/16"}, PlanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
