package shard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// The stores a replica's Raft log can be kept in (config shard_log_store;
// docs/design.md, "Replicated shards", "The shard log"). A replica keeps
// the store it was created with.
const (
	// LogStoreBoltDB is hashicorp/raft-boltdb/v2: one bbolt file, two
	// fdatasyncs per append. The default.
	LogStoreBoltDB = "boltdb"
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files, one
	// fdatasync per append. Its authors call it experimental (as Consul,
	// which offers it as raft_logstore.backend = "wal").
	LogStoreWAL = "wal"
)

// LogStores lists the valid log store names.
var LogStores = []string{LogStoreBoltDB, LogStoreWAL}

// ErrLogStore is returned for an unknown log store name.
var ErrLogStore = errors.New("unknown shard log store")

// logStore is a replica's Raft log and stable store.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// logCacheEntries is how many recent entries a replica keeps in memory:
// the leader reads them back to send them to its followers.
const logCacheEntries = 512

// Where each store lives in a replica's raft directory.
const (
	boltFile = "raft.db"
	walDir   = "wal"
)

// openLogStore opens the replica's Raft log in raftDir: in the store it
// already has one in, else in a new one of kind. It returns the kind
// opened.
func openLogStore(raftDir, kind string, hl hclog.Logger) (logStore, string, error) {
	switch {
	case exists(filepath.Join(raftDir, boltFile)):
		kind = LogStoreBoltDB
	case exists(filepath.Join(raftDir, walDir)):
		kind = LogStoreWAL
	}
	switch kind {
	case "", LogStoreBoltDB:
		s, err := OpenLogStore(filepath.Join(raftDir, boltFile))
		return s, LogStoreBoltDB, err
	case LogStoreWAL:
		dir := filepath.Join(raftDir, walDir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, "", err
		}
		meta := &metadb.BoltMetaDB{}
		w, err := wal.Open(dir, wal.WithLogger(hl.Named("wal")), wal.WithMetaStore(meta))
		if err != nil {
			_ = meta.Close()
			return nil, "", fmt.Errorf("raft-wal %s: %w", dir, err)
		}
		return &walStore{WAL: w, meta: meta}, LogStoreWAL, nil
	}
	return nil, "", fmt.Errorf("%w %q (want one of %v)", ErrLogStore, kind, LogStores)
}

// walStore is a raft-wal log that closes its metadata file too (WAL.Close
// leaves it open, and its lock would keep the replica from opening again).
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

// Close closes the log, then its metadata file.
func (w *walStore) Close() error { return errors.Join(w.WAL.Close(), w.meta.Close()) }

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// OpenLogStore opens a raft-boltdb/v2 log and stable store at path (a
// bbolt file, created if missing), synced on every write. The node's
// group Raft keeps its log here, and so does a shard replica with
// LogStoreBoltDB.
//
// The free-page list is not written on each commit (NoFreelistSync, what
// Consul offers as raft_logstore.boltdb.no_freelist_sync for large logs):
// a log store frees and allocates pages on every append and truncation,
// and a long list written back on each commit grows with the file. bbolt
// rebuilds the list by scanning the file when it opens it; the hash-map
// form keeps allocation from a long list cheap.
func OpenLogStore(path string) (*raftboltdb.BoltStore, error) {
	s, err := raftboltdb.New(raftboltdb.Options{
		Path: path,
		BoltOptions: &bbolt.Options{
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("raft log store %s: %w", path, err)
	}
	return s, nil
}
