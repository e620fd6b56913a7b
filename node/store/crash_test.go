package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The crash tests run a child process (this test binary, selected by
// environment variables) that writes to a store, and kill it with SIGKILL
// while it is writing. Then the parent opens the store and checks it.

const (
	childModeEnv = "GHBA_STORE_TEST_CHILD"
	childDirEnv  = "GHBA_STORE_TEST_DIR"
)

// TestCrashChild is the child's body; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("only runs as the child of a crash test")
	}
	opts := rekeyOptions(t)
	opts.Dir = os.Getenv(childDirEnv)
	opts.NoSyncWrites = strings.HasPrefix(mode, "applylog")
	s, err := Open(context.Background(), opts)
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	switch mode {
	case "commit":
		// 16 writers creating files forever; "ACK path" after each success.
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					p := fmt.Sprintf("/w%02d/f%06d", w, i)
					if err := s.Commit(context.Background(), createBatch(p, TypeFile, "n1")); err != nil {
						say("ERR %v", err)
						return
					}
					say("ACK %s", p)
				}
			}()
		}
		wg.Wait()
	case "rekey":
		// "STEP k" after each durable step; hang after step 20.
		s.rekeyHook = func(step int) error {
			say("STEP %d", step)
			if step == 20 {
				select {}
			}
			return nil
		}
		err := s.RekeyPrefix(context.Background(), "/src", "/dst/moved", nil, nil)
		say("ERR rekey returned %v", err)
	case "applylog", "applylog-free":
		// Groups of crashGroup entries, each split over transactions;
		// "GROUP last" after each. In mode applylog, the hook hangs right
		// after the first transaction of group crashMidGroup
		// ("MIDGROUP applied").
		g := 0
		s.applyHook = func(applied uint64) error {
			if mode == "applylog" && g == crashMidGroup && applied < uint64((g+1)*crashGroup) {
				say("MIDGROUP %d", applied)
				select {}
			}
			return nil
		}
		for ; ; g++ {
			res, err := s.ApplyLog(context.Background(), testEntries(g*crashGroup+1, crashGroup, crashLayout))
			if err != nil {
				say("ERR %v", err)
				break
			}
			say("GROUP %d", res[len(res)-1].Index)
		}
	}
	os.Exit(1)
}

// The workload of the ApplyLog crash tests: groups of 32 entries of 64 KiB,
// so that each group needs two or three transactions.
const (
	crashGroup    = 32
	crashLayout   = 64 << 10
	crashMidGroup = 6
	crashFree     = 10 // groups to wait for before a SIGKILL at any moment
)

// runChild starts the child and calls onLine for each line it prints until
// onLine returns true; then it kills the child with SIGKILL.
func runChild(t *testing.T, mode, dir string, onLine func(line string) (stop bool)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	stopped := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "ERR ") {
			t.Errorf("child: %s", line)
			break
		}
		if onLine(line) {
			stopped = true
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: an error is expected
	if !stopped {
		t.Fatalf("child ended before the test was done: %v", sc.Err())
	}
}

// TestKillDuringGroupCommit: every write the child acknowledged before it
// was killed is present after reopening, and the inode counts agree.
func TestKillDuringGroupCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := t.TempDir()
	var acked []string
	start := time.Now()
	runChild(t, "commit", dir, func(line string) bool {
		if p, ok := strings.CutPrefix(line, "ACK "); ok {
			acked = append(acked, p)
		}
		return len(acked) >= 3000
	})
	t.Logf("child acknowledged %d creates in %v before SIGKILL", len(acked), time.Since(start))
	opts := testOptions(t)
	opts.Dir = dir
	s := openStore(t, opts)
	ctx := context.Background()
	for _, p := range acked {
		if _, err := s.GetInode(ctx, p); err != nil {
			t.Fatalf("acknowledged %s lost: %v", p, err)
		}
	}
	c := checkCounts(t, s)
	if c.Files < int64(len(acked)) {
		t.Errorf("counts %+v < %d acknowledged", c, len(acked))
	}
	t.Logf("%d files present (%d committed but not yet acknowledged when killed)", c.Files, c.Files-int64(len(acked)))
}

// TestKillDuringRekey: a rekey killed after 20 steps is resumed to exactly
// the state of an uninterrupted one.
func TestKillDuringRekey(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	ctx := context.Background()
	opts := rekeyOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	buildFixture(t, s)
	want := expectRekey(dump(t, s), "/src", "/dst/moved")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	runChild(t, "rekey", opts.Dir, func(line string) bool { return line == "STEP 20" })

	s = openStore(t, opts)
	pending, err := s.PendingRekeys(ctx)
	if err != nil || len(pending) != 1 {
		t.Fatalf("PendingRekeys = %+v, %v", pending, err)
	}
	if _, err := s.GetInode(ctx, "/src/d29/f 099"); err != nil {
		t.Errorf("an inode the crashed rekey had not reached yet: %v", err)
	}
	if err := s.ResumeRekey(ctx, nil); err != nil {
		t.Fatal(err)
	}
	diffDumps(t, dump(t, s), want)
	checkCounts(t, s)
}

// TestKillDuringApplyLog kills a child applying log entries without synced
// writes (a shard replica): once right after the first transaction of a
// split group, once at whatever moment it is at. The reopened store claims
// an applied index whose effects it holds exactly (the same contents as a
// store that applied the entries up to it and no further), and applying the
// log again from the start skips what it has and ends in the same state as
// an uninterrupted run.
func TestKillDuringApplyLog(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	for _, mode := range []string{"applylog", "applylog-free"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			var mid, acked uint64
			runChild(t, mode, dir, func(line string) bool {
				if _, err := fmt.Sscanf(line, "MIDGROUP %d", &mid); err == nil {
					return true
				}
				if _, err := fmt.Sscanf(line, "GROUP %d", &acked); err == nil {
					return mode == "applylog-free" && acked >= crashFree*crashGroup
				}
				return false
			})
			opts := testOptions(t)
			opts.Dir, opts.NoSyncWrites = dir, true
			s := openStore(t, opts)
			applied, err := s.AppliedIndex(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("killed after group end %d (mid-group %d): applied index %d", acked, mid, applied)
			switch {
			case mode == "applylog" && (applied != mid || mid%crashGroup == 0):
				t.Fatalf("applied index %d, want %d, inside a group", applied, mid)
			case applied < acked:
				t.Fatalf("applied index %d below the %d acknowledged", applied, acked)
			}
			all := testEntries(1, int(applied/crashGroup+2)*crashGroup, crashLayout)
			diffDumps(t, dump(t, s), modelDump(t, all[:applied]))
			checkCounts(t, s)

			// Raft replays its log from the start: what the store has is
			// skipped, the rest applied.
			applyAll(t, s, all, crashGroup)
			diffDumps(t, dump(t, s), modelDump(t, all))
			checkCounts(t, s)
		})
	}
}

// TestOpenAfterKillCreatingMemtable: a process killed after badger created
// a memtable file and before it sized it leaves a file of length zero (seen
// in TestKillDuringApplyLog). The store opens anyway, with everything it had.
func TestOpenAfterKillCreatingMemtable(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, createBatch("/a", TypeFile, "n1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(opts.Dir, "00099.mem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	if _, err := s.GetInode(ctx, "/a"); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	if _, err := os.Stat(empty); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the empty memtable file is still there: %v", err)
	}
}
