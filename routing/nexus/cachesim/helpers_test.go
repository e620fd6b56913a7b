package cachesim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/routing/workload"
)

// parseTrace builds records from a compact text: space-separated accesses
// "c:op:path" (or "path" alone for a stat by client 0; "c:path" for a stat
// by client c; rename as "c:rename:path>path2"). Single letters become
// paths /A, /B, ….
func parseTrace(t testing.TB, s string) []workload.Record {
	t.Helper()
	var recs []workload.Record
	for i, f := range strings.Fields(s) {
		parts := strings.Split(f, ":")
		r := workload.Record{Time: time.Duration(i+1) * time.Millisecond, Op: workload.OpStat}
		switch len(parts) {
		case 1:
			r.Path = parts[0]
		case 2:
			r.Client = int(parts[0][0] - '0')
			r.Path = parts[1]
		case 3:
			r.Client = int(parts[0][0] - '0')
			op, err := workload.ParseOp(parts[1])
			if err != nil {
				t.Fatal(err)
			}
			r.Op = op
			r.Path = parts[2]
		default:
			t.Fatalf("bad access %q", f)
		}
		if a, b, ok := strings.Cut(r.Path, ">"); ok {
			r.Path, r.Path2 = a, "/"+b
		}
		r.Path = "/" + r.Path
		recs = append(recs, r)
	}
	return recs
}

// letters is a trace of stats by client 0 of the paths named by each
// letter of s.
func letters(t testing.TB, s string) *Trace {
	t.Helper()
	var b strings.Builder
	for _, c := range s {
		b.WriteRune(c)
		b.WriteByte(' ')
	}
	return FromRecords(parseTrace(t, b.String()))
}

func runOne(t testing.TB, tr *Trace, opt Options, s Spec) Result {
	t.Helper()
	rs, err := Run(context.Background(), tr, opt, []Spec{s})
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}
