package sim

import (
	"context"
	"errors"
	"testing"
)

// scanTrace is smallTrace with a share of sequential sweep steps.
func scanTrace(files, ops int, seed int64, scan float64) Source {
	cfg := smallTrace(files, ops, seed)
	cfg.ScanFrac = scan
	return GeneratedSource(cfg, 1)
}

// TestL1Admission runs HBA and G-HBA with both L1 admission policies: the
// option changes the results, and on a scan-heavy trace frequency admission
// resolves more lookups at L1 (the scan no longer flushes the hot set).
func TestL1Admission(t *testing.T) {
	tests := []struct {
		name     string
		scan     float64
		freqWins bool // frequency admission must beat LRU at L1
	}{
		{"default mix", 0, false},
		{"scan heavy", 0.3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Replay{Source: scanTrace(10000, 40000, 3, tc.scan), Servers: 10, Seed: 2}
			var hba [2]HBAResult
			var ghba [2]GHBAResult
			for i, adm := range []L1Admission{L1AdmitLRU, L1AdmitFrequency} {
				rs, err := HBA(context.Background(), r, HBAConfig{LRUEntries: []int{100}, L1Admission: adm})
				if err != nil {
					t.Fatal(err)
				}
				hba[i] = rs[0]
				gs, err := GHBA(context.Background(), r, GHBAConfig{MaxGroup: 4, LRUEntries: 100, L1Admission: adm})
				if err != nil {
					t.Fatal(err)
				}
				ghba[i] = gs[0]
				if hba[i].L1Admission != adm.String() || ghba[i].L1Admission != adm.String() {
					t.Errorf("results report admission %q / %q, want %q", hba[i].L1Admission, ghba[i].L1Admission, adm)
				}
			}
			t.Logf("HBA L1 hit: lru %.4f, frequency %.4f; G-HBA L1 %.4f / %.4f, hops %.3f / %.3f",
				hba[0].LRUHitRate, hba[1].LRUHitRate, ghba[0].Levels["L1"], ghba[1].Levels["L1"], ghba[0].MeanHops, ghba[1].MeanHops)
			if hba[0].LRUHitRate == hba[1].LRUHitRate || hba[0].L1Messages == hba[1].L1Messages {
				t.Errorf("HBA: admission does not change the L1 (hit %v, messages %d both)", hba[0].LRUHitRate, hba[0].L1Messages)
			}
			if ghba[0].Levels["L1"] == ghba[1].Levels["L1"] {
				t.Errorf("G-HBA: admission does not change L1 (%v both)", ghba[0].Levels["L1"])
			}
			if hba[1].LRUListBytes <= hba[0].LRUListBytes {
				t.Errorf("list bytes %d (frequency) <= %d (lru): the sketch is not counted", hba[1].LRUListBytes, hba[0].LRUListBytes)
			}
			if tc.freqWins {
				if hba[1].LRUHitRate <= hba[0].LRUHitRate || ghba[1].Levels["L1"] <= ghba[0].Levels["L1"] || ghba[1].MeanHops >= ghba[0].MeanHops {
					t.Errorf("scan-heavy: frequency admission does not win at L1 (HBA %v vs %v, G-HBA %v vs %v, hops %v vs %v)",
						hba[1].LRUHitRate, hba[0].LRUHitRate, ghba[1].Levels["L1"], ghba[0].Levels["L1"], ghba[1].MeanHops, ghba[0].MeanHops)
				}
			}
		})
	}
}

func TestL1AdmissionConfig(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    L1Admission
		wantErr bool
	}{
		{"lru", L1AdmitLRU, false},
		{"frequency", L1AdmitFrequency, false},
		{"", 0, true},
		{"LFU", 0, true},
	} {
		got, err := ParseL1Admission(tc.in)
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("ParseL1Admission(%q) = %v, %v", tc.in, got, err)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	src := GeneratedSource(smallTrace(100, 10, 1), 1)
	ctx := context.Background()
	if _, err := HBA(ctx, Replay{Source: src, Servers: 3}, HBAConfig{LRUEntries: []int{10}, L1Admission: 7}); !errors.Is(err, ErrConfig) {
		t.Errorf("HBA admission 7: %v", err)
	}
	if _, err := GHBA(ctx, Replay{Source: src, Servers: 3}, GHBAConfig{MaxGroup: 2, L1Admission: 7}); !errors.Is(err, ErrConfig) {
		t.Errorf("G-HBA admission 7: %v", err)
	}
}
