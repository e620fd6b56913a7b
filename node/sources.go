package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/serf/serf"
)

// sourcesDir holds one file per registered source ("ghba source"), the
// record as JSON in the file's layout blob, replicated and recovered like
// the ACL records.
const sourcesDir = acl.ReservedDir + "/sources"

// sourceService keeps the source records and lists the shares that
// share agents announce (shareagent.go).
type sourceService struct {
	ns      func() *namespace.Namespace
	members func() []serf.Member // the Serf pool as this node sees it; nil before Serf starts
	log     *slog.Logger
}

func newSourceService(ns func() *namespace.Namespace, members func() []serf.Member, log *slog.Logger) *sourceService {
	return &sourceService{ns: ns, members: members, log: log}
}

// register installs the Sources.* methods.
func (s *sourceService) register(srv *rpc.Server) {
	rpc.Register(srv, rpc.MethodSourcePut, s.put)
	rpc.Register(srv, rpc.MethodSourceList, s.list)
	rpc.Register(srv, rpc.MethodSourceRemove, s.remove)
	rpc.Register(srv, rpc.MethodSourceDiscover, s.discover)
}

func checkSource(src *rpc.Source) error {
	switch {
	case !rpc.ValidSourceName(src.Name):
		return fmt.Errorf("%w: source name %q: want 1-64 of A-Z a-z 0-9 . _ -", fs.ErrInvalid, src.Name)
	case src.Machine == "":
		return fmt.Errorf("%w: source %s: no machine", fs.ErrInvalid, src.Name)
	case !path.IsAbs(src.Dir):
		return fmt.Errorf("%w: source %s: directory %q is not absolute", fs.ErrInvalid, src.Name, src.Dir)
	case !path.IsAbs(src.Dest) || path.Clean(src.Dest) == "/" || acl.Reserved(path.Clean(src.Dest)):
		return fmt.Errorf("%w: source %s: destination %q: want an absolute path other than / and %s", fs.ErrInvalid, src.Name, src.Dest, acl.ReservedDir)
	case src.Content < 0 || src.Content > rpc.MaxTextLen:
		return fmt.Errorf("%w: source %s: content of %d bytes (0 to %d)", fs.ErrInvalid, src.Name, src.Content, rpc.MaxTextLen)
	}
	if d, err := time.ParseDuration(src.Every); err != nil || d < time.Second {
		return fmt.Errorf("%w: source %s: every %q: want a duration of 1s or more", fs.ErrInvalid, src.Name, src.Every)
	}
	return nil
}

func (s *sourceService) put(ctx context.Context, r *rpc.SourcePutRequest) (*rpc.SourcePutResponse, error) {
	src := r.Source
	if err := checkSource(&src); err != nil {
		return nil, err
	}
	b, err := json.Marshal(&src)
	if err != nil {
		return nil, err
	}
	ns, nctx := s.ns(), asNode(ctx)
	p := path.Join(sourcesDir, src.Name)
	_, err = ns.Stat(nctx, p)
	switch {
	case err == nil && r.Create:
		return nil, fmt.Errorf("source %s: %w", src.Name, fs.ErrExist)
	case err == nil:
		if _, err := ns.SetAttr(nctx, &rpc.SetAttrRequest{Path: p, Layout: b}); err != nil {
			return nil, fmt.Errorf("source %s: %w", src.Name, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		if _, err := ns.Mkdir(nctx, &rpc.MkdirRequest{Path: sourcesDir, Mode: 0o700, Parents: true}); err != nil {
			return nil, fmt.Errorf("mkdir %s: %w", sourcesDir, err)
		}
		if _, err := ns.Create(nctx, &rpc.CreateRequest{Path: p, Mode: 0o600, Layout: b}); err != nil {
			return nil, fmt.Errorf("source %s: %w", src.Name, err)
		}
		s.log.Info("source registered", "source", src.Name, "machine", src.Machine, "dir", src.Dir, "dest", src.Dest)
	default:
		return nil, fmt.Errorf("source %s: %w", src.Name, err)
	}
	return &rpc.SourcePutResponse{Source: src}, nil
}

func (s *sourceService) list(ctx context.Context, _ *rpc.SourceListRequest) (*rpc.SourceListResponse, error) {
	ns, nctx := s.ns(), asNode(ctx)
	out := &rpc.SourceListResponse{Sources: []rpc.Source{}}
	entries, err := readDirAll(nctx, ns, sourcesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, name := range entries {
		st, err := ns.Stat(nctx, path.Join(sourcesDir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		var src rpc.Source
		if err := json.Unmarshal(st.Layout, &src); err != nil {
			return nil, fmt.Errorf("source record %s: %w", name, err)
		}
		out.Sources = append(out.Sources, src)
	}
	return out, nil
}

func (s *sourceService) remove(ctx context.Context, r *rpc.SourceRemoveRequest) (*rpc.SourceRemoveResponse, error) {
	if !rpc.ValidSourceName(r.Name) {
		return nil, fmt.Errorf("%w: source name %q", fs.ErrInvalid, r.Name)
	}
	if err := s.ns().Unlink(asNode(ctx), path.Join(sourcesDir, r.Name)); err != nil {
		return nil, fmt.Errorf("source %s: %w", r.Name, err)
	}
	s.log.Info("source removed", "source", r.Name)
	return &rpc.SourceRemoveResponse{}, nil
}

// discover lists the machines whose share agents this node's gossip
// knows, each share with the source it is adopted as.
func (s *sourceService) discover(ctx context.Context, _ *rpc.SourceDiscoverRequest) (*rpc.SourceDiscoverResponse, error) {
	srcs, err := s.list(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &rpc.SourceDiscoverResponse{Machines: discoverShares(s.members(), srcs.Sources)}, nil
}

// readDirAll returns the names in directory dir.
func readDirAll(ctx context.Context, ns *namespace.Namespace, dir string) ([]string, error) {
	var names []string
	after := ""
	for {
		r, err := ns.ReadDir(ctx, &rpc.ReadDirRequest{Path: dir, After: after})
		if err != nil {
			return nil, err
		}
		for _, e := range r.Entries {
			names = append(names, e.Name)
		}
		if r.Next == "" {
			return names, nil
		}
		after = r.Next
	}
}
