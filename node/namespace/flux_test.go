package namespace

import "testing"

// TestFluxMarksBelow: markBelow finds a mark strictly under a path, of
// another transaction only, and the counts of marks under each path that
// spare it a scan go back to nothing when the marks are dropped.
func TestFluxMarksBelow(t *testing.T) {
	var f fluxTable
	f.init()
	a := &partTxn{id: "a"}
	b := &partTxn{id: "b"}
	f.setMark("/x/y/z", a)
	f.setMark("/x/y/z", b) // marked already: a keeps it
	f.setMark("/w", b)
	for _, tc := range []struct {
		path, txn, want string
	}{
		{"/", "", "any"},
		{"/x", "", "a"},
		{"/x/y", "", "a"},
		{"/x/y", "a", ""}, // its own transaction's mark
		{"/x/y/z", "", ""},
		{"/x/yy", "", ""},
		{"/w", "", ""},
		{"/q", "", ""},
	} {
		got := ""
		if m := f.markBelow(tc.path, tc.txn); m != nil {
			got = m.id
		}
		if tc.want == "any" && got != "" {
			continue
		}
		if got != tc.want {
			t.Errorf("markBelow(%q, %q) = %q, want %q", tc.path, tc.txn, got, tc.want)
		}
	}
	if f.count.Load() != 2 {
		t.Errorf("count = %d, want 2", f.count.Load())
	}
	f.dropMark("/x/y/z", b) // not b's: stays
	if f.markBelow("/x", "") == nil {
		t.Error("b dropped a's mark")
	}
	f.dropMark("/x/y/z", a)
	f.dropMark("/w", b)
	if len(f.marks) != 0 || len(f.under) != 0 || f.count.Load() != 0 {
		t.Errorf("after dropping every mark: marks %v, under %v, count %d", f.marks, f.under, f.count.Load())
	}
}
