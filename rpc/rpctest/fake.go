package rpctest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
)

// FakePageSize is the most entries a FakeServer returns in one ReadDir
// page (fewer when the request's Limit is smaller), so that tests exercise
// paging.
const FakePageSize = 2

// FakeMtime is the modification and change time of every inode of a
// FakeServer's namespace.
const FakeMtime int64 = 1_700_000_000_123_456_789

// FakeOptions configure a FakeServer.
type FakeOptions struct {
	// ID is the node id the server answers as; default "node1".
	ID string
	// Share, if set, makes the new server serve the same namespace and
	// canned answers as Share: several FakeServers sharing them are the
	// nodes of one fake cluster, and a setter called on any of them
	// applies to all.
	Share *FakeServer
	// Logger receives the rpc.Server's problems; default Logger(t).
	Logger *slog.Logger
}

// FakeAnswers are the canned answers of a fake cluster to the cluster
// methods; a nil field keeps the default.
type FakeAnswers struct {
	// Members answers rpc.MethodMembers. Default: one member per server
	// of the cluster, in start order, alive in group "g1", the first one
	// its Raft leader.
	Members []rpc.Member
	// Groups answers rpc.MethodGroups; the cluster is settled when every
	// group is. Default: group "g1" of every server, led by the first,
	// settled.
	Groups []rpc.GroupInfo
	// Status answers rpc.MethodStatus. Default: the answering server's id,
	// group "g1", its Raft role and the leader as in the default Members,
	// and the number of files in the namespace.
	Status *rpc.StatusResponse
	// Leave answers rpc.MethodLeave. Default: nothing drained or handed
	// over.
	Leave *rpc.LeaveResponse
}

// FakeServer is a real rpc.Server on 127.0.0.1 that answers the namespace
// methods (Stat, Lookup, BatchStat, Create, Mkdir with or without Parents,
// ReadDir in pages of FakePageSize, SetAttr, Unlink, Rmdir, Rename) from a
// small in-memory namespace, the data store record (DataStore.Get, Set:
// file:// and s3:// URLs, a different one only with Force; nothing is
// checked), and the cluster methods (Members, Groups, Status, Ping, Join,
// Leave) with canned answers. It counts the calls it receives by method,
// remembers the last SetAttr, Rename, Join and Leave requests, and can
// make a path's home unavailable.
//
// Every inode gets an id when it is created ("/" has 1, the others 2, 3,
// … in creation order), which renames keep; entries carry it.
//
// The namespace starts with the directory "/". Every path's home is the
// node SetHome names (by default the first server of the cluster): Stat
// answers from level L2 after one hop and Lookup from level L1 without a
// hop, with the home's address if that node is a server of the cluster
// and the answering server's address otherwise. Paths must be absolute and
// clean (rpc.ErrInvalidPath otherwise); errors match fs.ErrNotExist,
// fs.ErrExist, rpc.ErrNotDir, rpc.ErrIsDir, rpc.ErrNotEmpty and
// rpc.ErrUnavailable as a metadata server's would.
//
// Its methods are safe for concurrent use. It stops when the test ends.
type FakeServer struct {
	id   string
	addr string
	c    *fakeCluster
	// calls counts the requests by method; guarded by c.mu.
	calls map[string]int
}

// fakeCluster is the state the servers of one fake cluster share. Its mutex
// guards it and the servers' call counters; every handler holds it.
type fakeCluster struct {
	mu          sync.Mutex
	servers     []*FakeServer
	inodes      map[string]rpc.Inode // Home is set when answering
	down        map[string]bool
	home        string
	answers     FakeAnswers
	lastSetAttr *rpc.SetAttrRequest
	lastRename  *rpc.RenameRequest
	nextID      uint64
	dataStore   rpc.DataStore
	lastJoin    []string
	lastLeave   *rpc.LeaveRequest
}

