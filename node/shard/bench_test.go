package shard_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/shard"
)

// BenchmarkApply measures creates committed through the shard's leader by
// 16 concurrent writers, on one replica and on three (each on its own
// raft multiplexer over loopback, with a synced Raft log each), with each
// log store.
func BenchmarkApply(b *testing.B) {
	const writers = 16
	for _, store := range shard.LogStores {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("store=%s/replicas=%d", store, n), func(b *testing.B) {
				c := newCluster(b, n, withLogStore(store))
				l := c.waitLeader()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for range writers {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							if err := l.rep.Apply(context.Background(), create(fmt.Sprintf("/b/f%d", i))); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
			})
		}
	}
}
