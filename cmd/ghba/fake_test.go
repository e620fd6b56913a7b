package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ghba/ghba/rpc"
)

// fakeCluster is a real rpc.Server on 127.0.0.1:0 whose handlers serve a
// tiny in-memory namespace and canned cluster answers, for testing the
// CLI's requests, output and exit codes.
type fakeCluster struct {
	addr string

	mu    sync.Mutex
	types map[string]string // path → rpc.TypeFile / rpc.TypeDir
	inode map[string]rpc.Inode
	calls map[string]int // method → count
	// down lists paths whose home is unavailable.
	down map[string]bool
	// lastSetAttr is the last SetAttr request.
	lastSetAttr rpc.SetAttrRequest
	joinAddrs   []string
	leaveNode   string
}

// pageSize of the fake's ReadDir, small to exercise paging.
const fakePageSize = 2

func startFake(t *testing.T) *fakeCluster {
	t.Helper()
	f := &fakeCluster{
		types: map[string]string{"/": rpc.TypeDir},
		inode: map[string]rpc.Inode{},
		calls: map[string]int{},
		down:  map[string]bool{},
	}
	s := rpc.NewServer(rpc.ServerOptions{})
	reg := func(method string) {
		f.mu.Lock()
		f.calls[method]++
		f.mu.Unlock()
	}
	rpc.Register(s, rpc.MethodStat, func(_ context.Context, r *rpc.StatRequest) (*rpc.StatResponse, error) {
		reg(rpc.MethodStat)
		in, err := f.get(r.Path)
		if err != nil {
			return nil, err
		}
		return &rpc.StatResponse{Inode: in, HomeAddr: f.addr, Level: rpc.LevelL2, Hops: 1}, nil
	})
	rpc.Register(s, rpc.MethodLookup, func(_ context.Context, r *rpc.LookupRequest) (*rpc.LookupResponse, error) {
		reg(rpc.MethodLookup)
		in, err := f.get(r.Path)
		if err != nil {
			return nil, err
		}
		return &rpc.LookupResponse{Path: in.Path, Home: in.Home, HomeAddr: f.addr, Type: in.Type, Level: rpc.LevelL1, Hops: 0}, nil
	})
	rpc.Register(s, rpc.MethodCreate, func(_ context.Context, r *rpc.CreateRequest) (*rpc.CreateResponse, error) {
		reg(rpc.MethodCreate)
		in, err := f.add(r.Path, rpc.TypeFile, r.Mode, r.UID, r.GID)
		if err != nil {
			return nil, err
		}
		return &rpc.CreateResponse{Inode: in, Hops: 1}, nil
	})
	rpc.Register(s, rpc.MethodMkdir, func(_ context.Context, r *rpc.MkdirRequest) (*rpc.MkdirResponse, error) {
		reg(rpc.MethodMkdir)
		if !r.Parents {
			in, err := f.add(r.Path, rpc.TypeDir, r.Mode, r.UID, r.GID)
			if err != nil {
				return nil, err
			}
			return &rpc.MkdirResponse{Inode: in, Created: []string{r.Path}}, nil
		}
		resp := &rpc.MkdirResponse{}
		p := ""
		for _, name := range strings.Split(strings.Trim(r.Path, "/"), "/") {
			p += "/" + name
			in, err := f.add(p, rpc.TypeDir, r.Mode, r.UID, r.GID)
			switch {
			case errors.Is(err, fs.ErrExist):
				if in, err = f.get(p); err != nil {
					return nil, err
				}
				if in.Type != rpc.TypeDir {
					return nil, fmt.Errorf("%s: %w", p, rpc.ErrNotDir)
				}
			case err != nil:
				return nil, err
			default:
				resp.Created = append(resp.Created, p)
			}
			resp.Inode = in
		}
		return resp, nil
	})
	rpc.Register(s, rpc.MethodReadDir, func(_ context.Context, r *rpc.ReadDirRequest) (*rpc.ReadDirResponse, error) {
		reg(rpc.MethodReadDir)
		in, err := f.get(r.Path)
		if err != nil {
			return nil, err
		}
		if in.Type != rpc.TypeDir {
			return nil, fmt.Errorf("readdir %s: %w", r.Path, rpc.ErrNotDir)
		}
		kids := f.children(r.Path)
		resp := &rpc.ReadDirResponse{}
		for _, k := range kids {
			name := path.Base(k)
			if name <= r.After {
				continue
			}
			if len(resp.Entries) == fakePageSize {
				resp.Next = resp.Entries[len(resp.Entries)-1].Name
				break
			}
			f.mu.Lock()
			resp.Entries = append(resp.Entries, rpc.DirEntry{Name: name, Type: f.types[k], Home: "node2"})
			f.mu.Unlock()
		}
		return resp, nil
	})
	rpc.Register(s, rpc.MethodSetAttr, func(_ context.Context, r *rpc.SetAttrRequest) (*rpc.SetAttrResponse, error) {
		reg(rpc.MethodSetAttr)
		in, err := f.get(r.Path)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.lastSetAttr = *r
		if r.Mode != nil {
			in.Mode = *r.Mode
		}
		if r.UID != nil {
			in.UID = *r.UID
		}
		if r.GID != nil {
			in.GID = *r.GID
		}
		f.inode[r.Path] = in
		return &rpc.SetAttrResponse{Inode: in}, nil
	})
	rpc.Register(s, rpc.MethodUnlink, func(_ context.Context, r *rpc.UnlinkRequest) (*rpc.UnlinkResponse, error) {
		reg(rpc.MethodUnlink)
		in, err := f.get(r.Path)
		if err != nil {
			return nil, err
		}
		if in.Type == rpc.TypeDir {
			return nil, fmt.Errorf("unlink %s: %w", r.Path, rpc.ErrIsDir)
		}
		f.remove(r.Path)
		return &rpc.UnlinkResponse{}, nil
	})
	rpc.Register(s, rpc.MethodRmdir, func(_ context.Context, r *rpc.RmdirRequest) (*rpc.RmdirResponse, error) {
		reg(rpc.MethodRmdir)
		in, err := f.get(r.Path)
		if err != nil {
			return nil, err
		}
		if in.Type != rpc.TypeDir {
			return nil, fmt.Errorf("rmdir %s: %w", r.Path, rpc.ErrNotDir)
		}
		if len(f.children(r.Path)) > 0 {
			return nil, fmt.Errorf("rmdir %s: %w", r.Path, rpc.ErrNotEmpty)
		}
		f.remove(r.Path)
		return &rpc.RmdirResponse{}, nil
	})
	rpc.Register(s, rpc.MethodRename, func(_ context.Context, r *rpc.RenameRequest) (*rpc.RenameResponse, error) {
		reg(rpc.MethodRename)
		if _, err := f.get(r.Src); err != nil {
			return nil, err
		}
		if _, err := f.get(r.Dst); err == nil {
			return nil, fmt.Errorf("rename: %s: %w", r.Dst, fs.ErrExist)
		}
		if _, err := f.get(path.Dir(r.Dst)); err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		var n int64
		for p, typ := range f.types {
			if p == r.Src || strings.HasPrefix(p, r.Src+"/") {
				np := r.Dst + strings.TrimPrefix(p, r.Src)
				in := f.inode[p]
				in.Path = np
				delete(f.types, p)
				delete(f.inode, p)
				f.types[np], f.inode[np] = typ, in
				if p != r.Src {
					n++
				}
			}
		}
		return &rpc.RenameResponse{Rekeyed: n}, nil
	})
	rpc.Register(s, rpc.MethodMembers, func(_ context.Context, _ *rpc.MembersRequest) (*rpc.MembersResponse, error) {
		reg(rpc.MethodMembers)
		return &rpc.MembersResponse{Members: []rpc.Member{
			{ID: "node1", Group: "g1", Status: "alive", RPCAddr: f.addr, RaftRole: "leader", Files: 10, ReplicasHeld: 0},
			{ID: "node2", Group: "g1", Status: "failed", RPCAddr: "127.0.0.1:1", RaftRole: "follower", Files: 7, ReplicasHeld: 2},
		}}, nil
	})
	rpc.Register(s, rpc.MethodGroups, func(_ context.Context, _ *rpc.GroupsRequest) (*rpc.GroupsResponse, error) {
		reg(rpc.MethodGroups)
		return &rpc.GroupsResponse{Groups: []rpc.GroupInfo{
			{Group: "g1", Members: []string{"node1", "node2"}, Leader: "node1", Replicas: map[string]int{"node1": 1, "node2": 2}},
			{Group: "g2"},
		}}, nil
	})
	rpc.Register(s, rpc.MethodJoin, func(_ context.Context, r *rpc.JoinRequest) (*rpc.JoinResponse, error) {
		reg(rpc.MethodJoin)
		f.mu.Lock()
		f.joinAddrs = r.Addrs
		f.mu.Unlock()
		return &rpc.JoinResponse{Joined: len(r.Addrs)}, nil
	})
	rpc.Register(s, rpc.MethodLeave, func(_ context.Context, r *rpc.LeaveRequest) (*rpc.LeaveResponse, error) {
		reg(rpc.MethodLeave)
		f.mu.Lock()
		f.leaveNode = r.NodeID
		f.mu.Unlock()
		return &rpc.LeaveResponse{DrainedFiles: 12, HandedReplicas: 3}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	go s.Serve(context.Background(), ln)
	t.Cleanup(func() { s.Close() })
	return f
}

func (f *fakeCluster) get(p string) (rpc.Inode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[p] {
		return rpc.Inode{}, fmt.Errorf("%s: home node3 is down: %w", p, rpc.ErrUnavailable)
	}
	typ, ok := f.types[p]
	if !ok {
		return rpc.Inode{}, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	in, ok := f.inode[p]
	if !ok {
		in = rpc.Inode{Path: p, Type: typ, Mode: 0o755, Home: "node1"}
	}
	return in, nil
}

func (f *fakeCluster) add(p, typ string, mode, uid, gid uint32) (rpc.Inode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[p] {
		return rpc.Inode{}, fmt.Errorf("%s: %w", p, rpc.ErrUnavailable)
	}
	if _, ok := f.types[p]; ok {
		return rpc.Inode{}, &fs.PathError{Op: "create", Path: p, Err: fs.ErrExist}
	}
	if pt, ok := f.types[path.Dir(p)]; !ok {
		return rpc.Inode{}, &fs.PathError{Op: "create", Path: path.Dir(p), Err: fs.ErrNotExist}
	} else if pt != rpc.TypeDir {
		return rpc.Inode{}, fmt.Errorf("%s: %w", path.Dir(p), rpc.ErrNotDir)
	}
	in := rpc.Inode{Path: p, Type: typ, Mode: mode, UID: uid, GID: gid, Size: 0,
		Mtime: 1_700_000_000_123_456_789, Nlink: 1, Version: 1, Home: "node2"}
	f.types[p], f.inode[p] = typ, in
	return in, nil
}

// set adds p of type typ with default attributes.
func (f *fakeCluster) set(p, typ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.types[p] = typ
}

func (f *fakeCluster) remove(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.types, p)
	delete(f.inode, p)
}

// children returns the sorted paths directly below dir.
func (f *fakeCluster) children(dir string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for p := range f.types {
		if p != "/" && path.Dir(p) == dir {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// paths returns every path, sorted.
func (f *fakeCluster) paths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for p := range f.types {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// runCLI runs "ghba args..." in process and returns stdout, stderr and the
// exit code main would use.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		fmt.Fprintln(&errOut, "ghba:", err)
	}
	return out.String(), errOut.String(), exitCode(err)
}