// StartFakeServer starts a FakeServer listening on 127.0.0.1:0 (a new fake
// cluster, or one more server of opts.Share's) and stops it when t ends.
func StartFakeServer(t testing.TB, opts FakeOptions) *FakeServer {
	t.Helper()
	if opts.ID == "" {
		opts.ID = "node1"
	}
	if opts.Logger == nil {
		opts.Logger = Logger(t, "fake", opts.ID)
	}
	root := newInode("/", rpc.TypeDir, 0o755, 0, 0)
	root.ID = 1
	c := &fakeCluster{inodes: map[string]rpc.Inode{"/": root}, down: map[string]bool{}, nextID: 2}
	if opts.Share != nil {
		c = opts.Share.c
	}
	s := &FakeServer{id: opts.ID, c: c, calls: map[string]int{}}
	srv := rpc.NewServer(rpc.ServerOptions{Logger: opts.Logger})
	s.register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fake server: %v", err)
	}
	s.addr = ln.Addr().String()
	c.mu.Lock()
	c.servers = append(c.servers, s)
	c.mu.Unlock()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		srv.Close()
		select {
		case err := <-served:
			if err != nil && !errors.Is(err, rpc.ErrServerClosed) {
				t.Errorf("fake server %s: Serve: %v", s.id, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("fake server %s: Serve did not return after Close", s.id)
		}
	})
	return s
}

// ID returns the node id the server answers as.
func (s *FakeServer) ID() string { return s.id }

// Addr returns the server's host:port.
func (s *FakeServer) Addr() string { return s.addr }

// Calls returns how many requests the server received, by method.
func (s *FakeServer) Calls() map[string]int {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return maps.Clone(s.calls)
}

// TotalCalls returns how many requests the server received.
func (s *FakeServer) TotalCalls() int {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	n := 0
	for _, k := range s.calls {
		n += k
	}
	return n
}

// Put adds path p of type typ (rpc.TypeFile or rpc.TypeDir) to the
// namespace, or replaces it, with mode 0644 (file) or 0755 (directory)
// and without checking its parent.
func (s *FakeServer) Put(p, typ string) {
	mode := uint32(0o644)
	if typ == rpc.TypeDir {
		mode = 0o755
	}
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	in := newInode(p, typ, mode, 0, 0)
	in.ID = s.c.nextID
	s.c.nextID++
	s.c.inodes[p] = in
}

// Paths returns every path of the namespace, sorted.
func (s *FakeServer) Paths() []string {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return slices.Sorted(maps.Keys(s.c.inodes))
}

// SetHome makes node id the home of every path.
func (s *FakeServer) SetHome(id string) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.home = id
}

// SetHomeDown makes the home of path p unavailable (down true) or
// available again: every operation on p then fails with
// rpc.ErrUnavailable.
func (s *FakeServer) SetHomeDown(p string, down bool) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if down {
		s.c.down[p] = true
	} else {
		delete(s.c.down, p)
	}
}

// SetAnswers replaces the canned answers to the cluster methods.
func (s *FakeServer) SetAnswers(a FakeAnswers) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.answers = a
}

// LastSetAttr returns the last SetAttr request; false if none came.
func (s *FakeServer) LastSetAttr() (rpc.SetAttrRequest, bool) { return last(s.c, &s.c.lastSetAttr) }

// LastRename returns the last Rename request; false if none came.
func (s *FakeServer) LastRename() (rpc.RenameRequest, bool) { return last(s.c, &s.c.lastRename) }

// LastJoin returns the addresses of the last Join request (nil if none).
func (s *FakeServer) LastJoin() []string {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return slices.Clone(s.c.lastJoin)
}

// LastLeave returns the last Leave request; false if none came.
func (s *FakeServer) LastLeave() (rpc.LeaveRequest, bool) { return last(s.c, &s.c.lastLeave) }

