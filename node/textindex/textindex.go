// Package textindex is the full-text index of one shard replica
// (docs/design.md, "Text"): the start of each text file's content,
// as stored in its inode (store.Inode.Text), indexed with bleve under the
// file's path, so that a search by words answers with the paths whose text
// holds every word.
//
// Every replica keeps its own index in step with the entries it applies
// (the shard's state machine calls Apply after each run of entries), so a
// new leader searches at once, with no re-index. The index is created on
// disk when the first text arrives, so a shard without text costs nothing.
// Its writes are not synced with the store's: Close records the store's
// applied index in the index, and Open trusts an index only if it was
// closed at the index the store is at. Otherwise (a crash, a snapshot
// installed) the replica rebuilds it from the store's inodes (Reset, then
// Apply), which it scans at every open anyway for its counting filter.
package textindex

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"
)

// cleanKey is the internal key of the applied index recorded by Close; an
// index opened without it (or with another index) is rebuilt.
var cleanKey = []byte("ghba.clean")

// Field names of an indexed file.
const (
	fieldPath    = "path"
	fieldContent = "content"
)

// MaxResults bounds the hits of one Search.
const MaxResults = 1000

// Op is one change to the index: the text of Path, or its removal when
// Text is empty.
type Op struct {
	Path string
	Text string
}

// Index is the full-text index of one replica. Apply and Reset are called
// by the replica's state machine, one at a time; Search may run
// concurrently with them.
type Index struct {
	dir string
	mu  sync.RWMutex // guards idx: Search reads it while Apply writes
	idx bleve.Index  // nil until the first text (or when dir holds none)
	// stale: an Apply failed, so the index may miss changes; Close does
	// not mark it, and the next Open rebuilds it.
	stale bool
}

// Active reports whether the index exists (it has held a text).
func (ix *Index) Active() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.idx != nil
}

// doc is what is indexed of a file.
type doc struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Open opens the index kept in dir. It reports fresh when the index must
// be rebuilt from the store (Apply every text): dir holds no index (the
// store may hold texts applied before a crash created it) or one that was
// not closed at applied (the store's applied index), which is removed.
// Nothing is created until the first text.
func Open(dir string, applied uint64) (ix *Index, fresh bool, err error) {
	ix = &Index{dir: dir}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return ix, true, nil
	}
	idx, err := bleve.Open(dir)
	if err == nil {
		var mark []byte
		if mark, err = idx.GetInternal(cleanKey); err == nil && len(mark) == 8 && binary.BigEndian.Uint64(mark) == applied {
			// Trusted until the next clean Close: a crash from now on
			// leaves the index unmarked.
			if err := idx.DeleteInternal(cleanKey); err != nil {
				idx.Close()
				return nil, false, fmt.Errorf("text index: %w", err)
			}
			ix.idx = idx
			return ix, false, nil
		}
		idx.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, false, fmt.Errorf("text index: removing a stale index: %w", err)
	}
	return ix, true, nil
}

// Reset removes every document (before a rebuild, after a snapshot was
// installed).
func (ix *Index) Reset() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.idx != nil {
		if err := ix.idx.Close(); err != nil {
			return fmt.Errorf("text index: %w", err)
		}
		ix.idx = nil
	}
	if err := os.RemoveAll(ix.dir); err != nil {
		return fmt.Errorf("text index: %w", err)
	}
	ix.stale = false
	return nil
}

// newMapping indexes a document's content with bleve's standard analyzer
// (Unicode word boundaries, lower case, English stop words) and its path
// as one term (for the prefix of a search root). Nothing is stored but
// the index itself: the text lives in the store.
func newMapping() mapping.IndexMapping {
	path := bleve.NewKeywordFieldMapping()
	path.Store, path.IncludeInAll, path.DocValues = false, false, false
	content := bleve.NewTextFieldMapping()
	content.Analyzer = "standard"
	content.Store, content.IncludeInAll, content.IncludeTermVectors, content.DocValues = false, false, false, false
	dm := bleve.NewDocumentStaticMapping()
	dm.AddFieldMappingsAt(fieldPath, path)
	dm.AddFieldMappingsAt(fieldContent, content)
	m := bleve.NewIndexMapping()
	m.DefaultMapping = dm
	m.DefaultAnalyzer = "standard"
	return m
}

// Apply applies ops in order, in one bleve batch. Removals of paths the
// index never held cost nothing when the index does not exist yet.
func (ix *Index) Apply(ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	ix.mu.RLock()
	idx := ix.idx
	ix.mu.RUnlock()
	if idx == nil {
		texts := false
		for _, op := range ops {
			texts = texts || op.Text != ""
		}
		if !texts {
			return nil
		}
		var err error
		if idx, err = bleve.New(ix.dir, newMapping()); err != nil {
			return fmt.Errorf("text index: creating it: %w", err)
		}
		ix.mu.Lock()
		ix.idx = idx
		ix.mu.Unlock()
	}
	b := idx.NewBatch()
	for _, op := range ops {
		if op.Text == "" {
			b.Delete(op.Path)
			continue
		}
		if err := b.Index(op.Path, doc{Path: op.Path, Content: op.Text}); err != nil {
			ix.stale = true
			return fmt.Errorf("text index: %s: %w", op.Path, err)
		}
	}
	if err := idx.Batch(b); err != nil {
		ix.stale = true
		return fmt.Errorf("text index: %w", err)
	}
	return nil
}

// Count returns the number of files indexed.
func (ix *Index) Count() uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.idx == nil {
		return 0
	}
	n, err := ix.idx.DocCount()
	if err != nil {
		return 0
	}
	return n
}

// Search returns the paths at or below root whose text holds every word
// of words (as the standard analyzer splits them), best match first (ties
// by path), hits from..from+size of total.
func (ix *Index) Search(ctx context.Context, words, root string, from, size int) (paths []string, total uint64, err error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.idx == nil {
		return nil, 0, nil
	}
	if size <= 0 || size > MaxResults {
		size = MaxResults
	}
	match := bleve.NewMatchQuery(words)
	match.SetField(fieldContent)
	match.SetOperator(query.MatchQueryOperatorAnd)
	var q query.Query = match
	if root != "/" {
		exact := bleve.NewTermQuery(root)
		exact.SetField(fieldPath)
		below := bleve.NewPrefixQuery(root + "/")
		below.SetField(fieldPath)
		q = bleve.NewConjunctionQuery(match, bleve.NewDisjunctionQuery(exact, below))
	}
	req := bleve.NewSearchRequestOptions(q, size, from, false)
	req.SortBy([]string{"-_score", "_id"})
	res, err := ix.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, 0, fmt.Errorf("text index: %w", err)
	}
	paths = make([]string, len(res.Hits))
	for i, h := range res.Hits {
		paths[i] = h.ID
	}
	return paths, res.Total, nil
}

// Close closes the index, recording applied (the store's applied index,
// every entry up to which is in the index) so that the next Open keeps it.
func (ix *Index) Close(applied uint64) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.idx == nil {
		return nil
	}
	var err error
	if !ix.stale {
		var mark [8]byte
		binary.BigEndian.PutUint64(mark[:], applied)
		err = ix.idx.SetInternal(cleanKey, mark[:])
	}
	if cerr := ix.idx.Close(); err == nil {
		err = cerr
	}
	ix.idx = nil
	if err != nil {
		return fmt.Errorf("text index: %w", err)
	}
	return nil
}
