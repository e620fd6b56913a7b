package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"sync"
	"testing"
	"time"
)

// blockCommitter makes the committer busy with a request whose write waits
// for release, so that the requests submitted meanwhile queue up and form
// the next group. It returns once the committer is inside that request.
func blockCommitter(t *testing.T, s *Store) (release func(), result <-chan error) {
	t.Helper()
	entered, rel := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := &request{write: func(*wtxn) error {
		once.Do(func() { close(entered) })
		<-rel
		return nil
	}}
	res := make(chan error, 1)
	go func() { res <- s.submit(context.Background(), r) }()
	<-entered
	var relOnce sync.Once
	return func() { relOnce.Do(func() { close(rel) }) }, res
}

// waitQueued waits until n requests are queued for the committer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := 0; len(s.reqs) != n; i++ {
		if i > 10000 {
			t.Fatalf("%d requests queued, want %d", len(s.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// enqueue submits batches one by one (each queued before the next is
// submitted, so the queue order is the slice order) and returns their
// results in that order once all have completed.
func enqueue(t *testing.T, s *Store, ctx context.Context, batches []*Batch) func() []error {
	t.Helper()
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	base := len(s.reqs)
	for i, b := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Commit(ctx, b)
		}()
		waitQueued(t, s, base+i+1)
	}
	return func() []error { wg.Wait(); return errs }
}

func TestGroupFailingRequestFailsAlone(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	mustCommit(t, s, createBatch("/taken", TypeFile, "n1"))

	release, blocked := blockCommitter(t, s)
	before := s.Stats()
	emptyG := &Batch{}
	emptyG.RequireDirEmpty("/g")
	batches := []*Batch{
		createBatch("/g/a", TypeFile, "n1"),   // ok
		createBatch("/taken", TypeFile, "n1"), // exists before the group
		createBatch("/g/a", TypeFile, "n2"),   // created earlier in this group
		createBatch("/g/b", TypeDir, "n1"),    // ok
		emptyG,                                // /g has entries from this group
		createBatch("/g/c", TypeFile, "n1"),   // ok
	}
	results := enqueue(t, s, ctx, batches)
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	errs := results()
	want := []error{nil, ErrExists, ErrExists, nil, ErrNotEmpty, nil}
	for i := range want {
		if (want[i] == nil) != (errs[i] == nil) || (want[i] != nil && !errors.Is(errs[i], want[i])) {
			t.Errorf("request %d: %v, want %v", i, errs[i], want[i])
		}
	}
	after := s.Stats()
	if g, tx := after.Groups-before.Groups, after.Txns-before.Txns; g != 1 || tx != 2 {
		t.Errorf("groups +%d, txns +%d; want one group of six in one transaction (+ the blocker's)", g, tx)
	}
	if e, err := s.GetEntry(ctx, "/g", "a"); err != nil || e.Home != "n1" {
		t.Errorf("entry a = %+v, %v (the failing duplicate must not overwrite it)", e, err)
	}
	entries, _, err := s.ReadDir(ctx, "/g", "", 0)
	if err != nil || len(entries) != 3 {
		t.Errorf("ReadDir /g = %+v, %v", entries, err)
	}
	checkCounts(t, s)
}

// TestGroupCommitConcurrent runs 64 writers; every acknowledged write must
// be present after Close and reopen, and racing creates of one path must
// have exactly one winner.
func TestGroupCommitConcurrent(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter, racePaths = 64, 40, 10
	var (
		mu    sync.Mutex
		acked []string
		wins  = map[string][]int{}
		wg    sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				p := fmt.Sprintf("/w%02d/f%03d", w, i)
				if err := s.Commit(ctx, createBatch(p, TypeFile, "n1")); err != nil {
					t.Errorf("create %s: %v", p, err)
					return
				}
				mu.Lock()
				acked = append(acked, p)
				mu.Unlock()
				if i < racePaths {
					rp := fmt.Sprintf("/race/r%d", i)
					err := s.Commit(ctx, createBatch(rp, TypeFile, fmt.Sprintf("w%d", w)))
					switch {
					case err == nil:
						mu.Lock()
						wins[rp] = append(wins[rp], w)
						mu.Unlock()
					case !errors.Is(err, fs.ErrExist):
						t.Errorf("racing create %s: %v", rp, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("stats: %+v (mean %.1f requests per transaction)", st, float64(st.Requests)/float64(st.Txns))
	if st.Txns >= st.Requests {
		t.Errorf("no grouping: %d transactions for %d requests", st.Txns, st.Requests)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, opts)
	for _, p := range acked {
		if _, err := s.GetInode(ctx, p); err != nil {
			t.Fatalf("acknowledged %s lost: %v", p, err)
		}
	}
	if len(acked) != writers*perWriter {
		t.Errorf("%d acked", len(acked))
	}
	for i := range racePaths {
		rp := fmt.Sprintf("/race/r%d", i)
		if len(wins[rp]) != 1 {
			t.Errorf("%s: winners %v", rp, wins[rp])
			continue
		}
		e, err := s.GetEntry(ctx, "/race", fmt.Sprintf("r%d", i))
		if err != nil || e.Home != fmt.Sprintf("w%d", wins[rp][0]) {
			t.Errorf("%s: entry %+v, %v; winner w%d", rp, e, err, wins[rp][0])
		}
	}
	if c := checkCounts(t, s); c.Files != writers*perWriter+racePaths {
		t.Errorf("counts %+v", c)
	}
}

// TestGroupSplitsTooBig queues a group larger than one Badger transaction:
// it is split, everything fits somewhere, and a single batch too large for
// any transaction fails alone with ErrTooLarge.
func TestGroupSplitsTooBig(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	layout := make([]byte, 100<<10)
	var batches []*Batch
	for i := range 40 {
		var b Batch
		b.PutInode(fmt.Sprintf("/big/f%02d", i), Inode{Type: TypeFile, Layout: layout})
		batches = append(batches, &b)
		if i == 20 {
			var huge Batch
			for j := range 16 {
				huge.PutInode(fmt.Sprintf("/huge/f%02d", j), Inode{Type: TypeFile, Layout: layout})
			}
			batches = append(batches, &huge)
		}
	}
	release, blocked := blockCommitter(t, s)
	before := s.Stats()
	results := enqueue(t, s, ctx, batches)
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for i, err := range results() {
		if i == 21 {
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("huge batch: %v, want ErrTooLarge", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("batch %d: %v", i, err)
		}
	}
	after := s.Stats()
	t.Logf("txn limit %d bytes; %d transactions for the group", s.db.MaxBatchSize(), after.Txns-before.Txns-1)
	if after.Txns-before.Txns < 4 {
		t.Errorf("group not split: %d transactions", after.Txns-before.Txns)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	if c := checkCounts(t, s); c.Files != 40 {
		t.Errorf("counts %+v, want 40 files", c)
	}
	if _, err := s.GetInode(ctx, "/huge/f00"); !errors.Is(err, ErrNotFound) {
		t.Errorf("part of the too-large batch was applied: %v", err)
	}
}

func TestCommitContextCancelled(t *testing.T) {
	s := openStore(t, testOptions(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Commit(ctx, createBatch("/early", TypeFile, "n")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before: %v", err)
	}

	release, blocked := blockCommitter(t, s)
	ctx, cancel = context.WithCancel(context.Background())
	results := enqueue(t, s, ctx, []*Batch{createBatch("/queued", TypeFile, "n")})
	cancel()
	errs := results() // returns before the committer is released
	if !errors.Is(errs[0], context.Canceled) {
		t.Errorf("cancelled while queued: %v", errs[0])
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, createBatch("/after", TypeFile, "n")) // the cancelled request has been skipped by now
	for _, p := range []string{"/early", "/queued"} {
		if _, err := s.GetInode(context.Background(), p); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s applied after cancellation: %v", p, err)
		}
	}
	if st := s.Stats(); st.Cancelled != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestCloseFailsQueuedAndStops(t *testing.T) {
	ctx := context.Background()
	goroutines := runtime.NumGoroutine()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	release, blocked := blockCommitter(t, s)
	var batches []*Batch
	for i := range 5 {
		batches = append(batches, createBatch(fmt.Sprintf("/q%d", i), TypeFile, "n"))
	}
	results := enqueue(t, s, ctx, batches)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	<-s.closing
	release()
	if err := <-blocked; err != nil {
		t.Errorf("request in the group being committed: %v", err)
	}
	for i, err := range results() {
		if !errors.Is(err, ErrClosed) || !errors.Is(err, fs.ErrClosed) {
			t.Errorf("queued request %d: %v, want ErrClosed", i, err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Commit(ctx, createBatch("/late", TypeFile, "n")); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	if _, err := s.GetInode(ctx, "/q0"); !errors.Is(err, ErrClosed) {
		t.Errorf("GetInode after Close: %v", err)
	}
	if _, _, err := s.ReadDir(ctx, "/", "", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadDir after Close: %v", err)
	}
	// No goroutine outlives the store (Badger's included).
	for i := 0; runtime.NumGoroutine() > goroutines; i++ {
		if i > 500 {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before Open, %d after Close\n%s", goroutines, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	s = openStore(t, opts)
	if c := checkCounts(t, s); c.Total() != 0 {
		t.Errorf("queued requests were applied: %+v", c)
	}
}

// TestSingleWriterNeverLingers: lingering only happens when the previous
// group's writers are expected back in addition to queued ones, so a lone
// writer never waits for company.
func TestSingleWriterNeverLingers(t *testing.T) {
	s := openStore(t, testOptions(t))
	for i := range 50 {
		mustCommit(t, s, createBatch(fmt.Sprintf("/solo/f%d", i), TypeFile, "n"))
	}
	if st := s.Stats(); st.Lingers != 0 || st.Txns != 50 {
		t.Errorf("stats %+v: want 50 transactions and no lingering", st)
	}
}