// last returns a copy of the request *p points to, read with c's lock
// held; false if none came.
func last[T any](c *fakeCluster, p **T) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *p == nil {
		var zero T
		return zero, false
	}
	return **p, true
}

// newInode returns the inode of a new path.
func newInode(p, typ string, mode, uid, gid uint32) rpc.Inode {
	return rpc.Inode{Path: p, Type: typ, Mode: mode, UID: uid, GID: gid,
		Mtime: FakeMtime, Ctime: FakeMtime, Nlink: 1, Version: 1}
}

// handle registers h for method on srv: it runs with the cluster's lock
// held, after counting the call.
func handle[Req, Resp any](s *FakeServer, srv *rpc.Server, method string, h func(*Req) (*Resp, error)) {
	rpc.Register(srv, method, func(_ context.Context, r *Req) (*Resp, error) {
		s.c.mu.Lock()
		defer s.c.mu.Unlock()
		s.calls[method]++
		return h(r)
	})
}

// register registers the fake's handlers on srv.
func (s *FakeServer) register(srv *rpc.Server) {
	handle(s, srv, rpc.MethodStat, s.stat)
	handle(s, srv, rpc.MethodLookup, s.lookup)
	handle(s, srv, rpc.MethodBatchStat, func(r *rpc.BatchStatRequest) (*rpc.BatchStatResponse, error) {
		out := &rpc.BatchStatResponse{}
		for _, p := range r.Paths {
			if st, err := s.stat(&rpc.StatRequest{Path: p}); err != nil {
				out.Results = append(out.Results, rpc.BatchStatError(err))
			} else {
				out.Results = append(out.Results, rpc.BatchStatResult{Stat: st})
			}
		}
		return out, nil
	})
	handle(s, srv, rpc.MethodCreate, func(r *rpc.CreateRequest) (*rpc.CreateResponse, error) {
		in, err := s.c.add(r.Path, rpc.TypeFile, r.Mode, r.UID, r.GID)
		if err != nil {
			return nil, err
		}
		return &rpc.CreateResponse{Inode: in, Hops: 1}, nil
	})
	handle(s, srv, rpc.MethodMkdir, s.mkdir)
	handle(s, srv, rpc.MethodReadDir, s.readDir)
	handle(s, srv, rpc.MethodSetAttr, s.setAttr)
	handle(s, srv, rpc.MethodUnlink, func(r *rpc.UnlinkRequest) (*rpc.UnlinkResponse, error) {
		in, err := s.c.get("unlink", r.Path)
		if err != nil {
			return nil, err
		}
		if in.Type == rpc.TypeDir {
			return nil, fmt.Errorf("unlink %s: %w", r.Path, rpc.ErrIsDir)
		}
		delete(s.c.inodes, r.Path)
		return &rpc.UnlinkResponse{}, nil
	})
	handle(s, srv, rpc.MethodRmdir, func(r *rpc.RmdirRequest) (*rpc.RmdirResponse, error) {
		in, err := s.c.get("rmdir", r.Path)
		switch {
		case err != nil:
			return nil, err
		case in.Type != rpc.TypeDir:
			return nil, fmt.Errorf("rmdir %s: %w", r.Path, rpc.ErrNotDir)
		case r.Path == "/":
			return nil, fmt.Errorf("rmdir /: %w", fs.ErrPermission)
		case len(s.c.children(r.Path)) > 0:
			return nil, fmt.Errorf("rmdir %s: %w", r.Path, rpc.ErrNotEmpty)
		}
		delete(s.c.inodes, r.Path)
		return &rpc.RmdirResponse{}, nil
	})
	handle(s, srv, rpc.MethodRename, s.rename)
	handle(s, srv, rpc.MethodDataStoreGet, func(*rpc.DataStoreGetRequest) (*rpc.DataStoreResponse, error) {
		return &rpc.DataStoreResponse{DataStore: s.c.dataStore}, nil
	})
	handle(s, srv, rpc.MethodDataStoreSet, s.setDataStore)
	s.registerCluster(srv)
}

