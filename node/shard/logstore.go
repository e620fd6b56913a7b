package shard

import (
	"fmt"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// OpenLogStore opens the Raft log and stable store at path (a bbolt file,
// created if missing), synced on every write: the log is the point of
// durability of a shard. Every Raft group of a node (its group Raft and
// each shard replica) opens its log here.
//
// The free-page list is not written on each commit (NoFreelistSync, what
// Consul offers as raft_logstore.boltdb.no_freelist_sync for large logs):
// a log store frees and allocates pages on every append and truncation,
// and a long list written back on each commit grows with the file. bbolt
// rebuilds the list by scanning the file when it opens it; the hash-map
// form keeps allocation from a long list cheap. (On a fresh log, as in
// BenchmarkCreate, it makes no measurable difference.)
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
