package difftest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxFD is the number of descriptor slots an Op can name: Op.FD is in [0, MaxFD).
const MaxFD = 8

// MaxIO is the largest read length or write payload an Op may carry.
const MaxIO = 1 << 20

// Kind is the system call an Op makes.
type Kind uint8

// The op kinds. Each one is one system call (readdir: open, getdents until
// the end, close; utimens: utimensat followed by a stat of the same path).
// The text form names kinds (Kind.String), never numbers them; new kinds
// still go last, before numKinds.
const (
	OpInvalid     Kind = iota
	OpOpen             // openat(AT_FDCWD, Path, Flags|O_CLOEXEC, Mode) into slot FD (closing what the slot held)
	OpClose            // close(slot FD)
	OpWrite            // write(slot FD, payload) at the descriptor's offset
	OpPwrite           // pwrite(slot FD, payload, Off)
	OpRead             // read(slot FD, Len bytes)
	OpPread            // pread(slot FD, Len bytes, Off)
	OpLseek            // lseek(slot FD, Off, Whence)
	OpFtruncate        // ftruncate(slot FD, Size)
	OpFstat            // fstat(slot FD)
	OpFsync            // fsync(slot FD)
	OpFchmod           // fchmod(slot FD, Mode)
	OpFchown           // fchown(slot FD, UID, GID)
	OpTruncate         // truncate(Path, Size)
	OpMkdir            // mkdir(Path, Mode)
	OpRmdir            // rmdir(Path)
	OpUnlink           // unlink(Path)
	OpRename           // renameat2(Path, To, Flags) (rename when Flags is 0)
	OpSymlink          // symlink(Target, Path)
	OpReadlink         // readlink(Path)
	OpChmod            // chmod(Path, Mode)
	OpChown            // chown(Path, UID, GID), following symlinks
	OpLchown           // lchown(Path, UID, GID)
	OpUtimens          // utimensat(Path, {Atime, Mtime}, NoFollow ? AT_SYMLINK_NOFOLLOW : 0)
	OpStat             // stat(Path)
	OpLstat            // lstat(Path)
	OpReaddir          // the sorted entries of directory Path, "." and ".." included
	OpAccess           // access(Path, Flags) with Flags a combination of R_OK, W_OK, X_OK, or F_OK
	OpMkfifo           // mkfifo(Path, Mode)
	OpSetxattr         // lsetxattr(Path, Name, payload, Flags) with Flags 0, XATTR_CREATE or XATTR_REPLACE
	OpGetxattr         // lgetxattr(Path, Name, a buffer of Len bytes; Len 0 asks the size)
	OpListxattr        // llistxattr(Path, a buffer of Len bytes; Len 0 asks the size); the names sorted
	OpRemovexattr      // lremovexattr(Path, Name)
	OpMknod            // mknod(Path, Type|Mode, Dev): a character or block device, or a socket (a FIFO is OpMkfifo)
	OpLink             // linkat(AT_FDCWD, Path, AT_FDCWD, To, 0): a hard link; a final symbolic link of Path is not followed
	numKinds
)

// Kinds returns every valid Kind, in order.
func Kinds() []Kind {
	ks := make([]Kind, 0, numKinds-1)
	for k := OpInvalid + 1; k < numKinds; k++ {
		ks = append(ks, k)
	}
	return ks
}

// TimeKind says what a Time holds.
type TimeKind uint8

// The time kinds. In an Op, a time is TimeExact, TimeNow (UTIME_NOW) or
// TimeOmit (UTIME_OMIT). In a Stat, TimeUnset means the field is not
// compared, TimeExact carries the value, TimeNow means "within a couple of
// seconds of the call" and TimeOmit means "unchanged by the call".
const (
	TimeUnset TimeKind = iota
	TimeExact
	TimeNow
	TimeOmit
)

// Time is a timestamp argument or result: an exact value or a special kind.
type Time struct {
	Kind TimeKind
	Sec  int64
	Nsec int64
}

