// Package strace converts the output of strace(1) into metadata traces in
// the text format of package workload (docs/trace-format.md): every file
// system call of a traced program becomes a stat, open, create, mkdir,
// unlink, rmdir, rename or readdir record, with paths resolved against each
// process's working directory, and the paths the program found in place
// are declared with exists records.
//
// ParseLine parses one line of strace output; Convert reads a whole
// recording and writes the trace. The recommended recording is
//
//	strace -f -tt -y -e trace=%file,%process,getdents64,fchdir -o FILE CMD...
//
// (see Convert for what each option buys). The package works on io.Reader
// and io.Writer only.
package strace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind classifies a line of strace output.
type Kind uint8

// The kinds of lines ParseLine recognizes.
const (
	// Call is a complete system call: name(args) = result.
	Call Kind = iota + 1
	// Unfinished is the first half of a call interrupted by another
	// process's output: name(args <unfinished ...>.
	Unfinished
	// Resumed is the second half: <... name resumed>args) = result. Its
	// Args hold only the text after "resumed>".
	Resumed
	// Signal is a delivered signal: --- SIGCHLD {...} ---.
	Signal
	// Exit is the end of a process: +++ exited with 0 +++ or
	// +++ killed by SIGKILL +++.
	Exit
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Call:
		return "call"
	case Unfinished:
		return "unfinished"
	case Resumed:
		return "resumed"
	case Signal:
		return "signal"
	case Exit:
		return "exit"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Line is one parsed line of strace output.
type Line struct {
	// PID is the process (thread) id printed by strace -f, either as a
	// leading number ("12345 ", with -o) or as "[pid 12345] " (on
	// stderr); 0 when the line has none (no -f, or the initial process on
	// stderr).
	PID int
	// Time is the timestamp: the time of day for -t and -tt, the time
	// since the Unix epoch for -ttt. HasTime reports whether there was
	// one.
	Time    time.Duration
	HasTime bool
	Kind    Kind
	// Name is the system call's name (Call, Unfinished, Resumed).
	Name string
	// Args is the argument text between the parentheses, as strace printed
	// it (for Unfinished: up to the marker; for Resumed: after the
	// marker).
	Args string
	// Ret is the text after "= " (Call, Resumed), for example "3",
	// "3</etc/passwd>" (with -y), "-1 ENOENT (No such file or directory)"
	// or "?"; a trailing -T duration ("<0.000012>") is removed.
	Ret string
}

// ErrSyntax is wrapped by the errors of ParseLine.
var ErrSyntax = errors.New("strace: unrecognized line")

// ErrMessage is wrapped by ParseLine's error for strace's own messages
// ("strace: Process 123 attached", "strace: ... detached").
var ErrMessage = errors.New("strace: strace message")

const unfinishedMarker = "<unfinished ...>"

// ParseLine parses one line of strace output (without its newline; a
// trailing "\r" is ignored). It accepts the shapes strace prints with or
// without -f, -t/-tt/-ttt, -y/-yy and -T. Lines that are not system calls,
// signals or exits return an error wrapping ErrSyntax or ErrMessage.
func ParseLine(s string) (Line, error) {
	var l Line
	s = strings.TrimRight(s, "\r\n")
	rest := strings.TrimLeft(s, " \t")
	if strings.HasPrefix(rest, "strace: ") {
		return l, fmt.Errorf("%q: %w", clip(s), ErrMessage)
	}
	// Process id.
	if strings.HasPrefix(rest, "[pid ") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return l, syntaxError(s, "unterminated [pid")
		}
		pid, err := strconv.Atoi(strings.TrimSpace(rest[len("[pid "):end]))
		if err != nil || pid < 0 {
			return l, syntaxError(s, "bad pid")
		}
		l.PID, rest = pid, strings.TrimLeft(rest[end+1:], " \t")
	} else if n := digits(rest); n > 0 && n < len(rest) && (rest[n] == ' ' || rest[n] == '\t') {
		pid, err := strconv.Atoi(rest[:n])
		if err != nil {
			return l, syntaxError(s, "bad pid")
		}
		l.PID, rest = pid, strings.TrimLeft(rest[n:], " \t")
	}
	// Timestamp.
	if n := digits(rest); n > 0 && n < len(rest) && (rest[n] == ':' || rest[n] == '.') {
		end := strings.IndexAny(rest, " \t")
		if end < 0 {
			return l, syntaxError(s, "nothing after the timestamp")
		}
		t, ok := parseTime(rest[:end])
		if !ok {
			return l, syntaxError(s, "bad timestamp")
		}
		l.Time, l.HasTime, rest = t, true, strings.TrimLeft(rest[end:], " \t")
	}
	switch {
	case strings.HasPrefix(rest, "+++ ") && strings.HasSuffix(rest, " +++"):
		l.Kind = Exit
		l.Args = strings.TrimSpace(rest[3 : len(rest)-3])
		return l, nil
	case strings.HasPrefix(rest, "--- ") && strings.HasSuffix(rest, " ---"):
		l.Kind = Signal
		l.Args = strings.TrimSpace(rest[3 : len(rest)-3])
		return l, nil
	case strings.HasPrefix(rest, "<... "):
		end := strings.Index(rest[len("<... "):], " resumed>")
		if end < 0 {
			return l, syntaxError(s, "no \"resumed>\"")
		}
		end += len("<... ")
		l.Name = rest[len("<... "):end]
		if !isName(l.Name) {
			return l, syntaxError(s, "bad system call name")
		}
		l.Kind = Resumed
		body := rest[end+len(" resumed>"):]
		if strings.HasSuffix(body, unfinishedMarker) {
			// "<... read resumed> <unfinished ...>) = ?" does not occur,
			// but a resumed call may be cut again by the process's death.
			return l, syntaxError(s, "resumed call cut again")
		}
		i := closeParen(body, 1)
		if i < 0 {
			return l, syntaxError(s, "no closing parenthesis")
		}
		return withResult(l, s, body, i)
	}
	open := strings.IndexByte(rest, '(')
	if open <= 0 || !isName(rest[:open]) {
		return l, syntaxError(s, "no system call")
	}
	l.Name = rest[:open]
	body := rest[open+1:]
	i := closeParen(body, 1)
	if i < 0 {
		if !strings.HasSuffix(body, unfinishedMarker) {
			return l, syntaxError(s, "no closing parenthesis")
		}
		l.Kind = Unfinished
		l.Args = strings.TrimSpace(strings.TrimSuffix(body, unfinishedMarker))
		return l, nil
	}
	l.Kind = Call
	return withResult(l, s, body, i)
}

