package contents

import (
	"context"
	"testing"
	"time"

	"github.com/ghba/ghba/node/contents/s3test"
)

// TestS3 runs the store and file tests against a real S3-compatible server.
func TestS3(t *testing.T) {
	url := s3test.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Run("store", func(t *testing.T) { storeBasics(t, ctx, s) })
	t.Run("random", func(t *testing.T) { randomOps(t, s, 21, 200) })
	t.Run("sequential", func(t *testing.T) {
		const bs = 256 << 10
		f := s.OpenFile(23, 0, Layout{BlockSize: bs}, FileOptions{MaxDirty: 4 * bs})
		defer f.Close()
		m := &model{t: t, f: f}
		m.appendRandom(ctx, newTestRand(23), 100000, 12*bs+5)
		sv := &server{t: t, s: s, ino: 23, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
		sv.commit(ctx, f)
		sv.check(ctx)
		l, size := sv.get()
		f2 := s.OpenFile(23, size, l, FileOptions{Cache: NewBlockCache(6 * bs)})
		defer f2.Close()
		(&model{t: t, f: f2, want: m.want}).readAll(ctx)
	})
}
