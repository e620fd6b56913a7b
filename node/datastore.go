package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/rpc"
)

// dataStoreRecord holds the cluster's data store (`ghba data-store set`):
// the object store of file contents (package node/contents), as JSON
// (rpc.DataStore) in the file's layout blob, replicated and recovered like
// the ACL and source records (docs/design.md, "Garbage collection of
// contents").
const dataStoreRecord = acl.ReservedDir + "/datastore"

// dataStoreService keeps the data store record (the DataStore.* methods)
// and opens the store it names for the namespace's garbage collection.
type dataStoreService struct {
	ns  func() *namespace.Namespace
	log *slog.Logger

	mu   sync.Mutex
	url  string          // the URL open was opened from
	open *contents.Store // the store of the record, opened on first use
	old  []*contents.Store
}

func newDataStoreService(ns func() *namespace.Namespace, log *slog.Logger) *dataStoreService {
	return &dataStoreService{ns: ns, log: log}
}

// register installs the DataStore.* methods: Get needs any valid token,
// Set the management role (node/acl.go's method classes).
func (s *dataStoreService) register(srv *rpc.Server) {
	rpc.Register(srv, rpc.MethodDataStoreGet, s.get)
	rpc.Register(srv, rpc.MethodDataStoreSet, s.set)
}

// CheckDataStoreURL accepts the URLs node/contents.Open serves: file:///DIR
// (an absolute directory) and s3://BUCKET[?...]. Errors match fs.ErrInvalid.
func CheckDataStoreURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: data store URL %q: %v", fs.ErrInvalid, raw, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" || u.Path == "" || u.Path[0] != '/' {
			return fmt.Errorf("%w: data store URL %q: want file:///ABSOLUTE/DIR", fs.ErrInvalid, raw)
		}
	case "s3":
		if u.Host == "" {
			return fmt.Errorf("%w: data store URL %q: want s3://BUCKET (a bucket name)", fs.ErrInvalid, raw)
		}
	default:
		return fmt.Errorf("%w: data store URL %q: the scheme must be file:// or s3://", fs.ErrInvalid, raw)
	}
	return nil
}

// read returns the record, its inode's version and whether it exists.
func (s *dataStoreService) read(ctx context.Context) (rec rpc.DataStore, version uint64, exists bool, err error) {
	st, err := s.ns().Stat(asNode(ctx), dataStoreRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return rpc.DataStore{}, 0, false, nil
	}
	if err != nil {
		return rpc.DataStore{}, 0, false, err
	}
	if err := json.Unmarshal(st.Layout, &rec); err != nil {
		return rpc.DataStore{}, 0, false, fmt.Errorf("data store record %s: %w", dataStoreRecord, err)
	}
	return rec, st.Version, true, nil
}

func (s *dataStoreService) get(ctx context.Context, _ *rpc.DataStoreGetRequest) (*rpc.DataStoreResponse, error) {
	rec, _, _, err := s.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("data store: %w", err)
	}
	return &rpc.DataStoreResponse{DataStore: rec}, nil
}

// set records r.URL after checking it: a different URL already recorded
// needs r.Force (the files' contents in the old store would no longer be
// found). The record is replaced only at the version read (a concurrent
// set makes this one read again), or created exclusively.
func (s *dataStoreService) set(ctx context.Context, r *rpc.DataStoreSetRequest) (*rpc.DataStoreResponse, error) {
	if err := CheckDataStoreURL(r.URL); err != nil {
		return nil, err
	}
	checked := r.NoCheck
	for attempt := 0; ; attempt++ {
		cur, version, exists, err := s.read(ctx)
		if err != nil {
			return nil, fmt.Errorf("data store: %w", err)
		}
		if exists && cur.URL == r.URL {
			return &rpc.DataStoreResponse{DataStore: cur}, nil
		}
		if exists && cur.URL != "" && !r.Force {
			return nil, fmt.Errorf("data store: %w: the cluster's data store is %s; setting %s would lose the contents "+
				"of every file kept in it (their layouts name objects of the old store); "+
				"copy the objects first, then set it again with --force", fs.ErrExist, cur.URL, r.URL)
		}
		if !checked {
			if err := checkStore(ctx, r.URL); err != nil {
				return nil, err
			}
			checked = true
		}
		rec := rpc.DataStore{URL: r.URL, Set: time.Now().UnixNano()}
		b, err := json.Marshal(&rec)
		if err != nil {
			return nil, err
		}
		ns, nctx := s.ns(), asNode(ctx)
		if exists {
			_, err = ns.SetAttr(nctx, &rpc.SetAttrRequest{Path: dataStoreRecord, Layout: b, IfVersion: &version})
		} else {
			if _, err = ns.Mkdir(nctx, &rpc.MkdirRequest{Path: acl.ReservedDir, Mode: 0o700, Parents: true}); err != nil {
				return nil, fmt.Errorf("mkdir %s: %w", acl.ReservedDir, err)
			}
			_, err = ns.Create(nctx, &rpc.CreateRequest{Path: dataStoreRecord, Mode: 0o600, Layout: b})
		}
		switch {
		case err == nil:
			s.log.Info("data store set", "url", r.URL, "was", cur.URL)
			return &rpc.DataStoreResponse{DataStore: rec, Changed: true}, nil
		case (errors.Is(err, rpc.ErrVersionMismatch) || errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist)) && attempt < 5:
			continue // set or removed meanwhile: read it again
		}
		return nil, fmt.Errorf("data store: %w", err)
	}
}

// checkStore opens the store at rawURL and checks that it works (a probe
// object written, read back and deleted).
func checkStore(ctx context.Context, rawURL string) error {
	st, err := contents.Open(ctx, rawURL)
	if err != nil {
		return fmt.Errorf("data store %s: %w", rawURL, err)
	}
	defer st.Close()
	if err := st.Check(ctx); err != nil {
		return fmt.Errorf("data store %s does not work from this node: %w", rawURL, err)
	}
	return nil
}

// store returns the store the record names, opened once and kept while
// the record names it (namespace.Options.DataStore); nil when none is set.
func (s *dataStoreService) store(ctx context.Context) (*contents.Store, error) {
	rec, _, _, err := s.read(ctx)
	if err != nil || rec.URL == "" {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != nil && s.url == rec.URL {
		return s.open, nil
	}
	st, err := contents.Open(ctx, rec.URL)
	if err != nil {
		return nil, err
	}
	if s.open != nil {
		s.old = append(s.old, s.open) // may be in use: closed at shutdown
	}
	s.open, s.url = st, rec.URL
	return st, nil
}

// close closes the stores opened.
func (s *dataStoreService) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range append(s.old, s.open) {
		if st != nil {
			if err := st.Close(); err != nil {
				s.log.Debug("closing a data store", "err", err)
			}
		}
	}
	s.open, s.old = nil, nil
}