// setDataStore records r.URL as the data store (a different one only
// with r.Force).
func (s *FakeServer) setDataStore(r *rpc.DataStoreSetRequest) (*rpc.DataStoreResponse, error) {
	if !strings.HasPrefix(r.URL, "file:///") && !strings.HasPrefix(r.URL, "s3://") {
		return nil, fmt.Errorf("%w: data store URL %q: the scheme must be file:// or s3://", fs.ErrInvalid, r.URL)
	}
	cur := s.c.dataStore
	switch {
	case cur.URL == r.URL:
		return &rpc.DataStoreResponse{DataStore: cur}, nil
	case cur.URL != "" && !r.Force:
		return nil, fmt.Errorf("data store: %w: the cluster's data store is %s (give --force)", fs.ErrExist, cur.URL)
	}
	s.c.dataStore = rpc.DataStore{URL: r.URL, Set: FakeMtime}
	return &rpc.DataStoreResponse{DataStore: s.c.dataStore, Changed: true}, nil
}

// registerCluster registers the handlers of the cluster methods.
func (s *FakeServer) registerCluster(srv *rpc.Server) {
	handle(s, srv, rpc.MethodMembers, func(*rpc.MembersRequest) (*rpc.MembersResponse, error) {
		return &rpc.MembersResponse{Members: s.c.members()}, nil
	})
	handle(s, srv, rpc.MethodGroups, func(*rpc.GroupsRequest) (*rpc.GroupsResponse, error) {
		if gs := s.c.answers.Groups; gs != nil {
			r := &rpc.GroupsResponse{Groups: slices.Clone(gs), Settled: true}
			for _, g := range gs {
				if !g.Settled && r.Settled {
					r.Settled, r.Unsettled = false, "group "+g.Group+": "+g.Unsettled
				}
			}
			return r, nil
		}
		g := rpc.GroupInfo{Group: "g1", Leader: s.c.servers[0].id, Settled: true}
		for _, srv := range s.c.servers {
			g.Members = append(g.Members, srv.id)
		}
		return &rpc.GroupsResponse{Groups: []rpc.GroupInfo{g}, Settled: true}, nil
	})
	handle(s, srv, rpc.MethodStatus, func(*rpc.StatusRequest) (*rpc.StatusResponse, error) {
		if st := s.c.answers.Status; st != nil {
			out := *st
			return &out, nil
		}
		st := &rpc.StatusResponse{NodeID: s.id, Group: "g1", RaftRole: "follower", Leader: s.c.servers[0].id}
		if s == s.c.servers[0] {
			st.RaftRole = "leader"
		}
		for _, in := range s.c.inodes {
			if in.Type == rpc.TypeFile {
				st.Files++
			}
		}
		return st, nil
	})
	handle(s, srv, rpc.MethodPing, func(*rpc.PingRequest) (*rpc.PingResponse, error) {
		return &rpc.PingResponse{NodeID: s.id}, nil
	})
	handle(s, srv, rpc.MethodJoin, func(r *rpc.JoinRequest) (*rpc.JoinResponse, error) {
		s.c.lastJoin = slices.Clone(r.Addrs)
		return &rpc.JoinResponse{Joined: len(r.Addrs)}, nil
	})
	handle(s, srv, rpc.MethodLeave, func(r *rpc.LeaveRequest) (*rpc.LeaveResponse, error) {
		req := *r
		s.c.lastLeave = &req
		if l := s.c.answers.Leave; l != nil {
			out := *l
			return &out, nil
		}
		return &rpc.LeaveResponse{}, nil
	})
}

// members is the answer to Members.
func (c *fakeCluster) members() []rpc.Member {
	if ms := c.answers.Members; ms != nil {
		return slices.Clone(ms)
	}
	var out []rpc.Member
	for i, srv := range c.servers {
		role := "follower"
		if i == 0 {
			role = "leader"
		}
		out = append(out, rpc.Member{ID: srv.id, Group: "g1", Status: "alive", RPCAddr: srv.addr, RaftRole: role})
	}
	return out
}

