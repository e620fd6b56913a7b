package node

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// levelTrace is the slog level of hclog's Trace records (below Debug).
const levelTrace = slog.LevelDebug - 4

// hclogAdapter is an hclog.Logger (what hashicorp/raft logs to) that writes
// into a *slog.Logger: hclog levels map to slog levels, hclog's key/value
// arguments become slog attributes and hclog names become a "component"
// attribute.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
	level   *hclog.Level // shared by every derived logger; guarded by mu
	mu      *sync.Mutex
}

var _ hclog.Logger = (*hclogAdapter)(nil)

// newHCLogAdapter returns an hclog.Logger named name writing into l.
func newHCLogAdapter(l *slog.Logger, name string) hclog.Logger {
	lvl := hclog.Trace // let slog's handler decide what is shown
	return &hclogAdapter{l: l, name: name, level: &lvl, mu: new(sync.Mutex)}
}

func toSlogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	if level < a.GetLevel() {
		return
	}
	sl := toSlogLevel(level)
	ctx := context.Background()
	if !a.l.Enabled(ctx, sl) {
		return
	}
	all := make([]any, 0, 2+len(a.implied)+len(args))
	if a.name != "" {
		all = append(all, "component", a.name)
	}
	all = append(all, a.implied...)
	all = append(all, args...)
	a.l.Log(ctx, sl, msg, all...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return level >= a.GetLevel() && a.l.Enabled(context.Background(), toSlogLevel(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	b := *a
	b.implied = append(append([]any(nil), a.implied...), args...)
	return &b
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	b := *a
	if a.name != "" {
		b.name = a.name + "." + name
	} else {
		b.name = name
	}
	return &b
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	b := *a
	b.name = name
	return &b
}

func (a *hclogAdapter) SetLevel(level hclog.Level) {
	a.mu.Lock()
	*a.level = level
	a.mu.Unlock()
}

func (a *hclogAdapter) GetLevel() hclog.Level {
	a.mu.Lock()
	defer a.mu.Unlock()
	return *a.level
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return &stdLogWriter{l: a.l, component: a.name}
}

// stdLogWriter is the io.Writer behind the *log.Logger given to Serf and
// memberlist. Each Write is one log line such as
// "[WARN] memberlist: Refuting a suspect message": the bracketed level
// becomes the slog level and the "serf:"/"memberlist:" prefix the
// "component" attribute. Lines without a level are logged at Info.
type stdLogWriter struct {
	l         *slog.Logger
	component string // for lines without a known prefix
}

// newStdLogger returns a *log.Logger (no timestamp or prefix of its own)
// writing into l; component names lines that carry no component prefix.
func newStdLogger(l *slog.Logger, component string) *log.Logger {
	return log.New(&stdLogWriter{l: l, component: component}, "", 0)
}

var stdLevels = []struct {
	tag   string
	level slog.Level
}{
	{"[TRACE]", levelTrace},
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[WARNING]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

func (w *stdLogWriter) Write(p []byte) (int, error) {
	n := len(p)
	for _, line := range bytes.Split(bytes.TrimRight(p, "\r\n"), []byte{'\n'}) {
		w.logLine(string(line))
	}
	return n, nil
}

func (w *stdLogWriter) logLine(s string) {
	level := slog.LevelInfo
	// Skip a timestamp written by a logger with flags ("2006/01/02 15:04:05 ").
	if i := strings.IndexByte(s, '['); i > 0 && i <= 30 {
		s = s[i:]
	}
	for _, t := range stdLevels {
		if strings.HasPrefix(s, t.tag) {
			level = t.level
			s = strings.TrimSpace(s[len(t.tag):])
			break
		}
	}
	ctx := context.Background()
	if !w.l.Enabled(ctx, level) {
		return
	}
	component := w.component
	for _, c := range []string{"serf", "memberlist", "raft", "snapshot"} {
		if strings.HasPrefix(s, c+": ") {
			component = c
			s = s[len(c)+2:]
			break
		}
	}
	if component != "" {
		w.l.Log(ctx, level, s, "component", component)
		return
	}
	w.l.Log(ctx, level, s)
}