// String gives the text form: "NOW", "OMIT", "-" (unset) or seconds.nanoseconds.
func (t Time) String() string {
	switch t.Kind {
	case TimeUnset:
		return "-"
	case TimeNow:
		return "NOW"
	case TimeOmit:
		return "OMIT"
	}
	return fmt.Sprintf("%d.%09d", t.Sec, t.Nsec)
}

func parseTime(s string) (Time, error) {
	switch s {
	case "NOW":
		return Time{Kind: TimeNow}, nil
	case "OMIT":
		return Time{Kind: TimeOmit}, nil
	}
	secS, nsecS, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secS, 10, 64)
	if err != nil {
		return Time{}, fmt.Errorf("time %q: %w", s, err)
	}
	var nsec int64
	if nsecS != "" {
		if len(nsecS) > 9 {
			return Time{}, fmt.Errorf("time %q: more than 9 fractional digits", s)
		}
		nsec, err = strconv.ParseInt(nsecS+strings.Repeat("0", 9-len(nsecS)), 10, 64)
		if err != nil || nsec < 0 {
			return Time{}, fmt.Errorf("time %q: bad fraction", s)
		}
	}
	return Time{Kind: TimeExact, Sec: sec, Nsec: nsec}, nil
}

// Op is one system call of a sequence, with its arguments. Which fields
// matter depends on Kind (see the Op* constants); the others are zero. Paths
// are relative to the root a sequence runs in, never absolute and never with
// a ".." component, so that no op (nor a symbolic link an op creates) reaches
// outside that root. Ops are comparable with ==.
type Op struct {
	Kind   Kind
	FD     int    // descriptor slot, in [0, MaxFD)
	Path   string // the path the op works on; for OpRename and OpLink the source
	To     string // OpRename, OpLink: the destination (the new name)
	Target string // OpSymlink: the link's contents
	// Flags: OpOpen: O_* flags (O_CLOEXEC is always added); OpRename:
	// RENAME_NOREPLACE, RENAME_EXCHANGE; OpAccess: R_OK|W_OK|X_OK or F_OK;
	// OpSetxattr: XATTR_CREATE, XATTR_REPLACE.
	Flags    int
	Mode     uint32 // permission bits, at most 07777: open (with O_CREAT), mkdir, chmod, fchmod
	Off      int64  // pwrite, pread, lseek
	Whence   int    // lseek: SEEK_SET, SEEK_CUR or SEEK_END
	Size     int64  // truncate, ftruncate
	Len      int    // read length, getxattr and listxattr buffer; write (setxattr) length when Data is empty
	Pat      uint64 // seed of the generated write payload when Data is empty
	Data     string // literal write (setxattr) payload
	UID, GID int    // chown, lchown, fchown; -1 leaves the id unchanged
	Atime    Time   // utimens
	Mtime    Time   // utimens
	NoFollow bool   // utimens: AT_SYMLINK_NOFOLLOW
	Name     string // the extended attribute of setxattr, getxattr, removexattr
	Type     uint32 // mknod: S_IFCHR, S_IFBLK or S_IFSOCK
	Dev      uint64 // mknod: the device number (unix.Mkdev), 0 for a socket
}

// Payload returns the bytes a write or pwrite writes: Data if set, otherwise
// Len bytes generated from Pat.
func (op Op) Payload() []byte {
	if op.Data != "" {
		return []byte(op.Data)
	}
	return pattern(op.Pat, op.Len)
}

// pattern returns n pseudo-random bytes derived from seed (splitmix64), so
// that data written at a wrong offset or in a wrong order shows.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n+7)
	x := seed
	for i := 0; i < n; i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(b[i:], z^(z>>31))
	}
	return b[:n:n]
}

// field is one key of the text form.
type field uint8

const (
	fFD field = iota
	fPath
	fFrom
	fTo
	fTarget
	fOpenFlags
	fRenameFlags
	fAccess
	fMode
	fOff
	fWhence
	fSize
	fLen
	fData // data="..." or len=N pat=P
	fUID
	fGID
	fAtime
	fMtime
	fNoFollow
	fName
	fXattrFlags
	fNodeType
	fDev
)

