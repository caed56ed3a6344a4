package nodecidr

import (
	"os"
	"testing"
)

// BenchmarkReadDumpFile streams the dump named by CIDRSHIFT_DUMP (for
// example one written by e2e/perf.WriteDump) through ReadDump, as
// `doctor -f` does:
//
//	CIDRSHIFT_DUMP=/tmp/dump.yaml go test -run '^$' -bench ReadDumpFile -benchtime 1x -cpuprofile cpu.out ./nodecidr
func BenchmarkReadDumpFile(b *testing.B) {
	path := os.Getenv("CIDRSHIFT_DUMP")
	if path == "" {
		b.Skip("set CIDRSHIFT_DUMP to a dump file")
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		d, err := ReadDump(b.Context(), f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(d.Pods)), "pods")
	}
}