// homeID returns the home node of every path (c.mu held).
func (c *fakeCluster) homeID() string {
	if c.home == "" {
		return c.servers[0].id
	}
	return c.home
}

// homeOf returns the home node of every path and its address as s
// answers it (c.mu held).
func (s *FakeServer) homeOf() (id, addr string) {
	id, addr = s.c.homeID(), s.addr
	for _, srv := range s.c.servers {
		if srv.id == id {
			addr = srv.addr
		}
	}
	return id, addr
}

func (s *FakeServer) stat(r *rpc.StatRequest) (*rpc.StatResponse, error) {
	in, err := s.c.get("stat", r.Path)
	if err != nil {
		return nil, err
	}
	_, addr := s.homeOf()
	return &rpc.StatResponse{Inode: in, HomeAddr: addr, Level: rpc.LevelL2, Hops: 1}, nil
}

func (s *FakeServer) lookup(r *rpc.LookupRequest) (*rpc.LookupResponse, error) {
	in, err := s.c.get("lookup", r.Path)
	if err != nil {
		return nil, err
	}
	_, addr := s.homeOf()
	return &rpc.LookupResponse{Path: in.Path, Home: in.Home, HomeAddr: addr, Type: in.Type, Level: rpc.LevelL1}, nil
}

func (s *FakeServer) mkdir(r *rpc.MkdirRequest) (*rpc.MkdirResponse, error) {
	if !r.Parents {
		in, err := s.c.add(r.Path, rpc.TypeDir, r.Mode, r.UID, r.GID)
		if err != nil {
			return nil, err
		}
		return &rpc.MkdirResponse{Inode: in, Created: []string{r.Path}}, nil
	}
	if err := checkPath(r.Path); err != nil {
		return nil, err
	}
	resp := &rpc.MkdirResponse{}
	p := ""
	for _, name := range strings.Split(strings.Trim(r.Path, "/"), "/") {
		p += "/" + name
		in, err := s.c.add(p, rpc.TypeDir, r.Mode, r.UID, r.GID)
		switch {
		case errors.Is(err, fs.ErrExist):
			if in, err = s.c.get("mkdir", p); err != nil {
				return nil, err
			}
			if in.Type != rpc.TypeDir {
				return nil, fmt.Errorf("mkdir %s: %w", p, rpc.ErrNotDir)
			}
		case err != nil:
			return nil, err
		default:
			resp.Created = append(resp.Created, p)
		}
		resp.Inode = in
	}
	return resp, nil
}

func (s *FakeServer) readDir(r *rpc.ReadDirRequest) (*rpc.ReadDirResponse, error) {
	in, err := s.c.get("readdir", r.Path)
	if err != nil {
		return nil, err
	}
	if in.Type != rpc.TypeDir {
		return nil, fmt.Errorf("readdir %s: %w", r.Path, rpc.ErrNotDir)
	}
	page := FakePageSize
	if r.Limit > 0 {
		page = min(page, r.Limit)
	}
	resp := &rpc.ReadDirResponse{}
	for _, k := range s.c.children(r.Path) {
		name := path.Base(k)
		if name <= r.After {
			continue
		}
		if len(resp.Entries) == page {
			resp.Next = resp.Entries[page-1].Name
			break
		}
		resp.Entries = append(resp.Entries, rpc.DirEntry{Name: name, Type: s.c.inodes[k].Type, Home: in.Home, ID: s.c.inodes[k].ID})
	}
	return resp, nil
}

