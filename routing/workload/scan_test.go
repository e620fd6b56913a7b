package workload

import (
	"testing"
)

// TestScan checks the sequential sweep of ScanFrac: the scan steps stat
// files in creation order, each once per sweep, so a scan-heavy trace has
// about ScanFrac·Ops paths accessed exactly once, which the regular mix
// (a hot set plus re-references) does not produce.
func TestScan(t *testing.T) {
	const files, ops = 20000, 8000
	tests := []struct {
		name     string
		scan     float64
		minOnce  int // paths accessed exactly once by timed records
		maxOnce  int
		minOrder int // stats that follow the files' creation order from the first (0: few)
	}{
		{"no scan", 0, 0, ops / 4, 0},
		{"half scan", 0.5, ops * 35 / 100, ops, ops / 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Files, cfg.Dirs, cfg.Ops, cfg.Seed, cfg.ScanFrac = files, files/10, ops, 9, tc.scan
			index := make(map[string]int) // file path -> creation order
			count := make(map[string]int)
			last, swept := -1, 0 // the sweep starts at the first file
			err := Generate(cfg, func(r Record) error {
				switch {
				case r.Op == OpExists && !r.Dir:
					index[r.Path] = len(index)
				case r.Time > 0 || r.Op != OpExists:
					count[r.Path]++
					// The next file of the sweep, allowing for a few
					// files removed before the sweep reached them.
					if i, ok := index[r.Path]; ok && r.Op == OpStat && i > last && i <= last+5 {
						last = i
						swept++
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			once := 0
			for _, n := range count {
				if n == 1 {
					once++
				}
			}
			if once < tc.minOnce || once > tc.maxOnce {
				t.Errorf("%d paths accessed once, want %d..%d", once, tc.minOnce, tc.maxOnce)
			}
			if swept < tc.minOrder || (tc.minOrder == 0 && swept > ops/100) {
				t.Errorf("%d stats follow the creation order, want at least %d", swept, tc.minOrder)
			}
			t.Logf("%d paths accessed once, %d stats in sweep order", once, swept)
		})
	}
}
