package main

// Benchmarks of replicated shards with agent processes (docs/design.md,
// "Replicated shards"): fail-over time after kill -9, and what a node
// costs in a 9-node cluster. They report measurements, never assert on
// time:
//
//	go test -tags hashicorpmetrics -run NONE -bench 'Failover|Footprint' -benchtime 20x ./cmd/ghba/

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkFailover: R=3, one group of 3 agent processes. Each iteration
// kills (SIGKILL) the node leading the next shard in turn and measures the
// time from the kill to the first successful stat, through another node,
// of a path that shard homes (the client retries every 10 ms); then the
// node is restarted and the cluster waits until every shard is back with
// its owner. Reports p50 and max over b.N kills (use -benchtime 20x).
func BenchmarkFailover(b *testing.B) {
	c := newProcClusterR(b, 3, 3)
	c.startAll()
	m := c.rootedModel()
	c.populate(m, c.nodes, procTops("f", 3), 2, 5)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		v := c.nodes[i%len(c.nodes)]
		paths := m.homedOn(v.id)
		if len(paths) == 0 {
			b.Fatalf("shard %s homes no path", v.id)
		}
		p := paths[i%len(paths)]
		via := c.nodes[(i+1)%len(c.nodes)]
		cl := c.client(via)
		c.kill(v)
		start := time.Now()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := cl.Stat(ctx, p)
			cancel()
			if err == nil {
				break
			}
			if time.Since(start) > procReadyTimeout {
				b.Fatalf("stat %s via %s: no answer %v after killing %s: %v", p, via.id, procReadyTimeout, v.id, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		took = append(took, time.Since(start))
		b.StopTimer()
		c.start(v)
		c.waitReady(v.id+" back", c.nodes...)
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFootprint: R=3, 9 agent processes in 3 groups of 3, 3,000 paths
// created through random nodes; reports each node's resident memory, Go
// heap in use and goroutines (from its /metrics), mean and max.
func BenchmarkFootprint(b *testing.B) {
	c := newProcClusterR(b, 0, 3)
	for i := range 9 {
		c.addNodeWith(procNodeOpts{Group: fmt.Sprintf("g%d", i/3+1), Bootstrap: i%3 == 0, MaxGroupSize: 3})
	}
	c.startGroups()
	m := c.rootedModel()
	c.populate(m, c.nodes, procTops("p", 10), 14, 20)
	c.waitReady("9 nodes settled", c.nodes...)
	var rss, heap, gor []float64
	for b.Loop() {
		rss, heap, gor = rss[:0], heap[:0], gor[:0]
		for _, n := range c.nodes {
			v, err := procMetrics(n, "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines")
			if err != nil {
				b.Fatal(err)
			}
			rss, heap, gor = append(rss, v[0]), append(heap, v[1]), append(gor, v[2])
		}
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	b.ReportMetric(mean(rss)/(1<<20), "rss-MiB/node")
	b.ReportMetric(slices.Max(rss)/(1<<20), "max-rss-MiB")
	b.ReportMetric(mean(heap)/(1<<20), "heap-MiB/node")
	b.ReportMetric(mean(gor), "goroutines/node")
	b.ReportMetric(slices.Max(gor), "max-goroutines")
	b.ReportMetric(float64(len(m.paths())), "paths")
	b.ReportMetric(0, "ns/op")
}

// procMetrics reads the named unlabelled metrics from n's /metrics.
func procMetrics(n *procNode, names ...string) ([]float64, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(n.http) + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if i := slices.Index(names, name); i >= 0 {
			if out[i], err = strconv.ParseFloat(val, 64); err != nil {
				return nil, fmt.Errorf("%s of %s: %w", name, n.id, err)
			}
			found[i] = true
		}
	}
	for i, f := range found {
		if !f {
			return nil, fmt.Errorf("%s: no metric %s", n.id, names[i])
		}
	}
	return out, sc.Err()
}