// kindSpec is the text form of one kind: its name and its fields in order.
// Optional fields (rename flags, open mode, nofollow) are printed only when
// not zero.
type kindSpec struct {
	name   string
	fields []field
}

func specOf(k Kind) (kindSpec, bool) {
	switch k {
	case OpOpen:
		return kindSpec{"open", []field{fFD, fPath, fOpenFlags, fMode}}, true
	case OpClose:
		return kindSpec{"close", []field{fFD}}, true
	case OpWrite:
		return kindSpec{"write", []field{fFD, fData}}, true
	case OpPwrite:
		return kindSpec{"pwrite", []field{fFD, fOff, fData}}, true
	case OpRead:
		return kindSpec{"read", []field{fFD, fLen}}, true
	case OpPread:
		return kindSpec{"pread", []field{fFD, fOff, fLen}}, true
	case OpLseek:
		return kindSpec{"lseek", []field{fFD, fOff, fWhence}}, true
	case OpFtruncate:
		return kindSpec{"ftruncate", []field{fFD, fSize}}, true
	case OpFstat:
		return kindSpec{"fstat", []field{fFD}}, true
	case OpFsync:
		return kindSpec{"fsync", []field{fFD}}, true
	case OpFchmod:
		return kindSpec{"fchmod", []field{fFD, fMode}}, true
	case OpFchown:
		return kindSpec{"fchown", []field{fFD, fUID, fGID}}, true
	case OpTruncate:
		return kindSpec{"truncate", []field{fPath, fSize}}, true
	case OpMkdir:
		return kindSpec{"mkdir", []field{fPath, fMode}}, true
	case OpRmdir:
		return kindSpec{"rmdir", []field{fPath}}, true
	case OpUnlink:
		return kindSpec{"unlink", []field{fPath}}, true
	case OpRename:
		return kindSpec{"rename", []field{fFrom, fTo, fRenameFlags}}, true
	case OpSymlink:
		return kindSpec{"symlink", []field{fTarget, fPath}}, true
	case OpReadlink:
		return kindSpec{"readlink", []field{fPath}}, true
	case OpChmod:
		return kindSpec{"chmod", []field{fPath, fMode}}, true
	case OpChown:
		return kindSpec{"chown", []field{fPath, fUID, fGID}}, true
	case OpLchown:
		return kindSpec{"lchown", []field{fPath, fUID, fGID}}, true
	case OpUtimens:
		return kindSpec{"utimens", []field{fPath, fAtime, fMtime, fNoFollow}}, true
	case OpStat:
		return kindSpec{"stat", []field{fPath}}, true
	case OpLstat:
		return kindSpec{"lstat", []field{fPath}}, true
	case OpReaddir:
		return kindSpec{"readdir", []field{fPath}}, true
	case OpAccess:
		return kindSpec{"access", []field{fPath, fAccess}}, true
	case OpMkfifo:
		return kindSpec{"mkfifo", []field{fPath, fMode}}, true
	case OpSetxattr:
		return kindSpec{"setxattr", []field{fPath, fName, fData, fXattrFlags}}, true
	case OpGetxattr:
		return kindSpec{"getxattr", []field{fPath, fName, fLen}}, true
	case OpListxattr:
		return kindSpec{"listxattr", []field{fPath, fLen}}, true
	case OpRemovexattr:
		return kindSpec{"removexattr", []field{fPath, fName}}, true
	case OpMknod:
		return kindSpec{"mknod", []field{fPath, fNodeType, fMode, fDev}}, true
	case OpLink:
		return kindSpec{"link", []field{fFrom, fTo}}, true
	}
	return kindSpec{}, false
}

func optional(f field) bool {
	return f == fRenameFlags || f == fNoFollow || f == fMode || f == fXattrFlags
}

