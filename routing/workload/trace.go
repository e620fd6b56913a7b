// Package workload reads, writes and generates metadata traces: timed
// file-system metadata operations (stat, open, create, mkdir, unlink, rmdir,
// rename, readdir) issued by numbered clients against a namespace declared
// up front. The simulator and the benchmarks replay such traces; the
// synthetic generator reproduces the properties of the traces used by HBA
// (§5) and G-HBA (§3): a directory tree, skewed popularity (about 7% of the
// metadata takes 78–92% of the accesses), temporal locality, a trickle of
// namespace changes, and the Trace Intensifying Factor (TIF) that replays
// disjoint subtraces together to scale a workload up.
//
// The package is pure: it works on io.Reader and io.Writer and never opens
// files. The text format is documented in docs/trace-format.md.
package workload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Op is the kind of a trace record.
type Op uint8

// The operations of a trace. The zero Op is invalid.
const (
	// OpExists declares a path present before the trace starts. It has time
	// 0 and comes before every timed record; replayers create the path (and
	// any missing ancestors) untimed and do not count it as an operation.
	OpExists Op = iota + 1
	// OpStat looks up a path's attributes.
	OpStat
	// OpOpen opens an existing path.
	OpOpen
	// OpCreate creates a regular file.
	OpCreate
	// OpMkdir creates a directory.
	OpMkdir
	// OpUnlink removes a regular file.
	OpUnlink
	// OpRmdir removes an empty directory.
	OpRmdir
	// OpRename renames Path to Path2 (a file, or a directory with its
	// whole subtree when the record's Dir is set).
	OpRename
	// OpReaddir lists a directory.
	OpReaddir

	// NumOps is one more than the largest Op, for arrays indexed by Op.
	NumOps = int(OpReaddir) + 1
)

var opNames = [NumOps]string{"", "exists", "stat", "open", "create", "mkdir", "unlink", "rmdir", "rename", "readdir"}

// String returns the name used in the text format.
func (o Op) String() string {
	if int(o) < NumOps && o != 0 {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Valid reports whether o is one of the defined operations.
func (o Op) Valid() bool { return o >= OpExists && o <= OpReaddir }

// ParseOp returns the Op named s.
func ParseOp(s string) (Op, error) {
	for i := 1; i < NumOps; i++ {
		if opNames[i] == s {
			return Op(i), nil
		}
	}
	return 0, fmt.Errorf("unknown op %q: %w", s, ErrSyntax)
}

func parseOpBytes(b []byte) (Op, bool) {
	for i := 1; i < NumOps; i++ {
		if string(b) == opNames[i] { // no allocation
			return Op(i), true
		}
	}
	return 0, false
}

// impliesDir reports whether the op only applies to directories.
func (o Op) impliesDir() bool { return o == OpMkdir || o == OpRmdir || o == OpReaddir }

// Record is one line of a trace.
type Record struct {
	Time   time.Duration // since the start of the trace; 0 for OpExists
	Client int           // issuing client, ≥ 0
	Op     Op
	Path   string // absolute, canonical (no trailing slash, no empty, "." or ".." component)
	Path2  string // rename target; empty for every other op
	// Dir marks Path (and Path2) as a directory. It is written as a
	// trailing slash. It is needed for exists and rename records of
	// directories, optional for mkdir, rmdir and readdir (which imply it),
	// and not allowed for create and unlink. It is ignored for the root.
	Dir bool
}

// IsDir reports whether the record's path is a directory: Dir is set, the
// op only applies to directories, or the path is the root.
func (r Record) IsDir() bool { return r.Dir || r.Op.impliesDir() || r.Path == "/" }

// ErrSyntax is wrapped by every error about malformed trace text or an
// invalid record.
var ErrSyntax = errors.New("workload: invalid trace")

// Validate checks a record on its own (see also the ordering rules that
// Reader and Writer enforce: non-decreasing times, exists records first).
func (r Record) Validate() error {
	if !r.Op.Valid() {
		return fmt.Errorf("invalid op %d: %w", r.Op, ErrSyntax)
	}
	if r.Time < 0 {
		return fmt.Errorf("negative time %v: %w", r.Time, ErrSyntax)
	}
	if r.Client < 0 || r.Client > MaxClient {
		return fmt.Errorf("client %d out of range 0..%d: %w", r.Client, MaxClient, ErrSyntax)
	}
	if r.Op == OpExists && r.Time != 0 {
		return fmt.Errorf("exists record at time %v (want 0): %w", r.Time, ErrSyntax)
	}
	if err := checkPath(r.Path); err != nil {
		return err
	}
	if r.Op == OpRename {
		if err := checkPath(r.Path2); err != nil {
			return fmt.Errorf("rename target: %w", err)
		}
		if r.Path == "/" || r.Path2 == "/" {
			return fmt.Errorf("rename of the root: %w", ErrSyntax)
		}
	} else if r.Path2 != "" {
		return fmt.Errorf("%s with a second path: %w", r.Op, ErrSyntax)
	}
	if r.Dir && (r.Op == OpCreate || r.Op == OpUnlink) {
		return fmt.Errorf("%s of a directory: %w", r.Op, ErrSyntax)
	}
	return nil
}

// checkPath reports whether p is absolute and canonical.
func checkPath(p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("path %q is not absolute: %w", p, ErrSyntax)
	}
	if p == "/" {
		return nil
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == 0 {
				return fmt.Errorf("path %q contains NUL: %w", p, ErrSyntax)
			}
			continue
		}
		switch p[start:i] {
		case "":
			return fmt.Errorf("path %q has an empty component: %w", p, ErrSyntax)
		case ".", "..":
			return fmt.Errorf("path %q has a %q component: %w", p, p[start:i], ErrSyntax)
		}
		start = i + 1
	}
	return nil
}