// withResult completes l, parsed from line s, with the arguments of its
// body up to the closing parenthesis at i and the result after it.
func withResult(l Line, s, body string, i int) (Line, error) {
	l.Args = strings.TrimSpace(body[:i])
	ret, ok := parseRet(body[i+1:])
	if !ok {
		return l, syntaxError(s, "no \"= result\"")
	}
	l.Ret = ret
	return l, nil
}

func syntaxError(s, why string) error {
	return fmt.Errorf("%s: %q: %w", why, clip(s), ErrSyntax)
}

// clip shortens s for error messages.
func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

func isName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// parseTime parses HH:MM:SS[.frac] (-t, -tt) or SECONDS.frac (-ttt).
func parseTime(s string) (time.Duration, bool) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	var d time.Duration
	if strings.IndexByte(whole, ':') >= 0 {
		parts := strings.Split(whole, ":")
		if len(parts) != 3 {
			return 0, false
		}
		var hms [3]int
		for i, p := range parts {
			if len(p) == 0 || len(p) > 2 || digits(p) != len(p) {
				return 0, false
			}
			hms[i], _ = strconv.Atoi(p)
		}
		if hms[0] > 23 || hms[1] > 59 || hms[2] > 60 {
			return 0, false
		}
		d = time.Duration(hms[0])*time.Hour + time.Duration(hms[1])*time.Minute + time.Duration(hms[2])*time.Second
	} else {
		if len(whole) == 0 || len(whole) > 12 || digits(whole) != len(whole) {
			return 0, false
		}
		sec, _ := strconv.ParseInt(whole, 10, 64)
		d = time.Duration(sec) * time.Second
	}
	if hasFrac {
		if len(frac) == 0 || len(frac) > 9 || digits(frac) != len(frac) {
			return 0, false
		}
		ns, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		d += time.Duration(ns)
	}
	return d, true
}