// String returns the name of the kind as used in the text form.
func (k Kind) String() string {
	if s, ok := specOf(k); ok {
		return s.name
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func kindByName(name string) (Kind, bool) {
	for k := OpInvalid + 1; k < numKinds; k++ {
		if s, _ := specOf(k); s.name == name {
			return k, true
		}
	}
	return OpInvalid, false
}

type flagName struct {
	name string
	bit  int
}

// openFlagNames are the open flags an Op may carry (after the access mode).
var openFlagNames = []flagName{
	{"O_CREAT", unix.O_CREAT},
	{"O_EXCL", unix.O_EXCL},
	{"O_TRUNC", unix.O_TRUNC},
	{"O_APPEND", unix.O_APPEND},
	{"O_DIRECTORY", unix.O_DIRECTORY},
	{"O_NOFOLLOW", unix.O_NOFOLLOW},
}

var renameFlagNames = []flagName{
	{"NOREPLACE", unix.RENAME_NOREPLACE},
	{"EXCHANGE", unix.RENAME_EXCHANGE},
}

var xattrFlagNames = []flagName{
	{"CREATE", unix.XATTR_CREATE},
	{"REPLACE", unix.XATTR_REPLACE},
}

var accessNames = []flagName{
	{"R", unix.R_OK},
	{"W", unix.W_OK},
	{"X", unix.X_OK},
}

// nodeTypeNames are the types of OpMknod in the text form.
var nodeTypeNames = []struct {
	name string
	typ  uint32
}{{"chr", unix.S_IFCHR}, {"blk", unix.S_IFBLK}, {"sock", unix.S_IFSOCK}}

func formatNodeType(t uint32) string {
	for _, n := range nodeTypeNames {
		if n.typ == t {
			return n.name
		}
	}
	return fmt.Sprintf("%#o", t)
}

var whenceNames = []string{unix.SEEK_SET: "SET", unix.SEEK_CUR: "CUR", unix.SEEK_END: "END"}

func formatFlags(v int, names []flagName) []string {
	var out []string
	for _, f := range names {
		if v&f.bit != 0 {
			out = append(out, f.name)
		}
	}
	return out
}

func formatOpenFlags(v int) string {
	parts := []string{"O_RDONLY"}
	switch v & unix.O_ACCMODE {
	case unix.O_WRONLY:
		parts[0] = "O_WRONLY"
	case unix.O_RDWR:
		parts[0] = "O_RDWR"
	case 3:
		parts[0] = "O_ACCMODE"
	}
	return strings.Join(append(parts, formatFlags(v, openFlagNames)...), "|")
}

func parseFlags(s string, names []flagName, extra map[string]int) (int, error) {
	v := 0
	for _, part := range strings.Split(s, "|") {
		if bit, ok := extra[part]; ok {
			v |= bit
			continue
		}
		found := false
		for _, f := range names {
			if f.name == part {
				v |= f.bit
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown flag %q", part)
		}
	}
	return v, nil
}

func allBits(names []flagName) int {
	v := 0
	for _, f := range names {
		v |= f.bit
	}
	return v
}

// String returns the op's text form: the kind's name, then key=value pairs.
// Strings are Go-quoted. ParseOp reads it back.
func (op Op) String() string {
	spec, ok := specOf(op.Kind)
	if !ok {
		return op.Kind.String()
	}
	var b strings.Builder
	b.WriteString(spec.name)
	for _, f := range spec.fields {
		switch f {
		case fFD:
			fmt.Fprintf(&b, " fd=%d", op.FD)
		case fPath:
			fmt.Fprintf(&b, " path=%s", strconv.Quote(op.Path))
		case fFrom:
			fmt.Fprintf(&b, " from=%s", strconv.Quote(op.Path))
		case fTo:
			fmt.Fprintf(&b, " to=%s", strconv.Quote(op.To))
		case fTarget:
			fmt.Fprintf(&b, " target=%s", strconv.Quote(op.Target))
		case fOpenFlags:
			fmt.Fprintf(&b, " flags=%s", formatOpenFlags(op.Flags))
		case fRenameFlags:
			if op.Flags != 0 {
				fmt.Fprintf(&b, " flags=%s", strings.Join(formatFlags(op.Flags, renameFlagNames), "|"))
			}
		case fAccess:
			if op.Flags == unix.F_OK {
				b.WriteString(" mode=F")
			} else {
				fmt.Fprintf(&b, " mode=%s", strings.Join(formatFlags(op.Flags, accessNames), "|"))
			}
		case fMode:
			if op.Mode != 0 || op.Kind != OpOpen {
				fmt.Fprintf(&b, " mode=%04o", op.Mode)
			}
		case fOff:
			fmt.Fprintf(&b, " off=%d", op.Off)
		case fWhence:
			w := strconv.Itoa(op.Whence)
			if op.Whence >= 0 && op.Whence < len(whenceNames) {
				w = whenceNames[op.Whence]
			}
			fmt.Fprintf(&b, " whence=%s", w)
		case fSize:
			fmt.Fprintf(&b, " size=%d", op.Size)
		case fLen:
			fmt.Fprintf(&b, " len=%d", op.Len)
		case fData:
			if op.Data != "" {
				fmt.Fprintf(&b, " data=%s", strconv.Quote(op.Data))
			} else {
				fmt.Fprintf(&b, " len=%d pat=%d", op.Len, op.Pat)
			}
		case fUID:
			fmt.Fprintf(&b, " uid=%d", op.UID)
		case fGID:
			fmt.Fprintf(&b, " gid=%d", op.GID)
		case fAtime:
			fmt.Fprintf(&b, " atime=%s", op.Atime)
		case fMtime:
			fmt.Fprintf(&b, " mtime=%s", op.Mtime)
		case fNoFollow:
			if op.NoFollow {
				b.WriteString(" nofollow")
			}
		case fName:
			fmt.Fprintf(&b, " name=%s", strconv.Quote(op.Name))
		case fXattrFlags:
			if op.Flags != 0 {
				fmt.Fprintf(&b, " flags=%s", strings.Join(formatFlags(op.Flags, xattrFlagNames), "|"))
			}
		case fNodeType:
			fmt.Fprintf(&b, " type=%s", formatNodeType(op.Type))
		case fDev:
			fmt.Fprintf(&b, " dev=%d:%d", unix.Major(op.Dev), unix.Minor(op.Dev))
		}
	}
	return b.String()
}

// token is one key=value (or bare key) of a line.
type token struct {
	key, val string
	quoted   bool
	bare     bool
}

// tokenize splits a line into the op's name, its key=value tokens and a
// trailing comment (from a '#' outside quotes, without it).
func tokenize(line string) (name string, toks []token, comment string, err error) {
	line = strings.TrimSpace(line)
	name, rest, _ := strings.Cut(line, " ")
	for {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return name, toks, "", nil
		}
		if rest[0] == '#' {
			return name, toks, strings.TrimSpace(rest[1:]), nil
		}
		end := strings.IndexAny(rest, "= \t")
		if end < 0 || rest[end] != '=' {
			if end < 0 {
				end = len(rest)
			}
			toks = append(toks, token{key: rest[:end], bare: true})
			rest = rest[end:]
			continue
		}
		key := rest[:end]
		rest = rest[end+1:]
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return "", nil, "", fmt.Errorf("value of %s: %w", key, err)
			}
			v, err := strconv.Unquote(q)
			if err != nil {
				return "", nil, "", fmt.Errorf("value of %s: %w", key, err)
			}
			toks = append(toks, token{key: key, val: v, quoted: true})
			rest = rest[len(q):]
			if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
				return "", nil, "", fmt.Errorf("value of %s: garbage after the closing quote", key)
			}
			continue
		}
		vend := strings.IndexAny(rest, " \t")
		if vend < 0 {
			vend = len(rest)
		}
		toks = append(toks, token{key: key, val: rest[:vend]})
		rest = rest[vend:]
	}
}