// ---- writing ----

// needsEscape reports whether byte c is percent-encoded in a trace path:
// '%', space and every other ASCII control or whitespace byte, and DEL.
func needsEscape(c byte) bool { return c <= ' ' || c == '%' || c == 0x7f }

const hexDigits = "0123456789ABCDEF"

func appendPath(dst []byte, p string, dir bool) []byte {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if needsEscape(c) {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			dst = append(dst, c)
		}
	}
	if dir && p != "/" {
		dst = append(dst, '/')
	}
	return dst
}

// appendTime writes d as decimal seconds with up to nine fractional digits,
// trailing zeros dropped ("12.000345", "3", "0.5").
func appendTime(dst []byte, d time.Duration) []byte {
	sec, ns := int64(d/time.Second), int64(d%time.Second)
	dst = strconv.AppendInt(dst, sec, 10)
	if ns == 0 {
		return dst
	}
	var frac [9]byte
	for i := 8; i >= 0; i-- {
		frac[i] = byte('0' + ns%10)
		ns /= 10
	}
	n := 9
	for frac[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, frac[:n]...)
}

// order tracks the stream rules shared by Reader and Writer.
type order struct {
	last  time.Duration
	timed bool // a non-exists record was seen
}

func (o *order) check(r Record) error {
	if r.Op == OpExists {
		if o.timed {
			return fmt.Errorf("exists record after timed records: %w", ErrSyntax)
		}
		return nil
	}
	if r.Time < o.last {
		return fmt.Errorf("time %v before previous %v: %w", r.Time, o.last, ErrSyntax)
	}
	o.timed, o.last = true, r.Time
	return nil
}

// Writer writes records in the text format. It buffers; call Flush at the
// end. It refuses invalid records and records that break the ordering rules
// (time going backwards, exists after a timed record).
type Writer struct {
	w     *bufio.Writer
	buf   []byte
	order order
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, 0, 256)}
}

// Write writes one record.
func (w *Writer) Write(r Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	if err := w.order.check(r); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	b := appendTime(w.buf[:0], r.Time)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Client), 10)
	b = append(b, ' ')
	b = append(b, opNames[r.Op]...)
	b = append(b, ' ')
	b = appendPath(b, r.Path, r.Dir)
	if r.Op == OpRename {
		b = append(b, ' ')
		b = appendPath(b, r.Path2, r.Dir)
	}
	b = append(b, '\n')
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// Comment writes text as comment lines ("# " + line).
func (w *Writer) Comment(text string) error {
	for _, line := range bytes.Split([]byte(text), []byte("\n")) {
		if _, err := fmt.Fprintf(w.w, "# %s\n", line); err != nil {
			return fmt.Errorf("write comment: %w", err)
		}
	}
	return nil
}

// Flush writes any buffered data to the underlying writer.
func (w *Writer) Flush() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("flush trace: %w", err)
	}
	return nil
}

// ---- reading ----

// MaxLineLength is the longest line a Reader accepts, newline included.
const MaxLineLength = 64 << 10

// maxSeconds keeps parsed times inside time.Duration.
const maxSeconds = int64(1<<63-1) / int64(time.Second)

// Reader parses the text format. Errors name the line number and wrap
// ErrSyntax (malformed input) or the underlying reader's error.
type Reader struct {
	r     *bufio.Reader
	line  int
	order order
	dec   []byte
}

// NewReader returns a Reader reading from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, MaxLineLength)}
}

// Line returns the number of the last line read (1-based).
func (r *Reader) Line() int { return r.line }

