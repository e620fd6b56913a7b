package client

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/ghba/ghba/rpc"
)

// Typed client methods. Each enters the cluster at a node chosen as
// follows and, through CallAny, moves to another node only when the first
// is unreachable (reads also when a connection broke after sending):
//   - Stat, Lookup, ReadDir, SetAttr: the cached home of the path;
//   - Create, Mkdir, Unlink, Rmdir, Rename: the cached home of the parent
//     directory (whose home decides and records the change);
//   - everything else, or when nothing is cached: a random node.
// Any node answers correctly; the cached home just saves hops. Homes are
// learned from replies (rpc.StatResponse.HomeAddr,
// rpc.LookupResponse.HomeAddr, and node ids resolved through addresses
// seen in Members and earlier replies).
// With Options.RouteRefresh, a path with no cached home goes to the node
// the shards' filters name (router.go).

// homeOf returns the node to send a request about p to: its cached home,
// else the one the shards' filters name, else "" (a random node).
func (c *Client) homeOf(p string) string {
	if a := c.homes.get(p); a != "" {
		return a
	}
	return c.router.route(p)
}

// dirHomeOf is homeOf for a change of directory dir's entries.
func (c *Client) dirHomeOf(dir string) string {
	if a := c.homes.getDir(dir); a != "" {
		return a
	}
	return c.router.route(dir)
}

// Stat returns the inode of p and the level and hops that resolved it;
// with Options.Cache, from the cache while its lease lasts (Level
// rpc.LevelCache), and so is an error matching fs.ErrNotExist for a path
// the cache holds as absent.
func (c *Client) Stat(ctx context.Context, p string) (*rpc.StatResponse, error) {
	if c.cache != nil {
		return c.cachedStat(ctx, p)
	}
	return c.statOnce(ctx, p, false)
}

// statOnce asks p's home (with a lease for the cache).
func (c *Client) statOnce(ctx context.Context, p string, lease bool) (*rpc.StatResponse, error) {
	resp := new(rpc.StatResponse)
	if err := c.callAny(ctx, c.homeOf(p), rpc.MethodStat, true, &rpc.StatRequest{Path: p, Lease: lease}, resp); err != nil {
		c.homes.forget(p)
		return nil, err
	}
	c.learn(p, resp.Home, resp.HomeAddr, resp.Type == rpc.TypeDir)
	return resp, nil
}

// Lookup returns the home of p and the level and hops that resolved it.
func (c *Client) Lookup(ctx context.Context, p string) (*rpc.LookupResponse, error) {
	resp := new(rpc.LookupResponse)
	if err := c.callAny(ctx, c.homeOf(p), rpc.MethodLookup, true, &rpc.LookupRequest{Path: p}, resp); err != nil {
		c.homes.forget(p)
		return nil, err
	}
	c.learn(p, resp.Home, resp.HomeAddr, resp.Type == rpc.TypeDir)
	return resp, nil
}

// BatchStat stats several paths, sending one request per cached home (and
// one to a random node for paths with no cached home), concurrently.
// Results are in the order of paths; a path's failure is in its result
// (rpc.BatchStatResult.Err). The error is non-nil only if every request
// failed.
func (c *Client) BatchStat(ctx context.Context, paths []string) (*rpc.BatchStatResponse, error) {
	return c.batchStat(ctx, paths, false, false)
}

