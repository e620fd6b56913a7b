package fsimport_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ghba/ghba/cmd/ghba/fsimport"
	"github.com/ghba/ghba/node/nodetest"
)

// BenchmarkImport imports the Go toolchain's source tree (a real tree of
// about 13,000 entries) into an in-process 3-node cluster with 3
// replicas per shard, each iteration into a new directory; it reports
// entries/s.
func BenchmarkImport(b *testing.B) {
	src := filepath.Join(runtime.GOROOT(), "src")
	entries, err := fsimport.CountTree(context.Background(), src)
	if err != nil {
		b.Fatal(err)
	}
	c := nodetest.NewNamespaces(b, nodetest.NamespacesOptions{Nodes: 3, Replication: 3, Placement: "colocate"})
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		im, err := fsimport.New(c.Client, fsimport.Options{Source: src, Dest: fmt.Sprintf("/b%d/src", i), Workers: 32, Owners: true})
		if err != nil {
			b.Fatal(err)
		}
		sum, err := im.Run(context.Background())
		if err != nil || sum.Errors != 0 || sum.Created != entries {
			b.Fatalf("import: %+v, %v (want %d created)", sum, err, entries)
		}
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}