// keysOf gives the keys a field accepts in the text form.
func keysOf(f field) []string {
	switch f {
	case fFD:
		return []string{"fd"}
	case fPath:
		return []string{"path"}
	case fFrom:
		return []string{"from"}
	case fTo:
		return []string{"to"}
	case fTarget:
		return []string{"target"}
	case fOpenFlags, fRenameFlags, fXattrFlags:
		return []string{"flags"}
	case fAccess, fMode:
		return []string{"mode"}
	case fOff:
		return []string{"off"}
	case fWhence:
		return []string{"whence"}
	case fSize:
		return []string{"size"}
	case fLen:
		return []string{"len"}
	case fData:
		return []string{"data", "len", "pat"}
	case fUID:
		return []string{"uid"}
	case fGID:
		return []string{"gid"}
	case fAtime:
		return []string{"atime"}
	case fMtime:
		return []string{"mtime"}
	case fNoFollow:
		return []string{"nofollow"}
	case fName:
		return []string{"name"}
	case fNodeType:
		return []string{"type"}
	case fDev:
		return []string{"dev"}
	}
	return nil
}

// ParseOp parses the text form of one op (as Op.String writes it). Keys may
// come in any order; optional keys (rename flags, the mode of an open,
// nofollow) may be left out; a '#' outside quotes starts a comment (corpus
// files note there the errno the op should return, such as "# EISDIR").
// The op is validated (see Op.Validate).
func ParseOp(line string) (Op, error) {
	op, _, err := parseOpComment(line)
	return op, err
}

