package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// badgerLogger routes Badger's log lines to a slog.Logger. Badger is chatty
// at INFO (table opening, compactions, memtable flushes), so its INFO lines
// go to slog's Debug level; warnings and errors keep their level.
type badgerLogger struct {
	l *slog.Logger
}

var _ badger.Logger = badgerLogger{}

func (b badgerLogger) log(level slog.Level, format string, args ...any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Errorf implements badger.Logger.
func (b badgerLogger) Errorf(format string, args ...any) { b.log(slog.LevelError, format, args...) }

// Warningf implements badger.Logger.
func (b badgerLogger) Warningf(format string, args ...any) { b.log(slog.LevelWarn, format, args...) }

// Infof implements badger.Logger.
func (b badgerLogger) Infof(format string, args ...any) { b.log(slog.LevelDebug, format, args...) }

// Debugf implements badger.Logger.
func (b badgerLogger) Debugf(format string, args ...any) { b.log(slog.LevelDebug-4, format, args...) }
