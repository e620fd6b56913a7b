package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/search"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// maxFindScan bounds the inodes one page of a search looks at, so that a
// page that matches little still answers in bounded time (the client
// asks again from the cursor).
const maxFindScan = 50000

// errPageFull ends a page's scan.
var errPageFull = errors.New("find page full")

// Find answers one page of a search of one shard (rpc.FindRequest),
// forwarded to the shard's leader, which scans its store below the root.
func (n *Namespace) Find(ctx context.Context, r *rpc.FindRequest) (*rpc.FindResponse, error) {
	if r.Shard == "" {
		return nil, fmt.Errorf("%w: find names no shard", fs.ErrInvalid)
	}
	req := &homeFindReq{shardReq: shardReq{Shard: r.Shard}, Find: *r, Caller: caller(ctx)}
	if _, err := newFindMatcher(&req.Find); err != nil {
		return nil, err
	}
	return callShard(ctx, n, r.Shard, methodHomeFind, req, (*home).handleHomeFind)
}

// findMatcher is a compiled FindRequest.
type findMatcher struct {
	r     *rpc.FindRequest
	root  string
	typ   store.FileType
	regex *regexp.Regexp
	query *search.Matcher // nil without a Query
}

func newFindMatcher(r *rpc.FindRequest) (*findMatcher, error) {
	root, err := CleanPath(r.Root)
	if err != nil {
		return nil, err
	}
	m := &findMatcher{r: r, root: root}
	if r.Type != "" {
		if m.typ = storeType(r.Type); m.typ == 0 {
			return nil, fmt.Errorf("%w: type %q", fs.ErrInvalid, r.Type)
		}
	}
	if r.Name != "" {
		if _, err := path.Match(r.Name, ""); err != nil {
			return nil, fmt.Errorf("%w: name pattern %q: %w", fs.ErrInvalid, r.Name, err)
		}
	}
	if r.Regex != "" {
		if m.regex, err = regexp.Compile(r.Regex); err != nil {
			return nil, fmt.Errorf("%w: regular expression: %w", fs.ErrInvalid, err)
		}
	}
	if strings.TrimSpace(r.Query) != "" {
		m.query = search.NewMatcher(r.Query)
	}
	if r.Text != "" && r.Query != "" {
		return nil, fmt.Errorf("%w: a plain query and text words in one search", fs.ErrInvalid)
	}
	if r.Text != "" && r.After != "" {
		if from, err := strconv.Atoi(r.After); err != nil || from < 0 {
			return nil, fmt.Errorf("%w: text search cursor %q", fs.ErrInvalid, r.After)
		}
	}
	if r.Limit < 0 || r.Limit > rpc.MaxFindPage {
		return nil, fmt.Errorf("%w: limit %d (at most %d)", fs.ErrInvalid, r.Limit, rpc.MaxFindPage)
	}
	return m, nil
}

// matchPath reports whether path p passes the name, regex and query
// conditions, and the query's stage.
func (m *findMatcher) matchPath(p string) (ok bool, stage string) {
	if m.r.Name != "" {
		if ok, _ := path.Match(m.r.Name, path.Base(p)); !ok {
			return false, ""
		}
	}
	if m.regex != nil && !m.regex.MatchString(p) {
		return false, ""
	}
	if m.query != nil {
		stage = m.query.Stage(path.Base(p))
		return stage != "", stage
	}
	return true, ""
}

// matchInode reports whether ino passes the type, size and mtime
// conditions.
func (m *findMatcher) matchInode(ino *store.Inode) bool {
	r := m.r
	return (m.typ == 0 || ino.Type == m.typ) &&
		(r.MinSize == nil || ino.Size >= *r.MinSize) && (r.MaxSize == nil || ino.Size <= *r.MaxSize) &&
		(r.MinMtime == nil || ino.Mtime >= *r.MinMtime) && (r.MaxMtime == nil || ino.Mtime <= *r.MaxMtime)
}

func (h *home) handleHomeFind(ctx context.Context, r *homeFindReq) (*rpc.FindResponse, error) {
	m, err := newFindMatcher(&r.Find)
	if err != nil {
		return nil, err
	}
	limit := r.Find.Limit
	if limit == 0 {
		limit = rpc.MaxFindPage
	}
	if r.Find.Text != "" {
		return h.findText(ctx, m, r.Caller, limit)
	}
	out := &rpc.FindResponse{Inodes: []rpc.Inode{}}
	last, stage := "", ""
	// The path conditions are tested on the keys; only the inodes of
	// the paths that pass them are read.
	pre := func(p string) (ok bool, err error) {
		if len(out.Inodes) >= limit || out.Scanned >= maxFindScan {
			return false, errPageFull
		}
		out.Scanned++
		last = p
		ok, stage = m.matchPath(p)
		return ok, nil
	}
	err = h.st.SearchInodes(ctx, m.root, r.Find.After, pre, func(p string, ino store.Inode) error {
		if ino.Anchor != "" {
			// One name of an inode with several: its record's attributes
			// (hardlinks.go).
			rec, ok, err := h.recordOf(ctx, &ino)
			if err != nil || !ok {
				return err
			}
			codes, anchor := ino.Ancestors, ino.Anchor
			ino = storeInode(&rec)
			ino.Ancestors, ino.Anchor = codes, anchor
		}
		if m.matchInode(&ino) && findVisible(r.Caller, p, &ino) {
			out.Inodes = append(out.Inodes, wireInode(p, h.id, &ino))
			if m.query != nil {
				out.Stages = append(out.Stages, stage)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errPageFull):
		out.Next = last
	case err != nil:
		return nil, err
	}
	return out, nil
}

// findText answers one page of a search by text: the full-text index's
// hits below the root, best first, that pass the other conditions. The
// cursor is the position of the page's first hit in the ranking.
func (h *home) findText(ctx context.Context, m *findMatcher, caller *acl.Identity, limit int) (*rpc.FindResponse, error) {
	from, _ := strconv.Atoi(m.r.After) // checked by newFindMatcher
	paths, total, err := h.rep.SearchText(ctx, m.r.Text, m.root, from, limit)
	if err != nil {
		return nil, err
	}
	out := &rpc.FindResponse{Inodes: []rpc.Inode{}, Scanned: len(paths)}
	inodes, err := h.st.GetInodes(ctx, paths)
	if err != nil {
		return nil, err
	}
	for i, p := range paths {
		ino := inodes[i]
		if ino == nil {
			continue // removed since the index answered
		}
		if ok, _ := m.matchPath(p); ok && m.matchInode(ino) && findVisible(caller, p, ino) {
			out.Inodes = append(out.Inodes, wireInode(p, h.id, ino))
			out.Stages = append(out.Stages, search.StageText)
		}
	}
	if next := from + len(paths); len(paths) > 0 && uint64(next) < total {
		out.Next = strconv.Itoa(next)
	}
	return out, nil
}

// findVisible reports whether caller id may see p in a search: what it
// could stat (search permission on every ancestor), never the reserved
// tree.
func findVisible(id *acl.Identity, p string, ino *store.Inode) bool {
	return !acl.Reserved(p) && allowAncestors(id, p, ino.Ancestors) == nil
}