// Next returns the next record, or io.EOF after the last one.
func (r *Reader) Next() (Record, error) {
	for {
		b, err := r.r.ReadSlice('\n')
		if len(b) == 0 && err == io.EOF {
			return Record{}, io.EOF
		}
		r.line++
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return Record{}, fmt.Errorf("line %d: longer than %d bytes: %w", r.line, MaxLineLength, ErrSyntax)
		case err != nil && err != io.EOF:
			return Record{}, fmt.Errorf("line %d: %w", r.line, err)
		}
		b = bytes.TrimSuffix(b, []byte{'\n'})
		b = bytes.TrimSuffix(b, []byte{'\r'})
		b = trimSpace(b)
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		rec, perr := r.parse(b)
		if perr == nil {
			perr = r.order.check(rec)
		}
		if perr != nil {
			return Record{}, fmt.Errorf("line %d: %w", r.line, perr)
		}
		return rec, nil
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// fields splits b on runs of spaces and tabs into at most len(out) fields
// and returns how many there are (len(out)+1 when there are more).
func fields(b []byte, out [][]byte) int {
	n := 0
	for len(b) > 0 {
		for len(b) > 0 && isSpace(b[0]) {
			b = b[1:]
		}
		if len(b) == 0 {
			break
		}
		i := 0
		for i < len(b) && !isSpace(b[i]) {
			i++
		}
		if n == len(out) {
			return n + 1
		}
		out[n] = b[:i]
		n++
		b = b[i:]
	}
	return n
}

func (r *Reader) parse(b []byte) (Record, error) {
	var f [5][]byte
	n := fields(b, f[:])
	if n < 4 || n > 5 {
		return Record{}, fmt.Errorf("%d fields (want: time client op path [path2]): %w", n, ErrSyntax)
	}
	var rec Record
	t, err := parseTime(f[0])
	if err != nil {
		return Record{}, err
	}
	rec.Time = t
	c, ok := parseClient(f[1])
	if !ok {
		return Record{}, fmt.Errorf("client %q (want a non-negative integer): %w", f[1], ErrSyntax)
	}
	rec.Client = c
	op, ok := parseOpBytes(f[2])
	if !ok {
		return Record{}, fmt.Errorf("unknown op %q: %w", f[2], ErrSyntax)
	}
	rec.Op = op
	if (op == OpRename) != (n == 5) {
		if op == OpRename {
			return Record{}, fmt.Errorf("rename without a target path: %w", ErrSyntax)
		}
		return Record{}, fmt.Errorf("%s with a second path: %w", op, ErrSyntax)
	}
	var dir bool
	if rec.Path, dir, err = r.decodePath(f[3]); err != nil {
		return Record{}, err
	}
	rec.Dir = dir
	if n == 5 {
		var dir2 bool
		if rec.Path2, dir2, err = r.decodePath(f[4]); err != nil {
			return Record{}, err
		}
		if dir != dir2 {
			return Record{}, fmt.Errorf("rename of a directory to a non-directory (trailing slashes differ): %w", ErrSyntax)
		}
	}
	if err := rec.Validate(); err != nil {
		return Record{}, err
	}
	return rec, nil
}

// MaxClient is the largest client id the text format accepts.
const MaxClient = 1<<31 - 1

func parseClient(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= MaxClient
}

// parseTime parses decimal seconds with up to nine fractional digits.
func parseTime(b []byte) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, fmt.Errorf("time %q (want seconds like 12.000345): %w", b, ErrSyntax)
	}
	intPart, frac, hasDot := bytes.Cut(b, []byte{'.'})
	if len(intPart) == 0 || len(intPart) > 19 || hasDot && (len(frac) == 0 || len(frac) > 9) {
		return bad()
	}
	var sec int64
	for _, c := range intPart {
		if c < '0' || c > '9' {
			return bad()
		}
		sec = sec*10 + int64(c-'0')
	}
	if sec < 0 || sec > maxSeconds {
		return bad()
	}
	var ns int64
	for i := 0; i < 9; i++ {
		ns *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return bad()
			}
			ns += int64(c - '0')
		}
	}
	d := sec*int64(time.Second) + ns
	if d < 0 {
		return bad()
	}
	return time.Duration(d), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// decodePath undoes the percent-encoding and splits off the trailing slash
// that marks a directory.
func (r *Reader) decodePath(b []byte) (string, bool, error) {
	dir := false
	if len(b) > 1 && b[len(b)-1] == '/' {
		dir = true
		b = b[:len(b)-1]
	}
	if bytes.IndexByte(b, '%') < 0 {
		if string(b) == "/" {
			dir = false // the root is a directory anyway; "//" reads as "/"
		}
		return string(b), dir, nil
	}
	d := r.dec[:0]
	for i := 0; i < len(b); i++ {
		if b[i] != '%' {
			d = append(d, b[i])
			continue
		}
		if i+2 >= len(b) {
			return "", false, fmt.Errorf("truncated escape in path %q: %w", b, ErrSyntax)
		}
		hi, ok1 := unhex(b[i+1])
		lo, ok2 := unhex(b[i+2])
		if !ok1 || !ok2 {
			return "", false, fmt.Errorf("bad escape %q in path %q: %w", b[i:i+3], b, ErrSyntax)
		}
		c := hi<<4 | lo
		if c == '/' {
			return "", false, fmt.Errorf("escaped slash in path %q: %w", b, ErrSyntax)
		}
		d = append(d, c)
		i += 2
	}
	r.dec = d
	if string(d) == "/" {
		dir = false
	}
	return string(d), dir, nil
}

// ReadAll reads every record of r.
func ReadAll(r io.Reader) ([]Record, error) {
	tr := NewReader(r)
	var out []Record
	for {
		rec, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}
