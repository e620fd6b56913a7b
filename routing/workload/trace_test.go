package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeAll(t testing.TB, recs []Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatalf("Write(%+v): %v", r, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestTraceRoundTrip(t *testing.T) {
	recs := []Record{
		{Op: OpExists, Path: "/", Client: 0},
		{Op: OpExists, Path: "/home", Dir: true},
		{Op: OpExists, Path: "/home/my file.txt", Client: 3},
		{Op: OpExists, Path: "/home/100%\n\t\r\x7f\x01", Client: 3},
		{Op: OpExists, Path: "/home/ünïcødé"},
		{Time: 0, Client: 1, Op: OpStat, Path: "/home"},
		{Time: 12*time.Second + 345*time.Microsecond, Client: 2, Op: OpOpen, Path: "/home/my file.txt"},
		{Time: 12*time.Second + 345*time.Microsecond, Client: 2, Op: OpReaddir, Path: "/home"},
		{Time: 13 * time.Second, Client: 7, Op: OpCreate, Path: "/home/a"},
		{Time: 13*time.Second + 1, Client: 7, Op: OpRename, Path: "/home/a", Path2: "/home/b c"},
		{Time: 14 * time.Second, Client: 7, Op: OpMkdir, Path: "/home/d"},
		{Time: 15 * time.Second, Client: 7, Op: OpRename, Path: "/home/d", Path2: "/home/e", Dir: true},
		{Time: 16 * time.Second, Client: 7, Op: OpStat, Path: "/home/e", Dir: true},
		{Time: 17 * time.Second, Client: MaxClient, Op: OpRmdir, Path: "/home/e"},
		{Time: 18 * time.Second, Client: 7, Op: OpUnlink, Path: "/home/b c"},
		{Time: 290 * 365 * 24 * time.Hour, Client: 7, Op: OpReaddir, Path: "/"},
	}
	text := writeAll(t, recs)
	got, err := ReadAll(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("ReadAll: %v\n%s", err, text)
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v\n%s", got, recs, text)
	}
	lines := strings.Split(string(text), "\n")
	for i, want := range map[int]string{
		1:  "0 0 exists /home/",
		2:  "0 3 exists /home/my%20file.txt",
		3:  "0 3 exists /home/100%25%0A%09%0D%7F%01",
		6:  "12.000345 2 open /home/my%20file.txt",
		9:  "13.000000001 7 rename /home/a /home/b%20c",
		11: "15 7 rename /home/d/ /home/e/",
	} {
		if lines[i] != want {
			t.Errorf("line %d = %q, want %q", i+1, lines[i], want)
		}
	}
}

func TestTraceTime(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		text string
	}{
		{0, "0"},
		{time.Nanosecond, "0.000000001"},
		{500 * time.Millisecond, "0.5"},
		{12*time.Second + 345*time.Microsecond, "12.000345"},
		{3 * time.Second, "3"},
		{time.Duration(1<<63 - 1), "9223372036.854775807"},
	} {
		if got := string(appendTime(nil, tc.d)); got != tc.text {
			t.Errorf("appendTime(%v) = %q, want %q", tc.d, got, tc.text)
		}
		if got, err := parseTime([]byte(tc.text)); err != nil || got != tc.d {
			t.Errorf("parseTime(%q) = %v, %v; want %v", tc.text, got, err, tc.d)
		}
	}
	if got, err := parseTime([]byte("1.50")); err != nil || got != 1500*time.Millisecond {
		t.Errorf("parseTime(1.50) = %v, %v", got, err)
	}
	for _, bad := range []string{"", ".5", "5.", "-1", "1e3", "1.0000000001", "9223372037", "99999999999999999999", "1.2.3", "0x10", "+1"} {
		if _, err := parseTime([]byte(bad)); !errors.Is(err, ErrSyntax) {
			t.Errorf("parseTime(%q) = %v, want ErrSyntax", bad, err)
		}
	}
}

func TestTraceReaderErrors(t *testing.T) {
	good := "# header\n0 0 exists /a/\n\n  \n1 2 stat /a\n"
	if recs, err := ReadAll(strings.NewReader(good)); err != nil || len(recs) != 2 {
		t.Fatalf("good input: %v, %d records", err, len(recs))
	}
	if recs, err := ReadAll(strings.NewReader("1 2 stat /a")); err != nil || len(recs) != 1 {
		t.Fatalf("no final newline: %v, %d records", err, len(recs))
	}
	if recs, err := ReadAll(strings.NewReader("1 2 stat /a\r\n1\t2\topen\t/b  \r\n")); err != nil || len(recs) != 2 {
		t.Fatalf("CRLF and tabs: %v, %d records", err, len(recs))
	}
	for _, tc := range []struct {
		name, in string
		line     int
	}{
		{"too few fields", "1 2 stat\n", 1},
		{"too many fields", "1 2 stat /a /b /c\n", 1},
		{"stat with two paths", "1 2 stat /a /b\n", 1},
		{"rename one path", "# c\n1 2 rename /a\n", 2},
		{"bad op", "1 2 chmod /a\n", 1},
		{"bad time", "x 2 stat /a\n", 1},
		{"negative client", "1 -2 stat /a\n", 1},
		{"huge client", "1 2147483648 stat /a\n", 1},
		{"relative path", "1 2 stat a/b\n", 1},
		{"empty component", "0 0 exists /a\n1 2 stat /a//b\n", 2},
		{"dot component", "1 2 stat /a/./b\n", 1},
		{"dotdot component", "1 2 stat /a/../b\n", 1},
		{"bad escape", "1 2 stat /a%zz\n", 1},
		{"truncated escape", "1 2 stat /a%2\n", 1},
		{"escaped slash", "1 2 stat /a%2Fb\n", 1},
		{"escaped NUL", "1 2 stat /a%00b\n", 1},
		{"time backwards", "2 0 stat /a\n1 0 stat /a\n", 2},
		{"exists after timed", "0 0 stat /a\n0 0 exists /b\n", 2},
		{"exists with time", "1 0 exists /a\n", 1},
		{"create dir", "1 0 create /a/\n", 1},
		{"unlink dir", "1 0 unlink /a/\n", 1},
		{"rename dir to file", "1 0 rename /a/ /b\n", 1},
		{"rename root", "1 0 rename / /b\n", 1},
		{"long line", "1 0 stat /" + strings.Repeat("a", MaxLineLength) + "\n", 1},
	} {
		_, err := ReadAll(strings.NewReader(tc.in))
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("%s: err = %v, want ErrSyntax", tc.name, err)
			continue
		}
		if want := fmt.Sprintf("line %d:", tc.line); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %q does not name %s", tc.name, err, want)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTraceWriterRejects(t *testing.T) {
	for _, r := range []Record{
		{Op: 0, Path: "/a"},
		{Op: 99, Path: "/a"},
		{Op: OpStat, Path: "a"},
		{Op: OpStat, Path: ""},
		{Op: OpStat, Path: "/a/"},
		{Op: OpStat, Path: "/a", Path2: "/b"},
		{Op: OpRename, Path: "/a"},
		{Op: OpStat, Path: "/a", Client: -1},
		{Op: OpStat, Path: "/a", Time: -1},
		{Op: OpExists, Path: "/a", Time: 1},
		{Op: OpCreate, Path: "/a", Dir: true},
	} {
		w := NewWriter(io.Discard)
		if err := w.Write(r); !errors.Is(err, ErrSyntax) {
			t.Errorf("Write(%+v) = %v, want ErrSyntax", r, err)
		}
	}
	w := NewWriter(io.Discard)
	if err := w.Write(Record{Time: 2, Op: OpStat, Path: "/a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Record{Time: 1, Op: OpStat, Path: "/a"}); !errors.Is(err, ErrSyntax) {
		t.Errorf("time going backwards: %v", err)
	}
	if err := w.Write(Record{Op: OpExists, Path: "/a"}); !errors.Is(err, ErrSyntax) {
		t.Errorf("exists after timed: %v", err)
	}
	w = NewWriter(failWriter{})
	_ = w.Write(Record{Op: OpStat, Path: "/a"})
	if err := w.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Flush to a failing writer: %v", err)
	}
}

func TestTraceOpNames(t *testing.T) {
	for o := OpExists; int(o) < NumOps; o++ {
		p, err := ParseOp(o.String())
		if err != nil || p != o {
			t.Errorf("ParseOp(%q) = %v, %v", o.String(), p, err)
		}
	}
	if _, err := ParseOp("chmod"); !errors.Is(err, ErrSyntax) {
		t.Errorf("ParseOp(chmod) = %v", err)
	}
	if s := Op(42).String(); s != "op(42)" {
		t.Errorf("Op(42) = %q", s)
	}
	if !(Record{Op: OpReaddir, Path: "/a"}).IsDir() || (Record{Op: OpStat, Path: "/a"}).IsDir() {
		t.Error("IsDir")
	}
}

func TestTraceComment(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.Comment("two\nlines"); err != nil {
		t.Fatal(err)
	}
	_ = w.Write(Record{Op: OpStat, Path: "/a"})
	_ = w.Flush()
	if got := buf.String(); got != "# two\n# lines\n0 0 stat /a\n" {
		t.Errorf("got %q", got)
	}
	if recs, err := ReadAll(&buf); err != nil || len(recs) != 1 {
		t.Errorf("read back: %v %v", recs, err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("# c\n0 0 exists /a/\n0 1 exists /a/b%20c\n1.5 2 stat /a/b%20c\n2 3 rename /a/ /x/\n"))
	f.Add([]byte("1 2 rename /a /b\n"))
	f.Add([]byte("0 0 exists //\n"))
	f.Add([]byte("1.000000001 2147483647 readdir /\r\n"))
	f.Add([]byte("1 2 stat /%41%e9\n3 4 open /\xff\n"))
	f.Add([]byte("9223372036.854775807 0 stat /a\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		recs, err := ReadAll(bytes.NewReader(in))
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Fatalf("error %v does not wrap ErrSyntax", err)
		}
		if err != nil && !strings.Contains(err.Error(), "line ") {
			t.Fatalf("error %v does not name a line", err)
		}
		// What parsed must re-encode and parse back identically.
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatalf("re-encode %+v: %v", r, err)
			}
		}
		_ = w.Flush()
		again, err := ReadAll(&buf)
		if err != nil {
			t.Fatalf("re-read: %v\n%q", err, buf.String())
		}
		for i := range recs {
			if recs[i].Path == "/" {
				recs[i].Dir = false
			}
		}
		if len(recs) == 0 && len(again) == 0 {
			return
		}
		if !reflect.DeepEqual(again, recs) {
			t.Fatalf("round trip differs:\n%+v\n%+v", recs, again)
		}
	})
}

func BenchmarkReader(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops = 2000, 200, 50000
	var recs []Record
	_ = Generate(cfg, func(r Record) error { recs = append(recs, r); return nil })
	text := writeAll(b, recs)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := NewReader(bytes.NewReader(text))
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkWriter(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops = 2000, 200, 50000
	var recs []Record
	_ = Generate(cfg, func(r Record) error { recs = append(recs, r); return nil })
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := NewWriter(io.Discard)
		for _, r := range recs {
			_ = w.Write(r)
		}
		_ = w.Flush()
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
