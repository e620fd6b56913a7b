//go:build ghba_broken

package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The broken modes (broken.go) answer wrongly as documented; run with
// go test -tags hashicorpmetrics,ghba_broken ./node/store/ -run Broken.

func TestBrokenStaleReadDir(t *testing.T) {
	t.Setenv("GHBA_STORE_BROKEN", "stale")
	s := openStore(t, testOptions(t))
	ctx := context.Background()
	mustCommit(t, s, createBatch("/d", TypeDir, "n1"))
	if es, _, err := s.ReadDir(ctx, "/d", "", 10); err != nil || len(es) != 0 {
		t.Fatalf("ReadDir = %v, %v; want empty", es, err)
	}
	mustCommit(t, s, createBatch("/d/a", TypeFile, "n1"))
	es, _, err := s.ReadDir(ctx, "/d", "", 10)
	if err != nil || len(es) != 0 {
		t.Fatalf("ReadDir right after a create = %v, %v; the stale mode must miss the file", es, err)
	}
	time.Sleep(brokenStaleFor + 50*time.Millisecond)
	if es, _, err := s.ReadDir(ctx, "/d", "", 10); err != nil || len(es) != 1 {
		t.Fatalf("ReadDir after the cache expired = %v, %v; want the file", es, err)
	}
}

func TestBrokenEarlyAck(t *testing.T) {
	t.Setenv("GHBA_STORE_BROKEN", "early-ack")
	opts := testOptions(t)
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustCommit(t, s, createBatch("/d", TypeDir, "n1")) // a directory: applied as usual
	mustCommit(t, s, createBatch("/d/a", TypeFile, "n1"))
	if _, err := s.GetInode(ctx, "/d/a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetInode right after an acknowledged create: %v; the early-ack mode must not have applied it yet", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.GetInode(ctx, "/d/a"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the early-acknowledged create never applied: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Acknowledged, then the store stops (as in a crash) before applying:
	// lost.
	mustCommit(t, s, createBatch("/d/b", TypeFile, "n1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, opts)
	if _, err := s2.GetInode(ctx, "/d/b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetInode after a restart: %v; the early-acknowledged create must be lost", err)
	}
}