func (s *FakeServer) setAttr(r *rpc.SetAttrRequest) (*rpc.SetAttrResponse, error) {
	in, err := s.c.get("setattr", r.Path)
	if err != nil {
		return nil, err
	}
	req := *r
	s.c.lastSetAttr = &req
	setIf(&in.Mode, r.Mode)
	setIf(&in.UID, r.UID)
	setIf(&in.GID, r.GID)
	setIf(&in.Size, r.Size)
	setIf(&in.Atime, r.Atime)
	setIf(&in.Mtime, r.Mtime)
	in.Version++
	s.c.inodes[r.Path] = in
	return &rpc.SetAttrResponse{Inode: in}, nil
}

// setIf sets *dst to *v unless v is nil.
func setIf[T any](dst, v *T) {
	if v != nil {
		*dst = *v
	}
}

func (s *FakeServer) rename(r *rpc.RenameRequest) (*rpc.RenameResponse, error) {
	req := *r
	s.c.lastRename = &req
	if _, err := s.c.get("rename", r.Src); err != nil {
		return nil, err
	}
	if _, err := s.c.get("rename", r.Dst); err == nil {
		return nil, &fs.PathError{Op: "rename", Path: r.Dst, Err: fs.ErrExist}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if _, err := s.c.get("rename", path.Dir(r.Dst)); err != nil {
		return nil, err
	}
	if strings.HasPrefix(r.Dst, r.Src+"/") {
		return nil, fmt.Errorf("rename %s into itself: %w", r.Src, fs.ErrInvalid)
	}
	var n int64
	for p, in := range s.c.inodes {
		if p != r.Src && !strings.HasPrefix(p, r.Src+"/") {
			continue
		}
		in.Path = r.Dst + strings.TrimPrefix(p, r.Src)
		delete(s.c.inodes, p)
		s.c.inodes[in.Path] = in
		if p != r.Src {
			n++
		}
	}
	return &rpc.RenameResponse{Rekeyed: n}, nil
}

// checkPath accepts absolute, clean paths.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return fmt.Errorf("path %q: %w", p, rpc.ErrInvalidPath)
	}
	return nil
}

// get returns the inode of p for operation op (c.mu held).
func (c *fakeCluster) get(op, p string) (rpc.Inode, error) {
	if err := checkPath(p); err != nil {
		return rpc.Inode{}, err
	}
	if c.down[p] {
		return rpc.Inode{}, fmt.Errorf("%s %s: home is down: %w", op, p, rpc.ErrUnavailable)
	}
	in, ok := c.inodes[p]
	if !ok {
		return rpc.Inode{}, &fs.PathError{Op: op, Path: p, Err: fs.ErrNotExist}
	}
	in.Home = c.homeID()
	return in, nil
}

// add creates p (c.mu held).
func (c *fakeCluster) add(p, typ string, mode, uid, gid uint32) (rpc.Inode, error) {
	if err := checkPath(p); err != nil {
		return rpc.Inode{}, err
	}
	if c.down[p] {
		return rpc.Inode{}, fmt.Errorf("create %s: home is down: %w", p, rpc.ErrUnavailable)
	}
	if _, ok := c.inodes[p]; ok {
		return rpc.Inode{}, &fs.PathError{Op: "create", Path: p, Err: fs.ErrExist}
	}
	dir := path.Dir(p)
	if parent, ok := c.inodes[dir]; !ok {
		return rpc.Inode{}, &fs.PathError{Op: "create", Path: dir, Err: fs.ErrNotExist}
	} else if parent.Type != rpc.TypeDir {
		return rpc.Inode{}, fmt.Errorf("create %s: %s: %w", p, dir, rpc.ErrNotDir)
	}
	in := newInode(p, typ, mode, uid, gid)
	in.ID = c.nextID
	c.nextID++
	c.inodes[p] = in
	in.Home = c.homeID()
	return in, nil
}

// children returns the sorted paths directly below dir (c.mu held).
func (c *fakeCluster) children(dir string) []string {
	var out []string
	for p := range c.inodes {
		if p != "/" && path.Dir(p) == dir {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
