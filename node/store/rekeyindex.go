package store

import (
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// rekeyIndex is the in-memory copy of the live rekey records (old path →
// record), against which a rekey start checks for overlaps (issue 35): a
// scan of the rekey prefix in Badger steps over the deleted versions of
// every rekey ever done until compaction drops them, so its cost grew with
// the number of renames, while the live set is tiny.
//
// It always equals the rekey records committed to Badger:
//
//   - Open loads it (one scan, in init's transaction);
//   - Restore empties it when it drops the store's contents and loads it
//     again from the restored contents;
//   - the two writers of rekey records, the start of a rekey (wtxn.setRekey)
//     and its last step (wtxn.deleteRekey), note their change in their
//     transaction's overlay (wtxn.rekeys), which tryTxn applies here only
//     once that transaction has committed;
//   - a transaction with rekey changes whose commit failed leaves the
//     outcome unknown (see Commit): the index is then marked unloaded and
//     loaded again from Badger by the next check, as is an index never
//     loaded (a store opened after an incomplete restore).
//
// Nothing else writes keys of prefix pfxRekey (a Batch cannot). The check
// of a request sees the index overlaid with the changes of the requests
// before it in the same transaction, as a scan in that transaction would.
type rekeyIndex struct {
	mu     sync.Mutex
	recs   map[string]rekeyEntry
	loaded bool // recs is Badger's; else load it before use
}

// rekeyEntry is one rekey record of the index.
type rekeyEntry struct {
	rk Rekey
	// err is set (and of rk only Old) when the record could not be read:
	// a check that reaches it fails with err, as the scan did.
	err error
}

// loadRekeys reads every rekey record of txn. A record that does not
// decode is kept with its error rather than failing the load: only a
// rekey start that reaches it fails, as before the index existed.
func loadRekeys(txn *badger.Txn) map[string]rekeyEntry {
	recs := make(map[string]rekeyEntry)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{pfxRekey}, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		old := string(item.Key()[1:])
		var e rekeyEntry
		if err := item.Value(func(v []byte) (err error) { e.rk, err = decodeRekey(old, v); return err }); err != nil {
			e = rekeyEntry{rk: Rekey{Old: old}, err: fmt.Errorf("store: rekey record %q: %w", old, err)}
		}
		recs[old] = e
	}
	return recs
}

// set replaces the index with recs (nil: unloaded).
func (x *rekeyIndex) set(recs map[string]rekeyEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.recs, x.loaded = recs, recs != nil
}

// committed applies the rekey changes of a transaction that committed
// (nil: the record was deleted).
func (x *rekeyIndex) committed(changes map[string]*rekeyEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.loaded {
		return // loaded from Badger, with these changes, at next use
	}
	for old, e := range changes {
		if e == nil {
			delete(x.recs, old)
		} else {
			x.recs[old] = *e
		}
	}
}

// unload records that the index may no longer match Badger.
func (x *rekeyIndex) unload() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.recs, x.loaded = nil, false
}

// first returns, of the rekey records of db overlaid with the changes of
// the transaction in progress (overlay; nil: deleted), the one of lowest
// old path (key order, as a scan finds them) that is unreadable or for
// which match is true. The caller holds the store's wmu, so nothing
// commits meanwhile.
func (x *rekeyIndex) first(db *badger.DB, overlay map[string]*rekeyEntry, match func(Rekey) bool) (rekeyEntry, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.loaded {
		var recs map[string]rekeyEntry
		if err := db.View(func(txn *badger.Txn) error { recs = loadRekeys(txn); return nil }); err != nil {
			return rekeyEntry{}, false, fmt.Errorf("store: load rekey records: %w", err)
		}
		x.recs, x.loaded = recs, true
	}
	var best rekeyEntry
	found := false
	consider := func(old string, e rekeyEntry) {
		if (found && old >= best.rk.Old) || (e.err == nil && !match(e.rk)) {
			return
		}
		best, found = e, true
	}
	for old, e := range x.recs {
		if _, changed := overlay[old]; !changed {
			consider(old, e)
		}
	}
	for old, e := range overlay {
		if e != nil {
			consider(old, *e)
		}
	}
	return best, found, nil
}

// setRekey writes the rekey record rk in the transaction.
func (w *wtxn) setRekey(rk Rekey) error {
	if err := w.txn.Set(rekeyKey(rk.Old), encodeRekey(&rk)); err != nil {
		return err
	}
	w.noteRekey(rk.Old, &rekeyEntry{rk: rk})
	return nil
}

// deleteRekey deletes the rekey record of old in the transaction.
func (w *wtxn) deleteRekey(old string) error {
	if err := w.txn.Delete(rekeyKey(old)); err != nil {
		return err
	}
	w.noteRekey(old, nil)
	return nil
}

func (w *wtxn) noteRekey(old string, e *rekeyEntry) {
	if w.rekeys == nil {
		w.rekeys = make(map[string]*rekeyEntry)
	}
	w.rekeys[old] = e
}