// batchStat is BatchStat, with leases for the cache; with prefetch, the
// paths after the first of each home's request are a prefetch
// (rpc.BatchStatRequest.Prefetch: the node may skip them).
func (c *Client) batchStat(ctx context.Context, paths []string, lease, prefetch bool) (*rpc.BatchStatResponse, error) {
	out := &rpc.BatchStatResponse{Results: make([]rpc.BatchStatResult, len(paths))}
	if len(paths) == 0 {
		return out, nil
	}
	groups := make(map[string][]int)
	for i, p := range paths {
		h := c.homeOf(p)
		groups[h] = append(groups[h], i)
	}
	err := eachHome(groups, func(home string, idx []int) error {
		req := &rpc.BatchStatRequest{Paths: make([]string, len(idx)), Lease: lease, Prefetch: prefetch}
		for j, i := range idx {
			req.Paths[j] = paths[i]
		}
		resp := new(rpc.BatchStatResponse)
		err := c.callAny(ctx, home, rpc.MethodBatchStat, true, req, resp)
		if err == nil && len(resp.Results) != len(idx) {
			err = fmt.Errorf("rpc: %s: %w: %d results for %d paths", rpc.MethodBatchStat, rpc.ErrProtocol, len(resp.Results), len(idx))
		}
		if err != nil {
			for _, i := range idx {
				out.Results[i] = rpc.BatchStatError(err)
			}
			return err
		}
		for j, i := range idx {
			r := resp.Results[j]
			out.Results[i] = r
			switch {
			case r.Stat != nil:
				c.learn(paths[i], r.Stat.Home, r.Stat.HomeAddr, r.Stat.Type == rpc.TypeDir)
			case !r.Skipped:
				c.homes.forget(paths[i])
			}
		}
		return nil
	})
	return out, err
}

// dirChanged drops the cached inodes of dirs, whose entries this client
// just changed (or may have: the call's outcome may be unknown): their
// modification times and link counts moved, and the cluster does not
// revoke a lease on a directory for those (docs/design.md, "Directory
// times"), so without this a stat by the writer itself could show the
// directory from before its change.
func (c *Client) dirChanged(dirs ...string) {
	if c.cache == nil {
		return
	}
	keys := make([]string, len(dirs))
	for i, d := range dirs {
		keys[i] = cacheKey(d)
	}
	c.cache.forget(keys)
}

// Create creates a file.
func (c *Client) Create(ctx context.Context, req *rpc.CreateRequest) (*rpc.CreateResponse, error) {
	resp := new(rpc.CreateResponse)
	defer c.dirChanged(parent(req.Path))
	if err := c.callAny(ctx, c.dirHomeOf(parent(req.Path)), rpc.MethodCreate, false, req, resp); err != nil {
		return nil, err
	}
	c.learn(req.Path, resp.Inode.Home, resp.HomeAddr, false)
	return resp, nil
}

