package sim

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ghba/ghba/routing/workload"
)

// Source streams a metadata trace: it calls emit for every record in trace
// order and returns the first error emit returns (or its own). A Source may
// be called once per simulation pass; a Source that cannot be replayed (a
// plain io.Reader) supports a single pass only.
type Source func(ctx context.Context, emit func(workload.Record) error) error

// ErrSourceUsed is returned by a single-use Source (ReaderSource) called a
// second time.
var ErrSourceUsed = errors.New("sim: trace source already consumed")

// ReaderSource replays a trace in the text format of routing/workload read
// from r. It can be consumed once; open the trace again for another pass
// (cmd/ghba does that for --trace FILE).
func ReaderSource(r io.Reader) Source {
	used := false
	return func(ctx context.Context, emit func(workload.Record) error) error {
		if used {
			return ErrSourceUsed
		}
		used = true
		return replayReader(ctx, r, emit)
	}
}

// replayReader decodes r and emits every record, checking ctx now and then.
func replayReader(ctx context.Context, r io.Reader, emit func(workload.Record) error) error {
	rd := workload.NewReader(r)
	for n := 0; ; n++ {
		if n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read trace: %w", err)
		}
		if err := emit(rec); err != nil {
			return err
		}
	}
}

// GeneratedSource generates a synthetic trace with workload.Generate, or
// with workload.Intensify when tif > 1 (tif disjoint subtraces replayed
// together, HBA §5). It is deterministic for a given configuration and can
// be replayed any number of times.
func GeneratedSource(cfg workload.Config, tif int) Source {
	return func(ctx context.Context, emit func(workload.Record) error) error {
		n := 0
		wrapped := func(r workload.Record) error {
			n++
			if n&4095 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			return emit(r)
		}
		var err error
		if tif > 1 {
			err = workload.Intensify(tif, cfg, wrapped)
		} else {
			err = workload.Generate(cfg, wrapped)
		}
		if err != nil {
			return fmt.Errorf("generate trace: %w", err)
		}
		return nil
	}
}
