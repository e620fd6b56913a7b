package rpctest

import (
	"log/slog"
	"testing"
)

func TestEnvLevel(t *testing.T) {
	tests := []struct {
		env   string
		level slog.Level
		now   bool // write to stderr at once
	}{
		{"", 0, false},
		{"0", 0, false},
		{"false", 0, false},
		{"1", slog.LevelDebug, true},
		{"TRUE", slog.LevelDebug, true},
		{"debug", slog.LevelDebug, true},
		{"info", slog.LevelInfo, true},
		{"WARN", slog.LevelWarn, true},
		{"error", slog.LevelError, true},
		{"yes please", slog.LevelDebug, true},
	}
	for _, tc := range tests {
		level, now := envLevel(tc.env)
		if level != tc.level || now != tc.now {
			t.Errorf("envLevel(%q) = %v, %v; want %v, %v", tc.env, level, now, tc.level, tc.now)
		}
	}
}