// parseOpComment is ParseOp that also returns the line's trailing comment.
func parseOpComment(line string) (Op, string, error) {
	name, toks, comment, err := tokenize(line)
	if err != nil {
		return Op{}, "", fmt.Errorf("parse %q: %w", line, err)
	}
	op, err := parseOpTokens(line, name, toks)
	return op, comment, err
}

func parseOpTokens(line, name string, toks []token) (Op, error) {
	kind, ok := kindByName(name)
	if !ok {
		return Op{}, fmt.Errorf("parse %q: unknown op %q", line, name)
	}
	op, err := parseFields(kind, toks)
	if err != nil {
		return Op{}, fmt.Errorf("parse %q: %w", line, err)
	}
	if err := op.Validate(); err != nil {
		return Op{}, fmt.Errorf("parse %q: %w", line, err)
	}
	return op, nil
}

func parseFields(kind Kind, toks []token) (Op, error) {
	spec, _ := specOf(kind)
	op := Op{Kind: kind}
	allowed := map[string]field{}
	for _, f := range spec.fields {
		for _, k := range keysOf(f) {
			allowed[k] = f
		}
	}
	seen := map[string]bool{}
	for _, t := range toks {
		f, ok := allowed[t.key]
		if !ok {
			return op, fmt.Errorf("%s takes no %q", spec.name, t.key)
		}
		if seen[t.key] {
			return op, fmt.Errorf("%q given twice", t.key)
		}
		seen[t.key] = true
		if t.bare != (f == fNoFollow) {
			if t.bare {
				return op, fmt.Errorf("%q needs a value", t.key)
			}
			return op, fmt.Errorf("%q takes no value", t.key)
		}
		isString := t.key == "path" || t.key == "from" || t.key == "to" || t.key == "target" || t.key == "data" || t.key == "name"
		if isString != t.quoted {
			if isString {
				return op, fmt.Errorf("%s: want a quoted string", t.key)
			}
			return op, fmt.Errorf("%s: want an unquoted value", t.key)
		}
		if err := setField(&op, f, t); err != nil {
			return op, fmt.Errorf("%s=%s: %w", t.key, t.val, err)
		}
	}
	for _, f := range spec.fields {
		if optional(f) {
			continue
		}
		switch f {
		case fData:
			if seen["data"] && (seen["len"] || seen["pat"]) {
				return op, errors.New("give either data or len and pat")
			}
			if !seen["data"] && !(seen["len"] && seen["pat"]) {
				return op, errors.New("missing data (or len and pat)")
			}
		default:
			if !seen[keysOf(f)[0]] {
				return op, fmt.Errorf("missing %q", keysOf(f)[0])
			}
		}
	}
	return op, nil
}

