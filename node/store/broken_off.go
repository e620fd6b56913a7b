//go:build !ghba_broken

package store

import "log/slog"

// broken is empty without the ghba_broken build tag: the store is never
// broken on purpose (see broken.go, built only with the tag for the
// container fault suite's check that it catches a wrong server).
type broken struct{}

func newBroken(*slog.Logger) broken { return broken{} }

func (broken) staleReadDir(string, string, int) ([]Entry, bool, bool) { return nil, false, false }

func (broken) keepReadDir(string, string, int, []Entry, bool) {}

func (broken) ackEarly(*Store, *Batch) bool { return false }