// closeParen returns the index in s of the parenthesis that closes depth
// open ones, skipping quoted strings, brackets, braces, comments and -y
// decorations, or -1.
func closeParen(s string, depth int) int {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			end, _, ok := skipString(s, i)
			if !ok {
				return -1
			}
			i = end - 1
		case '<':
			if end := skipDecoration(s, i); end > 0 {
				i = end - 1
			}
		case '/':
			if strings.HasPrefix(s[i:], "/*") {
				end := strings.Index(s[i+2:], "*/")
				if end < 0 {
					return -1
				}
				i += end + 3
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				if c != ')' {
					return -1
				}
				return i
			}
			if depth < 0 {
				return -1
			}
		}
	}
	return -1
}

// skipString returns the index just after the quoted string starting at
// s[i] == '"', including a "..." that marks a truncated string, and whether
// the string was truncated.
func skipString(s string, i int) (end int, truncated, ok bool) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			end = j + 1
			if strings.HasPrefix(s[end:], "...") {
				return end + 3, true, true
			}
			return end, false, true
		}
	}
	return 0, false, false
}

// skipDecoration returns the index just after a -y decoration ("<path>",
// "<pipe:[123]>") starting at s[i] == '<' right after a number or a name
// (3</etc/passwd>, AT_FDCWD</home>), or 0 when s[i] does not start one.
// strace escapes '>' inside decorations, so the first '>' closes it.
func skipDecoration(s string, i int) int {
	if i == 0 {
		return 0
	}
	if p := s[i-1]; !(p >= '0' && p <= '9' || p >= 'A' && p <= 'Z' || p == '_') {
		return 0
	}
	end := strings.IndexByte(s[i:], '>')
	if end < 0 {
		return 0
	}
	return i + end + 1
}

// parseRet extracts the result from the text after the closing
// parenthesis: " = RESULT [<duration>]".
func parseRet(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "=") {
		return "", false
	}
	s = strings.TrimSpace(s[1:])
	// -T appends " <0.000012>".
	if strings.HasSuffix(s, ">") {
		if j := strings.LastIndex(s, " <"); j >= 0 && isDuration(s[j+2:len(s)-1]) {
			s = strings.TrimSpace(s[:j])
		}
	}
	if s == "" {
		return "", false
	}
	return s, true
}

func isDuration(s string) bool {
	n := digits(s)
	return n > 0 && n+1 < len(s) && s[n] == '.' && digits(s[n+1:]) == len(s)-n-1
}

// Result is a decoded return value.
type Result struct {
	// Known is false for "?" (the result was not seen, e.g. the process
	// died or execve replaced it).
	Known bool
	// Value is the returned number; -1 (or another negative number) with
	// Errno set for failures.
	Value int64
	// Errno is the error name ("ENOENT") of a failed call, "" otherwise.
	Errno string
	// Path is the -y decoration of a returned file descriptor
	// ("3</etc/passwd>" gives "/etc/passwd"), "" without one.
	Path string
}

// Failed reports whether the call returned an error.
func (r Result) Failed() bool { return r.Known && r.Errno != "" }

// ParseResult decodes Line.Ret.
func ParseResult(ret string) (Result, error) {
	var r Result
	if ret == "?" || strings.HasPrefix(ret, "? ") {
		return r, nil
	}
	num, rest, _ := strings.Cut(ret, " ")
	deco := ""
	if j := strings.IndexByte(num, '<'); j > 0 && strings.HasSuffix(ret, ">") {
		// "3</path with spaces>": the decoration runs to the end.
		num, deco = ret[:j], ret[j+1:len(ret)-1]
		rest = ""
	}
	v, err := strconv.ParseInt(num, 0, 64)
	if err != nil {
		return r, fmt.Errorf("result %q: %w", clip(ret), ErrSyntax)
	}
	r.Known, r.Value = true, v
	if v < 0 {
		name, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if name == "" || !isName(name) {
			name = "EUNKNOWN"
		}
		r.Errno = name
	}
	if strings.HasPrefix(deco, "/") {
		if p, ok := unescape(deco); ok {
			r.Path = p
		}
	}
	return r, nil
}