func setField(op *Op, f field, t token) error {
	var err error
	switch f {
	case fFD:
		op.FD, err = strconv.Atoi(t.val)
	case fPath, fFrom:
		op.Path = t.val
	case fTo:
		op.To = t.val
	case fTarget:
		op.Target = t.val
	case fOpenFlags:
		op.Flags, err = parseFlags(t.val, openFlagNames, map[string]int{
			"O_RDONLY": unix.O_RDONLY, "O_WRONLY": unix.O_WRONLY, "O_RDWR": unix.O_RDWR, "O_ACCMODE": unix.O_ACCMODE,
		})
	case fRenameFlags:
		op.Flags, err = parseFlags(t.val, renameFlagNames, nil)
	case fAccess:
		op.Flags, err = parseFlags(t.val, accessNames, map[string]int{"F": unix.F_OK})
	case fMode:
		var m uint64
		m, err = strconv.ParseUint(t.val, 8, 32)
		op.Mode = uint32(m)
	case fOff:
		op.Off, err = strconv.ParseInt(t.val, 10, 64)
	case fWhence:
		switch t.val {
		case "SET":
			op.Whence = unix.SEEK_SET
		case "CUR":
			op.Whence = unix.SEEK_CUR
		case "END":
			op.Whence = unix.SEEK_END
		default:
			err = errors.New("want SET, CUR or END")
		}
	case fSize:
		op.Size, err = strconv.ParseInt(t.val, 10, 64)
	case fLen:
		op.Len, err = strconv.Atoi(t.val)
	case fData:
		switch t.key {
		case "data":
			op.Data = t.val
		case "len":
			op.Len, err = strconv.Atoi(t.val)
		case "pat":
			op.Pat, err = strconv.ParseUint(t.val, 10, 64)
		}
	case fUID:
		op.UID, err = strconv.Atoi(t.val)
	case fGID:
		op.GID, err = strconv.Atoi(t.val)
	case fAtime:
		op.Atime, err = parseTime(t.val)
	case fMtime:
		op.Mtime, err = parseTime(t.val)
	case fNoFollow:
		op.NoFollow = true
	case fName:
		op.Name = t.val
	case fXattrFlags:
		op.Flags, err = parseFlags(t.val, xattrFlagNames, nil)
	case fNodeType:
		err = fmt.Errorf("want one of chr, blk, sock")
		for _, n := range nodeTypeNames {
			if n.name == t.val {
				op.Type, err = n.typ, nil
			}
		}
	case fDev:
		majS, minS, ok := strings.Cut(t.val, ":")
		if !ok {
			return errors.New("want MAJOR:MINOR")
		}
		var maj, mnr uint64
		if maj, err = strconv.ParseUint(majS, 10, 32); err == nil {
			mnr, err = strconv.ParseUint(minS, 10, 32)
		}
		op.Dev = unix.Mkdev(uint32(maj), uint32(mnr))
	}
	return err
}

// ParseSequence reads a sequence in text form: one op per line; blank lines
// and lines starting with '#' are skipped.
func ParseSequence(r io.Reader) ([]Op, error) {
	var ops []Op
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*MaxIO+64*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		op, err := ParseOp(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read sequence: %w", err)
	}
	return ops, nil
}

