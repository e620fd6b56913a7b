package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func backupOf(t *testing.T, s *Store) ([]byte, uint64) {
	t.Helper()
	var buf bytes.Buffer
	applied, err := s.Backup(context.Background(), &buf)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	return buf.Bytes(), applied
}

func restoreInto(t *testing.T, s *Store, backup []byte) {
	t.Helper()
	if err := s.Restore(context.Background(), bytes.NewReader(backup)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
}

// TestBackupWhileWriting takes backups while a writer applies log entries
// and readers read: each backup is exactly the state after the entries up
// to the applied index it reports (no more, no less), and a store restored
// from it goes on applying the log to the same end state.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	opts.NoSyncWrites = true
	s := openStore(t, opts)
	all := testEntries(1, 3000, 256)
	var written atomic.Uint64
	var wg sync.WaitGroup
	stop, writerDone := make(chan struct{}), make(chan struct{})
	wg.Add(1)
	// started passes a turn from each backup to the writer: the writer
	// waits at 600, 1200 and 1800 entries until a backup has begun, so
	// that three backups run while it writes however fast it is.
	started := make(chan struct{})
	go func() { // the writer: the shard FSM
		defer close(writerDone)
		next := uint64(600)
		for from := 0; from < len(all); from += 16 {
			if _, err := s.ApplyLog(ctx, all[from:min(from+16, len(all))]); err != nil {
				t.Error(err)
				return
			}
			w := all[min(from+16, len(all))-1].Index
			written.Store(w)
			if w >= next && next <= 1800 {
				<-started
				next += 600
			}
		}
	}()
	go func() { // a reader
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.CountInodes(ctx); err != nil {
				t.Error(err)
				return
			}
			if _, _, err := s.ReadDir(ctx, "/w/d03", "", 50); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	type snap struct {
		data           []byte
		applied, after uint64
	}
	var snaps []snap
	for running := true; running && len(snaps) < 3; {
		select {
		case <-writerDone:
			running = false
		case <-time.After(time.Millisecond):
		}
		if w := written.Load(); w >= uint64(len(snaps)+1)*600 {
			started <- struct{}{}
			data, applied := backupOf(t, s)
			snaps = append(snaps, snap{data, applied, written.Load()})
		}
	}
	<-writerDone
	close(stop)
	wg.Wait()
	if len(snaps) < 3 {
		t.Fatalf("%d backups taken", len(snaps))
	}
	for _, sn := range snaps {
		t.Logf("backup of %d bytes at applied index %d (%d when it ended)", len(sn.data), sn.applied, sn.after)
		if sn.applied < 600 || sn.applied > uint64(len(all)) {
			t.Fatalf("backup applied index %d", sn.applied)
		}
		r := openStore(t, testOptions(t))
		restoreInto(t, r, sn.data)
		mustApplied(t, r, sn.applied)
		diffDumps(t, dump(t, r), modelDump(t, all[:sn.applied]))
		checkCounts(t, r)
		applyAll(t, r, all, 64)
		diffDumps(t, dump(t, r), dump(t, s))
		checkCounts(t, r)
	}
}

// TestRestoreOverNonEmpty restores a backup over a store with other
// contents, a higher applied index and a pending rekey: afterwards, and
// after reopening, it holds exactly the backup.
func TestRestoreOverNonEmpty(t *testing.T) {
	ctx := context.Background()
	src := openStore(t, testOptions(t))
	applyAll(t, src, testEntries(1, 50, 10), 16)
	data, applied := backupOf(t, src)
	if applied != 50 {
		t.Fatalf("backup applied index %d", applied)
	}
	want := dump(t, src)

	opts := rekeyOptions(t)
	dst := openStore(t, opts)
	buildFixture(t, dst)
	applyAll(t, dst, testEntries(100, 200, 10), 16)
	dst.rekeyHook = func(step int) error {
		if step == 2 {
			return errors.New("interrupted")
		}
		return nil
	}
	if _, err := dst.RekeyPrefixAt(ctx, 400, "/src", "/dst/x", nil, nil); err == nil {
		t.Fatal("rekey not interrupted")
	}
	dst.rekeyHook = nil
	restoreInto(t, dst, data)
	mustApplied(t, dst, 50)
	diffDumps(t, dump(t, dst), want)
	checkCounts(t, dst)
	if p, err := dst.PendingRekeys(ctx); err != nil || len(p) != 0 {
		t.Errorf("PendingRekeys = %v, %v", p, err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	dst = openStore(t, opts)
	mustApplied(t, dst, 50)
	diffDumps(t, dump(t, dst), want)
	checkCounts(t, dst)
	// It goes on as a log-applied store.
	res, err := dst.ApplyLog(ctx, testEntries(50, 2, 10))
	if err != nil || !res[0].Skipped || res[1].Err != nil {
		t.Fatalf("ApplyLog after Restore: %+v, %v", res, err)
	}
}

// TestRestoreFailures: a backup with a wrong header is refused without
// touching the store; a damaged one leaves the store broken (every call
// fails, also after reopening) until a Restore succeeds.
func TestRestoreFailures(t *testing.T) {
	ctx := context.Background()
	src := openStore(t, testOptions(t))
	applyAll(t, src, testEntries(1, 40, 10), 16)
	good, _ := backupOf(t, src)
	want := dump(t, src)

	opts := testOptions(t)
	s := openStore(t, opts)
	applyAll(t, s, testEntries(1, 5, 10), 16)
	mine := dump(t, s)
	for name, data := range map[string][]byte{
		"empty":        {},
		"not a backup": []byte("hello, world, this is not a backup"),
		"version 2":    append([]byte(backupMagic), 2),
	} {
		err := s.Restore(ctx, bytes.NewReader(data))
		if err == nil || errors.Is(err, ErrRestoreIncomplete) {
			t.Errorf("%s: %v", name, err)
		}
		if name == "version 2" && !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("%s: %v, want ErrUnknownVersion", name, err)
		}
		diffDumps(t, dump(t, s), mine)
	}

	flipped := bytes.Clone(good)
	flipped[len(backupMagic)+1+4+100] ^= 1
	damaged := map[string][]byte{
		"truncated in a chunk":     good[:len(good)/2],
		"truncated before trailer": good[:len(good)-backupTrailer-4],
		"truncated trailer":        good[:len(good)-3],
		"bit flipped":              flipped,
	}
	for name, data := range damaged {
		err := s.Restore(ctx, bytes.NewReader(data))
		if !errors.Is(err, ErrRestoreIncomplete) {
			t.Fatalf("%s: %v, want ErrRestoreIncomplete", name, err)
		}
		t.Logf("%s: %v", name, err)
		for call, err := range map[string]error{
			"GetInode": func() error { _, err := s.GetInode(ctx, "/w"); return err }(),
			"Applied":  func() error { _, err := s.AppliedIndex(ctx); return err }(),
			"Counts":   func() error { _, err := s.CountInodes(ctx); return err }(),
			"Commit":   s.Commit(ctx, createBatch("/x", TypeFile, "n")),
			"ApplyLog": func() error { _, err := s.ApplyLog(ctx, testEntries(100, 1, 0)); return err }(),
			"Backup":   func() error { _, err := s.Backup(ctx, io.Discard); return err }(),
			"Sync":     s.Sync(),
		} {
			if !errors.Is(err, ErrRestoreIncomplete) {
				t.Errorf("%s after a failed restore: %v", call, err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	if _, err := s.GetInode(ctx, "/w"); !errors.Is(err, ErrRestoreIncomplete) {
		t.Errorf("GetInode after reopening a broken store: %v", err)
	}
	restoreInto(t, s, good)
	diffDumps(t, dump(t, s), want)
	mustApplied(t, s, 40)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	diffDumps(t, dump(t, s), want)
	checkCounts(t, s)
}

// blockingReader hands out r until it reaches at, then waits for release.
type blockingReader struct {
	r       io.Reader
	at      int
	reached chan struct{}
	release chan struct{}
	n       int
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.n >= b.at && b.reached != nil {
		close(b.reached)
		b.reached = nil
		<-b.release
	}
	if b.n < b.at {
		p = p[:min(len(p), b.at-b.n)]
	}
	n, err := b.r.Read(p)
	b.n += n
	return n, err
}

// TestRestoreExcludesOthers: during a Restore every other call is refused
// with ErrRestoring; Restore waits for calls in progress, and Close waits
// for the Restore.
func TestRestoreExcludesOthers(t *testing.T) {
	ctx := context.Background()
	src := openStore(t, testOptions(t))
	applyAll(t, src, testEntries(1, 200, 100), 16)
	data, _ := backupOf(t, src)

	s := openStore(t, testOptions(t))
	// A scan in progress holds the Restore back; a read from inside it
	// during the Restore is refused rather than deadlocked.
	inScan, scanGo := make(chan struct{}), make(chan struct{})
	scanDone := make(chan error, 1)
	applyAll(t, s, testEntries(1, 3, 0), 16)
	go func() {
		first := true
		scanDone <- s.ScanInodes(ctx, func(string, Inode) error {
			if first {
				first = false
				close(inScan)
				<-scanGo
				if _, err := s.CountInodes(ctx); !errors.Is(err, ErrRestoring) {
					t.Errorf("read inside a scan during Restore: %v", err)
				}
			}
			return nil
		})
	}()
	<-inScan
	br := &blockingReader{r: bytes.NewReader(data), at: len(data) / 2, reached: make(chan struct{}), release: make(chan struct{})}
	reached := br.reached
	restored := make(chan error, 1)
	go func() { restored <- s.Restore(ctx, br) }()
	for { // Restore is waiting for the scan
		s.gate.mu.Lock()
		waiting := s.gate.restoring
		s.gate.mu.Unlock()
		if waiting {
			break
		}
	}
	if _, err := s.GetInode(ctx, "/w"); !errors.Is(err, ErrRestoring) {
		t.Errorf("GetInode while Restore waits: %v", err)
	}
	close(scanGo)
	if err := <-scanDone; err != nil {
		t.Fatal(err)
	}
	<-reached // Restore is loading
	for name, err := range map[string]error{
		"Commit":   s.Commit(ctx, createBatch("/x", TypeFile, "n")),
		"ApplyLog": func() error { _, err := s.ApplyLog(ctx, testEntries(4, 1, 0)); return err }(),
		"Restore":  s.Restore(ctx, bytes.NewReader(data)),
		"Sync":     s.Sync(),
	} {
		if !errors.Is(err, ErrRestoring) {
			t.Errorf("%s during Restore: %v", name, err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(br.release)
	if err := <-restored; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

func TestSync(t *testing.T) {
	opts := testOptions(t)
	opts.NoSyncWrites = true
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, s, testEntries(1, 20, 10), 8)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v", err)
	}
}