// SplitArgs splits an argument list at its top-level commas (outside
// strings, brackets, braces and -y decorations) and trims each argument.
func SplitArgs(args string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case '"':
			end, _, ok := skipString(args, i)
			if !ok {
				i = len(args) - 1
				continue
			}
			i = end - 1
		case '<':
			if end := skipDecoration(args, i); end > 0 {
				i = end - 1
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(args[start:i]))
				start = i + 1
			}
		}
	}
	if last := strings.TrimSpace(args[start:]); last != "" || len(out) > 0 {
		out = append(out, last)
	}
	return out
}

// String decodes a quoted string argument ("/usr/lib/x.so", with C
// escapes such as \n, \t, \", \\, \x41 and \101). ok is false when arg is
// not a complete quoted string; truncated is true when strace cut it short
// (a "..." after the closing quote).
func String(arg string) (s string, truncated, ok bool) {
	if !strings.HasPrefix(arg, `"`) {
		return "", false, false
	}
	end, trunc, ok := skipString(arg, 0)
	if !ok || end != len(arg) {
		return "", false, false
	}
	inner := arg[1 : end-1]
	if trunc {
		inner = arg[1 : end-4]
	}
	s, ok = unescape(inner)
	return s, trunc, ok
}

// cEscapes maps the letter of each one-letter C escape to its byte (0:
// not one).
var cEscapes = [256]byte{'n': '\n', 't': '\t', 'r': '\r', 'v': '\v', 'f': '\f', 'a': '\a', 'b': '\b', 'e': 0x1b,
	'\\': '\\', '"': '"', '\'': '\'', '?': '?'}

// unescape undoes strace's C-style escapes.
func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		i++
		if i == len(s) {
			return "", false
		}
		c = s[i]
		if e := cEscapes[c]; e != 0 {
			b = append(b, e)
			continue
		}
		switch c {
		case 'x':
			if i+3 > len(s) {
				return "", false
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", false
			}
			b = append(b, byte(v))
			i += 2
		default:
			if c < '0' || c > '7' {
				return "", false
			}
			n := 1
			for n < 3 && i+n < len(s) && s[i+n] >= '0' && s[i+n] <= '7' {
				n++
			}
			v, err := strconv.ParseUint(s[i:i+n], 8, 16)
			if err != nil || v > 0xff {
				return "", false
			}
			b = append(b, byte(v))
			i += n - 1
		}
	}
	return string(b), true
}

// FD decodes a file-descriptor argument: "3", "3</etc/passwd>" (-y),
// "AT_FDCWD", "AT_FDCWD</home/user>" or "-100" (AT_FDCWD with -X raw).
// cwd reports AT_FDCWD; path is the decoration when it is a path.
func FD(arg string) (fd int, cwd bool, path string, ok bool) {
	name, deco := arg, ""
	if j := strings.IndexByte(arg, '<'); j > 0 && strings.HasSuffix(arg, ">") {
		name, deco = arg[:j], arg[j+1:len(arg)-1]
	}
	if strings.HasPrefix(deco, "/") {
		if p, ok := unescape(deco); ok {
			path = p
		}
	}
	switch name {
	case "AT_FDCWD", "-100":
		return -100, true, path, true
	}
	v, err := strconv.Atoi(name)
	if err != nil || v < 0 {
		return 0, false, "", false
	}
	return v, false, path, true
}

// HasFlag reports whether the flag word FLAG appears in arg as a whole
// token ("O_RDONLY|O_CREAT" has O_CREAT; "flags=CLONE_VM|CLONE_FS" has
// CLONE_FS but not CLONE_F).
func HasFlag(arg, flag string) bool {
	for i := 0; ; {
		j := strings.Index(arg[i:], flag)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(flag)
		before := j == 0 || !isWordByte(arg[j-1])
		after := end == len(arg) || !isWordByte(arg[end])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