// FormatSequence returns the text form of ops, one per line, each line
// ending in a newline; ParseSequence reads it back.
func FormatSequence(ops []Op) string {
	var b strings.Builder
	for _, op := range ops {
		b.WriteString(op.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// checkPath refuses what could lead outside the root: absolute paths, ".."
// components, and NUL bytes (which the system call interface cannot carry).
func checkPath(what, p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%s %q: contains a NUL byte", what, p)
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("%s %q: absolute", what, p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return fmt.Errorf("%s %q: has a \"..\" component", what, p)
		}
	}
	return nil
}

// usesFD reports whether the kind works on a descriptor slot.
func (k Kind) usesFD() bool {
	switch k {
	case OpOpen, OpClose, OpWrite, OpPwrite, OpRead, OpPread, OpLseek, OpFtruncate, OpFstat, OpFsync, OpFchmod, OpFchown:
		return true
	}
	return false
}

// Validate reports why op cannot be run: an unknown kind, a slot out of
// range, a path or target that is absolute or has a ".." component, unknown
// flags, a mode beyond 07777, a length beyond MaxIO, both Data and Len/Pat.
// Argument values the kernel itself refuses (negative offsets, names too
// long) are valid: they are error cases to compare.
func (op Op) Validate() error {
	spec, ok := specOf(op.Kind)
	if !ok {
		return fmt.Errorf("invalid op kind %d", op.Kind)
	}
	if op.Kind.usesFD() && (op.FD < 0 || op.FD >= MaxFD) {
		return fmt.Errorf("%s: fd slot %d out of [0,%d)", spec.name, op.FD, MaxFD)
	}
	if err := checkPath("path", op.Path); err != nil {
		return err
	}
	if err := checkPath("to", op.To); err != nil {
		return err
	}
	if err := checkPath("target", op.Target); err != nil {
		return err
	}
	if op.Mode > 07777 {
		return fmt.Errorf("mode %o beyond 07777", op.Mode)
	}
	if strings.IndexByte(op.Name, 0) >= 0 {
		return fmt.Errorf("attribute name %q: contains a NUL byte", op.Name)
	}
	switch op.Kind {
	case OpOpen:
		if op.Flags&^(unix.O_ACCMODE|allBits(openFlagNames)) != 0 {
			return fmt.Errorf("open flags %#x: unsupported bits", op.Flags)
		}
	case OpRename:
		if op.Flags&^allBits(renameFlagNames) != 0 {
			return fmt.Errorf("rename flags %#x: unsupported bits", op.Flags)
		}
	case OpAccess:
		if op.Flags&^allBits(accessNames) != 0 {
			return fmt.Errorf("access mode %#x: unsupported bits", op.Flags)
		}
	case OpSetxattr:
		if op.Flags&^allBits(xattrFlagNames) != 0 {
			return fmt.Errorf("setxattr flags %#x: unsupported bits", op.Flags)
		}
	case OpLink:
		if op.Flags != 0 {
			return fmt.Errorf("link flags %#x: linkat is always called with 0", op.Flags)
		}
	case OpMknod:
		if op.Type != unix.S_IFCHR && op.Type != unix.S_IFBLK && op.Type != unix.S_IFSOCK {
			return fmt.Errorf("mknod type %#o: want S_IFCHR, S_IFBLK or S_IFSOCK", op.Type)
		}
	case OpLseek:
		if op.Whence < unix.SEEK_SET || op.Whence > unix.SEEK_END {
			return fmt.Errorf("lseek whence %d: want SEEK_SET, SEEK_CUR or SEEK_END", op.Whence)
		}
	case OpUtimens:
		for _, t := range []Time{op.Atime, op.Mtime} {
			if t.Kind == TimeUnset || t.Kind > TimeOmit {
				return errors.New("utimens: a time must be exact, NOW or OMIT")
			}
			if t.Kind == TimeExact && (t.Nsec < 0 || t.Nsec >= 1e9) {
				return fmt.Errorf("utimens: nanoseconds %d out of range", t.Nsec)
			}
		}
	}
	if op.Len < 0 || op.Len > MaxIO || len(op.Data) > MaxIO {
		return fmt.Errorf("length %d/%d beyond [0,%d]", op.Len, len(op.Data), MaxIO)
	}
	if op.Data != "" && (op.Len != 0 || op.Pat != 0) {
		return errors.New("both data and len/pat")
	}
	if op.UID < -1 || op.GID < -1 || int64(op.UID) > 1<<32-2 || int64(op.GID) > 1<<32-2 {
		return fmt.Errorf("uid %d or gid %d out of range", op.UID, op.GID)
	}
	return nil
}