// BatchCreate creates several entries of one directory in one call
// (rpc.BatchCreateRequest); the call fails as a whole only when no entry
// could be tried (for example, the directory does not exist).
func (c *Client) BatchCreate(ctx context.Context, req *rpc.BatchCreateRequest) (*rpc.BatchCreateResponse, error) {
	resp := new(rpc.BatchCreateResponse)
	defer c.dirChanged(req.Dir)
	if err := c.callAny(ctx, c.dirHomeOf(req.Dir), rpc.MethodBatchCreate, false, req, resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(req.Entries) {
		return nil, fmt.Errorf("rpc: %s: %w: %d results for %d entries", rpc.MethodBatchCreate, rpc.ErrProtocol, len(resp.Results), len(req.Entries))
	}
	for _, r := range resp.Results {
		if r.Inode != nil {
			c.learn(r.Inode.Path, r.Inode.Home, resp.HomeAddrs[r.Inode.Home], r.Inode.Type == rpc.TypeDir)
		}
	}
	return resp, nil
}

// BatchCreateDirs creates the entries of several directories
// (rpc.BatchCreateDirsRequest): it sends one request per home that it
// knows for them, concurrently. A request that fails leaves its directories with
// its error; the call fails only when every request did.
func (c *Client) BatchCreateDirs(ctx context.Context, req *rpc.BatchCreateDirsRequest) (*rpc.BatchCreateDirsResponse, error) {
	out := &rpc.BatchCreateDirsResponse{Dirs: make([]rpc.BatchCreateDirResult, len(req.Dirs))}
	if len(req.Dirs) == 0 {
		return out, nil
	}
	groups := make(map[string][]int)
	dirs := make([]string, len(req.Dirs))
	for i := range req.Dirs {
		dirs[i] = req.Dirs[i].Dir
		h := c.dirHomeOf(dirs[i])
		groups[h] = append(groups[h], i)
	}
	// Their times change, as BatchCreate's directory's does.
	defer c.dirChanged(dirs...)
	var mu sync.Mutex // guards out.Hops
	err := eachHome(groups, func(home string, idx []int) error {
		r := &rpc.BatchCreateDirsRequest{Dirs: make([]rpc.BatchCreateRequest, len(idx))}
		for j, i := range idx {
			r.Dirs[j] = req.Dirs[i]
		}
		resp := new(rpc.BatchCreateDirsResponse)
		err := c.callAny(ctx, home, rpc.MethodBatchCreateDirs, false, r, resp)
		if err == nil {
			err = checkBatchCreateDirs(resp, r)
		}
		if err != nil {
			for _, i := range idx {
				out.Dirs[i] = rpc.BatchCreateDirResult{Code: rpc.ErrorCode(err), Message: err.Error()}
			}
			return err
		}
		mu.Lock()
		out.Hops += resp.Hops
		mu.Unlock()
		for j, i := range idx {
			out.Dirs[i] = resp.Dirs[j]
			for _, res := range resp.Dirs[j].Results {
				if res.Inode != nil {
					c.learn(res.Inode.Path, res.Inode.Home, resp.HomeAddrs[res.Inode.Home], res.Inode.Type == rpc.TypeDir)
				}
			}
		}
		return nil
	})
	return out, err
}

// eachHome calls ask for each home's share of a batched request, at once
// (in the caller's goroutine when there is one home). It returns the first
// error when every call failed, nil otherwise: a call that fails records
// its error in its share's results.
func eachHome(groups map[string][]int, ask func(home string, idx []int) error) error {
	if len(groups) == 1 {
		for home, idx := range groups {
			return ask(home, idx) // one home: no goroutine to start
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
		first  error
	)
	for home, idx := range groups {
		wg.Go(func() {
			if err := ask(home, idx); err != nil {
				mu.Lock()
				failed++
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed == len(groups) {
		return first
	}
	return nil
}

// checkBatchCreateDirs reports a response r that does not answer every
// directory and entry of req.
func checkBatchCreateDirs(r *rpc.BatchCreateDirsResponse, req *rpc.BatchCreateDirsRequest) error {
	if len(r.Dirs) != len(req.Dirs) {
		return fmt.Errorf("rpc: %s: %w: %d results for %d directories", rpc.MethodBatchCreateDirs, rpc.ErrProtocol, len(r.Dirs), len(req.Dirs))
	}
	for i := range r.Dirs {
		if r.Dirs[i].Code == rpc.CodeOK && len(r.Dirs[i].Results) != len(req.Dirs[i].Entries) {
			return fmt.Errorf("rpc: %s: %w: %d results for %d entries of %s", rpc.MethodBatchCreateDirs, rpc.ErrProtocol, len(r.Dirs[i].Results), len(req.Dirs[i].Entries), req.Dirs[i].Dir)
		}
	}
	return nil
}

// Find searches every shard in parallel for the inodes below req.Root that
// match req (its Shard, After and Limit are set here), page by page, and
// calls fn with each match and the stage that found it ("" without a
// Query or Text) as it arrives (one call at a time, in path order within
// a shard, or best first with Text, in no order across shards). A plain
// Query runs the application modules paper's three stages: the names
// (stages "exact" and "related", in one pass), then, once every shard
// has answered, the text (stage "text": rpc.FindRequest.Text with the
// query's words) for the paths the names did not find. It stops at fn's first
// error and returns it.
func (c *Client) Find(ctx context.Context, req rpc.FindRequest, fn func(in *rpc.Inode, stage string) error) error {
	shards, err := c.Shards(ctx)
	if err != nil {
		return err
	}
	if req.Query == "" || req.Text != "" {
		return c.findShards(ctx, shards, req, fn)
	}
	seen := make(map[string]bool)
	err = c.findShards(ctx, shards, req, func(in *rpc.Inode, stage string) error {
		seen[in.Path] = true
		return fn(in, stage)
	})
	if err != nil {
		return err
	}
	req.Text, req.Query = req.Query, ""
	return c.findShards(ctx, shards, req, func(in *rpc.Inode, stage string) error {
		if seen[in.Path] {
			return nil
		}
		return fn(in, stage)
	})
}

// findShards runs one search in every shard of shards in parallel, page
// by page (Find).
func (c *Client) findShards(ctx context.Context, shards *rpc.ShardsResponse, req rpc.FindRequest, fn func(in *rpc.Inode, stage string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
			cancel()
		}
	}
	for _, s := range shards.Shards {
		wg.Go(func() {
			r := req
			r.Shard, r.After, r.Limit = s.Shard, "", 0
			for {
				resp := new(rpc.FindResponse)
				if err := c.callAny(ctx, "", rpc.MethodFind, true, &r, resp); err != nil {
					fail(fmt.Errorf("find in shard %s: %w", s.Shard, err))
					return
				}
				mu.Lock()
				for i := range resp.Inodes {
					if first != nil {
						break
					}
					stage := ""
					if i < len(resp.Stages) {
						stage = resp.Stages[i]
					}
					if err := fn(&resp.Inodes[i], stage); err != nil {
						first = err
						cancel()
					}
				}
				stop := first != nil
				mu.Unlock()
				if stop || resp.Next == "" {
					return
				}
				r.After = resp.Next
			}
		})
	}
	wg.Wait()
	return first
}

// Mkdir creates a directory (and its parents with req.Parents, which also
// makes the call idempotent and so retryable after a broken connection).
func (c *Client) Mkdir(ctx context.Context, req *rpc.MkdirRequest) (*rpc.MkdirResponse, error) {
	resp := new(rpc.MkdirResponse)
	if req.Parents {
		defer c.dirChanged(ancestors(req.Path)...) // any may have got a subdirectory
	} else {
		defer c.dirChanged(parent(req.Path))
	}
	if err := c.callAny(ctx, c.dirHomeOf(parent(req.Path)), rpc.MethodMkdir, req.Parents, req, resp); err != nil {
		return nil, err
	}
	c.learn(req.Path, resp.Inode.Home, resp.HomeAddr, true)
	return resp, nil
}

// ReadDir returns one page of a directory listing (see rpc.ReadDirRequest).
func (c *Client) ReadDir(ctx context.Context, req *rpc.ReadDirRequest) (*rpc.ReadDirResponse, error) {
	resp := new(rpc.ReadDirResponse)
	if err := c.callAny(ctx, c.homeOf(req.Path), rpc.MethodReadDir, true, req, resp); err != nil {
		c.homes.forget(req.Path)
		return nil, err
	}
	for _, e := range resp.Entries {
		c.learn(path.Join(req.Path, e.Name), e.Home, resp.HomeAddrs[e.Home], e.Type == rpc.TypeDir)
	}
	if m := c.cache; m != nil {
		if ahead := m.listed(cacheKey(req.Path), resp.Entries); len(ahead) > 0 {
			c.prefetch(ahead, time.Now(), m.generation())
		}
	}
	return resp, nil
}

// ReadDirAll lists a whole directory, page by page (pageSize 0: the
// server's default).
func (c *Client) ReadDirAll(ctx context.Context, dir string, pageSize int) ([]rpc.DirEntry, error) {
	var all []rpc.DirEntry
	req := &rpc.ReadDirRequest{Path: dir, Limit: pageSize}
	for {
		resp, err := c.ReadDir(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, resp.Entries...)
		if resp.Next == "" {
			return all, nil
		}
		req.After = resp.Next
	}
}

// SetAttr changes attributes (nil fields of req are left alone). With
// req.IfVersion it changes them only if the inode's version is still that
// one, and fails with an error matching rpc.ErrVersionMismatch otherwise.
// The returned inode carries its new Version (for the next IfVersion).
func (c *Client) SetAttr(ctx context.Context, req *rpc.SetAttrRequest) (*rpc.SetAttrResponse, error) {
	resp := new(rpc.SetAttrResponse)
	if err := c.callAny(ctx, c.homeOf(req.Path), rpc.MethodSetAttr, false, req, resp); err != nil {
		return nil, err
	}
	c.learn(req.Path, resp.Inode.Home, "", resp.Inode.Type == rpc.TypeDir)
	return resp, nil
}

// Unlink removes a file.
func (c *Client) Unlink(ctx context.Context, p string) error {
	defer c.homes.forget(p)
	defer c.dirChanged(parent(p))
	return c.callAny(ctx, c.dirHomeOf(parent(p)), rpc.MethodUnlink, false, &rpc.UnlinkRequest{Path: p}, &rpc.UnlinkResponse{})
}

// Rmdir removes an empty directory.
func (c *Client) Rmdir(ctx context.Context, p string) error {
	defer c.homes.forget(p)
	defer c.dirChanged(parent(p))
	return c.callAny(ctx, c.dirHomeOf(parent(p)), rpc.MethodRmdir, false, &rpc.RmdirRequest{Path: p}, &rpc.RmdirResponse{})
}

// Rename renames src to dst (a file replaces a file at dst, a directory
// an empty directory).
func (c *Client) Rename(ctx context.Context, src, dst string) (*rpc.RenameResponse, error) {
	return c.RenameWith(ctx, &rpc.RenameRequest{Src: src, Dst: dst})
}

// RenameWith renames req.Src to req.Dst with req's options (NoReplace:
// fs.ErrExist if req.Dst exists).
func (c *Client) RenameWith(ctx context.Context, req *rpc.RenameRequest) (*rpc.RenameResponse, error) {
	defer c.homes.forget(req.Src)
	defer c.dirChanged(parent(req.Src), parent(req.Dst))
	resp := new(rpc.RenameResponse)
	if err := c.callAny(ctx, c.dirHomeOf(parent(req.Src)), rpc.MethodRename, false, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Link makes newPath another name of the file at oldPath (link(2)); the
// answer is the inode as newPath names it. A directory cannot be linked
// (fs.ErrPermission), and an existing newPath is fs.ErrExist.
func (c *Client) Link(ctx context.Context, oldPath, newPath string) (*rpc.Inode, error) {
	// The new name's directory changes, and so does the inode oldPath
	// names (its link count and ctime).
	defer c.dirChanged(parent(newPath), oldPath)
	resp := new(rpc.LinkResponse)
	if err := c.callAny(ctx, c.dirHomeOf(parent(newPath)), rpc.MethodLink, false, &rpc.LinkRequest{Old: oldPath, New: newPath}, resp); err != nil {
		return nil, err
	}
	return &resp.Inode, nil
}

// Hold holds the contents of the inodes ids, homed by shard shard, for
// as long as the returned lifetime (rpc.HoldRequest): renew it while the
// files stay open, or release it (release) once they are closed.
func (c *Client) Hold(ctx context.Context, shard string, ids []uint64, release bool) (time.Duration, error) {
	resp := new(rpc.HoldResponse)
	if err := c.callAny(ctx, c.shardAddr(shard), rpc.MethodHold, true, &rpc.HoldRequest{Shard: shard, IDs: ids, Release: release}, resp); err != nil {
		return 0, err
	}
	return time.Duration(resp.TTL), nil
}

// Members returns the cluster's members as seen by some node, and
// remembers their addresses for resolving home node ids.
func (c *Client) Members(ctx context.Context) (*rpc.MembersResponse, error) {
	resp := new(rpc.MembersResponse)
	if err := c.callAny(ctx, "", rpc.MethodMembers, true, &rpc.MembersRequest{}, resp); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.nodes == nil {
		c.nodes = make(map[string]string)
	}
	for _, m := range resp.Members {
		if m.RPCAddr != "" {
			c.nodes[m.ID] = m.RPCAddr
		}
	}
	c.mu.Unlock()
	return resp, nil
}

// Refresh replaces the client's addresses with those of the members whose
// status is "alive" (keeping the old ones if there are none).
func (c *Client) Refresh(ctx context.Context) error {
	resp, err := c.Members(ctx)
	if err != nil {
		return err
	}
	if addrs := resp.AliveAddrs(); len(addrs) > 0 {
		c.SetAddrs(addrs)
	}
	return nil
}

// Groups returns the cluster's groups.
func (c *Client) Groups(ctx context.Context) (*rpc.GroupsResponse, error) {
	resp := new(rpc.GroupsResponse)
	if err := c.callAny(ctx, "", rpc.MethodGroups, true, &rpc.GroupsRequest{}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Shards returns every shard of the cluster with its leader and replicas.
func (c *Client) Shards(ctx context.Context) (*rpc.ShardsResponse, error) {
	resp := new(rpc.ShardsResponse)
	if err := c.callAny(ctx, "", rpc.MethodShards, true, &rpc.ShardsRequest{}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Keyring runs a gossip keyring operation (rpc.KeyringList,
// rpc.KeyringInstall, rpc.KeyringUse, rpc.KeyringRemove) on every member,
// through any node. Only a list is retried on another node.
func (c *Client) Keyring(ctx context.Context, op, key string) (*rpc.KeyringResponse, error) {
	resp := new(rpc.KeyringResponse)
	if err := c.callAny(ctx, "", rpc.MethodKeyring, op == rpc.KeyringList, &rpc.KeyringRequest{Op: op, Key: key}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Status returns the status of the node at addr (any node if addr is "").
func (c *Client) Status(ctx context.Context, addr string) (*rpc.StatusResponse, error) {
	resp := new(rpc.StatusResponse)
	var err error
	if addr == "" {
		err = c.CallAny(ctx, "", rpc.MethodStatus, &rpc.StatusRequest{}, resp)
	} else {
		err = c.Call(ctx, addr, rpc.MethodStatus, &rpc.StatusRequest{}, resp)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Ping checks that the node at addr answers and returns its id.
func (c *Client) Ping(ctx context.Context, addr string) (string, error) {
	resp := new(rpc.PingResponse)
	if err := c.Call(ctx, addr, rpc.MethodPing, &rpc.PingRequest{}, resp); err != nil {
		return "", err
	}
	return resp.NodeID, nil
}

// Join asks the node at addr to join the cluster through the Serf
// addresses serfAddrs.
func (c *Client) Join(ctx context.Context, addr string, serfAddrs []string) (*rpc.JoinResponse, error) {
	resp := new(rpc.JoinResponse)
	if err := c.Call(ctx, addr, rpc.MethodJoin, &rpc.JoinRequest{Addrs: serfAddrs}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Leave asks the node at addr to leave the cluster gracefully; nodeID, if
// set, must be that node's id.
func (c *Client) Leave(ctx context.Context, addr, nodeID string) (*rpc.LeaveResponse, error) {
	resp := new(rpc.LeaveResponse)
	if err := c.Call(ctx, addr, rpc.MethodLeave, &rpc.LeaveRequest{NodeID: nodeID}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// learn caches p's home: addr if known, else the address of node id if the
// client has seen it. With neither, p is forgotten.
func (c *Client) learn(p, id, addr string, isDir bool) {
	if c.homes == nil {
		return
	}
	if addr != "" && id != "" {
		c.mu.Lock()
		if c.nodes == nil {
			c.nodes = make(map[string]string)
		}
		c.nodes[id] = addr
		c.mu.Unlock()
	} else if addr == "" && id != "" {
		c.mu.Lock()
		addr = c.nodes[id]
		c.mu.Unlock()
	}
	c.homes.put(p, addr, isDir)
}

// shardAddr returns the address of the node last seen serving shard id
// (shard and node ids coincide until nodes leave), or "" (any node, which
// forwards).
func (c *Client) shardAddr(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// parent returns the parent directory of an absolute path ("/" for "/").
func parent(p string) string { return path.Dir(p) }

// ancestors returns the directories above p, its parent first.
func ancestors(p string) []string {
	var out []string
	for d := parent(p); ; d = parent(d) {
		out = append(out, d)
		if d == "/" || d == "." {
			return out
		}
	}
}
