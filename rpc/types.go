package rpc

import (
	"io/fs"
	"time"
)

// Method names of the client API. Requests name their method as a string on
// the wire; the server dispatches on it. The servers' own protocol between
// each other is not here: it is in node/namespace/wire.go and node/wire.go.
const (
	MethodStat      = "Namespace.Stat"      // StatRequest → StatResponse
	MethodLookup    = "Namespace.Lookup"    // LookupRequest → LookupResponse
	MethodBatchStat = "Namespace.BatchStat" // BatchStatRequest → BatchStatResponse
	MethodCreate    = "Namespace.Create"    // CreateRequest → CreateResponse
	// MethodBatchCreate: BatchCreateRequest → BatchCreateResponse.
	MethodBatchCreate = "Namespace.BatchCreate"
	// MethodBatchCreateDirs: BatchCreateDirsRequest → BatchCreateDirsResponse.
	MethodBatchCreateDirs = "Namespace.BatchCreateDirs"
	// MethodFind: FindRequest → FindResponse (one page of one shard).
	MethodFind    = "Namespace.Find"
	MethodMkdir   = "Namespace.Mkdir"   // MkdirRequest → MkdirResponse
	MethodReadDir = "Namespace.ReadDir" // ReadDirRequest → ReadDirResponse
	MethodSetAttr = "Namespace.SetAttr" // SetAttrRequest → SetAttrResponse
	MethodUnlink  = "Namespace.Unlink"  // UnlinkRequest → UnlinkResponse
	MethodRmdir   = "Namespace.Rmdir"   // RmdirRequest → RmdirResponse
	MethodRename  = "Namespace.Rename"  // RenameRequest → RenameResponse
	MethodLink    = "Namespace.Link"    // LinkRequest → LinkResponse
	MethodHold    = "Namespace.Hold"    // HoldRequest → HoldResponse
	MethodFilters = "Namespace.Filters" // FiltersRequest → FiltersResponse

	MethodDataStoreGet = "DataStore.Get" // DataStoreGetRequest → DataStoreResponse
	MethodDataStoreSet = "DataStore.Set" // DataStoreSetRequest → DataStoreResponse

	MethodSourcePut      = "Sources.Put"      // SourcePutRequest → SourcePutResponse
	MethodSourceList     = "Sources.List"     // SourceListRequest → SourceListResponse
	MethodSourceRemove   = "Sources.Remove"   // SourceRemoveRequest → SourceRemoveResponse
	MethodSourceDiscover = "Sources.Discover" // SourceDiscoverRequest → SourceDiscoverResponse

	MethodMembers = "Cluster.Members" // MembersRequest → MembersResponse
	MethodGroups  = "Cluster.Groups"  // GroupsRequest → GroupsResponse
	MethodJoin    = "Cluster.Join"    // JoinRequest → JoinResponse
	MethodLeave   = "Cluster.Leave"   // LeaveRequest → LeaveResponse
	MethodStatus  = "Cluster.Status"  // StatusRequest → StatusResponse
	MethodPing    = "Cluster.Ping"    // PingRequest → PingResponse
	MethodShards  = "Cluster.Shards"  // ShardsRequest → ShardsResponse
	MethodKeyring = "Cluster.Keyring" // KeyringRequest → KeyringResponse
)

// Idempotent reports whether executing method twice has the same effect as
// executing it once. A client (package rpc/client, CallAny) retries only
// idempotent methods on another node after a request may have reached a
// node whose answer was lost; everything else is retried only when the
// request certainly was not executed (dial failure, refused by a
// shutting-down server).
func Idempotent(method string) bool {
	switch method {
	case MethodStat, MethodLookup, MethodBatchStat, MethodReadDir, MethodFilters, MethodHold,
		MethodMembers, MethodGroups, MethodStatus, MethodPing, MethodShards, MethodDataStoreGet:
		return true
	}
	return false
}

// File types in Inode.Type and DirEntry.Type.
const (
	TypeFile = "file"
	TypeDir  = "dir"
	// TypeSymlink is a symbolic link (Inode.Target). The service keeps
	// links as metadata: a path is never resolved through one.
	TypeSymlink = "symlink"
	// The special files (CreateRequest.Type): a named pipe, a socket, a
	// character and a block device (Inode.Rdev). The service keeps their
	// metadata; what they do is up to the kernel of the machine that opens
	// them, as with any file system.
	TypeFIFO     = "fifo"
	TypeSocket   = "socket"
	TypeCharDev  = "char"
	TypeBlockDev = "block"
)

// SpecialType reports whether t is a special file type (TypeFIFO,
// TypeSocket, TypeCharDev or TypeBlockDev).
func SpecialType(t string) bool {
	return t == TypeFIFO || t == TypeSocket || t == TypeCharDev || t == TypeBlockDev
}

// Lookup levels reported in replies: which step of the G-HBA query path
// (docs/design.md, "Query path") resolved the path.
const (
	LevelL1 = "L1" // the L1 array (LRU filters) had exactly one hit
	LevelL2 = "L2" // the entry node's segment array had exactly one hit
	LevelL3 = "L3" // the group multicast found exactly one positive
	LevelL4 = "L4" // the authoritative step (parent's home or broadcast)
	// LevelCache is the level of an answer from a client's metadata cache
	// (client.CacheOptions, package rpc/client): no node was asked.
	LevelCache = "cache"
)

// Inode is the metadata of one file or directory, as stored at its home.
type Inode struct {
	// Path is the normalized absolute path.
	Path string `json:"path"`
	// Type is TypeFile, TypeDir, TypeSymlink or a special file type
	// (SpecialType).
	Type string `json:"type"`
	// Mode holds the permission bits (0o7777: rwx for user, group, other,
	// plus setuid, setgid and sticky), as in chmod.
	Mode uint32 `json:"mode"`
	// UID is the owner's user id.
	UID uint32 `json:"uid"`
	// GID is the owner's group id.
	GID uint32 `json:"gid"`
	// Size is the file size in bytes (0 for directories).
	Size int64 `json:"size"`
	// Atime is the access time in Unix nanoseconds.
	Atime int64 `json:"atime"`
	// Mtime is the modification time in Unix nanoseconds.
	Mtime int64 `json:"mtime"`
	// Ctime is the inode change time in Unix nanoseconds.
	Ctime int64 `json:"ctime"`
	// Nlink is the link count.
	Nlink uint32 `json:"nlink"`
	// Version increases with every change of the inode.
	Version uint64 `json:"version"`
	// Home is the shard that homes the path (named after the node that
	// created it; see LookupResponse.Leader for the node serving it).
	Home string `json:"home"`
	// Layout is an opaque data-layout blob kept for the data servers.
	Layout []byte `json:"layout,omitempty"`
	// Target is a symbolic link's target (TypeSymlink only).
	Target string `json:"target,omitempty"`
	// Rdev is a device's number (TypeCharDev and TypeBlockDev only), in
	// Linux's encoding (unix.Mkdev).
	Rdev uint64 `json:"rdev,omitempty"`
	// HasText reports that the file has a text in the full-text index
	// (CreateRequest.Text); the text itself is not returned.
	HasText bool `json:"has_text,omitempty"`
	// Text is the text of a file being created, as nodes pass it to the
	// file's home; responses leave it out (HasText).
	Text string `json:"text,omitempty"`
	// Ancestors are the inode's ancestor permission codes (HBA §4.2.2):
	// the search permission of every ancestor directory that does not
	// grant search to everyone, by increasing depth. The server checks
	// them on every access with ACLs on.
	Ancestors []AncestorCode `json:"ancestors,omitempty"`
	// ID is the inode's cluster-unique id: given when the inode is
	// created, never changed (a rename keeps it), never given to another
	// inode; "/" has 1. 0 only for an inode created before ids existed
	// that its shard's leader has not numbered yet (docs/design.md,
	// "Inode ids").
	ID uint64 `json:"id,omitempty"`
	// Xattrs are the inode's extended attributes, sorted by name
	// (docs/design.md, "Extended attributes"). Every client that may
	// stat the inode reads them all; the mount shows "trusted." ones to
	// root only, as Linux does.
	Xattrs []Xattr `json:"xattrs,omitempty"`
	// Anchor, for a file with several names (hard links), is the shard
	// that keeps its record: its attributes and the trash of its contents
	// (Hold it there). Empty for an inode with one name.
	Anchor string `json:"anchor,omitempty"`
}

// Xattr is one extended attribute of an inode: its full name, namespace
// included ("user.mime_type"), and its value (empty is a value).
type Xattr struct {
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

// XattrChange sets or removes one extended attribute (SetAttrRequest.Xattr),
// as setxattr(2) and removexattr(2).
type XattrChange struct {
	// Name is the attribute's full name; its namespace must be "user.",
	// "trusted." or "security." (fs.ErrInvalid otherwise, as
	// errors.ErrUnsupported for "system.").
	Name string `json:"name"`
	// Value is the new value (Remove unset).
	Value []byte `json:"value,omitempty"`
	// Remove removes the attribute: ErrNoAttr when it is not there.
	Remove bool `json:"remove,omitempty"`
	// Create fails with fs.ErrExist when the attribute exists
	// (XATTR_CREATE); Replace fails with ErrNoAttr when it does not
	// (XATTR_REPLACE).
	Create  bool `json:"create,omitempty"`
	Replace bool `json:"replace,omitempty"`
}

// AncestorCode is the search permission an ancestor directory gives its
// descendants: its depth (0 for "/", 1 for "/a"), execute bits (mode &
// 0o111) and owner.
type AncestorCode struct {
	Depth uint32 `json:"depth"`
	Mode  uint32 `json:"mode"`
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
}

// IsDir reports whether the inode is a directory.
func (in *Inode) IsDir() bool { return in.Type == TypeDir }

// FileMode returns the type and permission bits as an fs.FileMode.
func (in *Inode) FileMode() fs.FileMode {
	m := fs.FileMode(in.Mode & 0o777)
	if in.Mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if in.Mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if in.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch in.Type {
	case TypeDir:
		m |= fs.ModeDir
	case TypeSymlink:
		m |= fs.ModeSymlink
	case TypeFIFO:
		m |= fs.ModeNamedPipe
	case TypeSocket:
		m |= fs.ModeSocket
	case TypeCharDev:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case TypeBlockDev:
		m |= fs.ModeDevice
	}
	return m
}

// TypeOfMode returns the inode type of the type bits of m (as os.Lstat
// reports them), or "" for a type the cluster has none of.
func TypeOfMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return TypeDir
	case m.IsRegular():
		return TypeFile
	case m&fs.ModeSymlink != 0:
		return TypeSymlink
	case m&fs.ModeNamedPipe != 0:
		return TypeFIFO
	case m&fs.ModeSocket != 0:
		return TypeSocket
	case m&fs.ModeCharDevice != 0:
		return TypeCharDev
	case m&fs.ModeDevice != 0:
		return TypeBlockDev
	}
	return ""
}

// ModTime returns Mtime as a time.Time.
func (in *Inode) ModTime() time.Time { return time.Unix(0, in.Mtime) }

// ---- Namespace (client-facing) ----

// StatRequest asks for the inode of Path.
type StatRequest struct {
	// Path is the absolute path to stat.
	Path string `json:"path"`
	// Lease asks for a cache lease (StatResponse.Lease): only a client
	// that handles invalidations (client.Options.OnInvalidate) may ask.
	Lease bool `json:"lease,omitempty"`
}

// StatResponse is the inode of the path and how it was found. Inode's
// fields are flattened into the JSON object.
type StatResponse struct {
	Inode
	// HomeAddr is the RPC address of the node leading the home shard (for
	// the client's home cache); may be empty.
	HomeAddr string `json:"home_addr,omitempty"`
	// Level is the lookup level that resolved the path (LevelL1..LevelL4).
	Level string `json:"level"`
	// Hops is the number of server-to-server RPCs the lookup took.
	Hops int `json:"hops"`
	// Lease, when not 0, is the length in nanoseconds of the lease the
	// node granted on the path (StatRequest.Lease): until it ends,
	// measured from when the client sent the request, the node notifies
	// the client before any change of the inode is applied, so the client
	// may answer stats of the path from its cache.
	Lease int64 `json:"lease,omitempty"`
}

// FiltersRequest asks a node for the local Bloom filters of the shards it
// leads, for a client that routes by them (client.Options.RouteRefresh).
type FiltersRequest struct {
	// Have lists the filters the client holds: a shard whose filter is
	// still at that term and version is answered Unchanged, without its
	// bits.
	Have []FilterVersion `json:"have,omitempty"`
}

// FilterVersion names one version of a shard's filter: versions count
// afresh with each leadership, so the Raft term of the leadership is part
// of it.
type FilterVersion struct {
	Shard   string `json:"shard"`
	Term    uint64 `json:"term"`
	Version uint64 `json:"version"`
}

// FiltersResponse carries the filters of the shards the answering node
// leads, sorted by shard.
type FiltersResponse struct {
	// NodeID is the answering node.
	NodeID  string        `json:"node_id"`
	Filters []ShardFilter `json:"filters"`
}

// ShardFilter is a shard's local filter (the paths it homes, HBA §3) as
// its leader holds it.
type ShardFilter struct {
	FilterVersion
	// Unchanged: the client's copy, named in the request, is current;
	// Data is empty.
	Unchanged bool `json:"unchanged,omitempty"`
	// Data is the filter in the routing package's full encoding
	// (routing.DecodeFilter).
	Data Bytes `json:"data,omitempty"`
}

// LookupRequest asks which node is the home of Path.
type LookupRequest struct {
	// Path is the absolute path to look up.
	Path string `json:"path"`
}

// LookupResponse names the home of a path and how it was found.
type LookupResponse struct {
	// Path is the normalized path looked up.
	Path string `json:"path"`
	// Home is the shard that homes the path. A shard is named after the
	// node that created it; it keeps its name when its leader changes.
	Home string `json:"home"`
	// Leader is the node that leads the home shard now ("" while unknown).
	Leader string `json:"leader,omitempty"`
	// HomeAddr is the leader's RPC address; may be empty.
	HomeAddr string `json:"home_addr,omitempty"`
	// Type is TypeFile, TypeDir, TypeSymlink or a special file type
	// (SpecialType).
	Type string `json:"type,omitempty"`
	// Level is the lookup level that resolved the path (LevelL1..LevelL4).
	Level string `json:"level"`
	// Hops is the number of server-to-server RPCs the lookup took.
	Hops int `json:"hops"`
}

// BatchStatRequest asks for the inodes of several paths in one call (used
// by the prefetching client).
type BatchStatRequest struct {
	// Paths are the absolute paths to stat.
	Paths []string `json:"paths"`
	// Lease asks for a cache lease on each path (StatRequest.Lease).
	Lease bool `json:"lease,omitempty"`
	// Prefetch marks the paths after the first as a cache's prefetch
	// group: the node answers them only where that takes no round trip to
	// another node (from the shards it leads) and marks the others
	// Skipped, so that the missed first path is not held up by lookups of
	// paths the client only guessed it would need.
	Prefetch bool `json:"prefetch,omitempty"`
}

// BatchStatResponse holds one result per requested path, in request order.
type BatchStatResponse struct {
	// Results[i] answers Paths[i].
	Results []BatchStatResult `json:"results"`
}

// BatchStatResult is the answer for one path of a batch: either Stat or an
// error code and message.
type BatchStatResult struct {
	// Stat is the answer when Code is CodeOK.
	Stat *StatResponse `json:"stat,omitempty"`
	// Code is the error code for this path (CodeOK on success).
	Code Code `json:"code,omitempty"`
	// Message is the error text when Code is not CodeOK.
	Message string `json:"message,omitempty"`
	// Skipped: a prefetched path (BatchStatRequest.Prefetch) the node did
	// not look up; neither Stat nor an error.
	Skipped bool `json:"skipped,omitempty"`
	// Lease, when Code is CodeNotExist and the request asked for leases,
	// is the length in nanoseconds of a lease on the path's absence,
	// granted by the node that leads the shard of the path's parent
	// directory: until it ends, measured as StatResponse.Lease, the node
	// notifies the client before the name is created.
	Lease int64 `json:"lease,omitempty"`
}

// Err returns the result's error (matching errors.Is like a call's error),
// or nil.
func (r *BatchStatResult) Err() error { return r.Code.Err(r.Message) }

// BatchStatError builds the BatchStatResult for a failed path from a Go
// error, mapping it the same way the server maps handler errors.
func BatchStatError(err error) BatchStatResult {
	return BatchStatResult{Code: ErrorCode(err), Message: err.Error()}
}

// CreateRequest creates a regular file (or a symbolic link, or a special
// file). It fails with fs.ErrExist if the name exists and with
// fs.ErrNotExist if the parent does not.
type CreateRequest struct {
	// Path is the absolute path of the new file.
	Path string `json:"path"`
	// Type is "" or TypeFile for a regular file (TypeSymlink with
	// Symlink), or a special file type (SpecialType). A special file needs
	// every member of the cluster to speak shard log format 3; until then
	// its create fails with ErrUnsupported.
	Type string `json:"type,omitempty"`
	// Rdev is the device number of a TypeCharDev or TypeBlockDev.
	Rdev uint64 `json:"rdev,omitempty"`
	// Mode is the permission bits (0o7777).
	Mode uint32 `json:"mode"`
	// UID is the owner's user id.
	UID uint32 `json:"uid"`
	// GID is the owner's group id.
	GID uint32 `json:"gid"`
	// Layout is an optional opaque layout blob.
	Layout []byte `json:"layout,omitempty"`
	// Symlink, when set, makes the new inode a symbolic link to this
	// target (at most 4,096 bytes, kept verbatim) instead of a regular
	// file; its size is the target's length.
	Symlink string `json:"symlink,omitempty"`
	// Size is a regular file's initial size in bytes (default 0), as when
	// a file's metadata is imported from another file system.
	Size int64 `json:"size,omitempty"`
	// Atime and Mtime are the initial access and modification times,
	// Unix nanoseconds (0: the time of the create).
	Atime int64 `json:"atime,omitempty"`
	Mtime int64 `json:"mtime,omitempty"`
	// Text is the start of a regular file's content for the full-text
	// index (FindRequest.Text): valid UTF-8, at most MaxTextLen bytes.
	Text string `json:"text,omitempty"`
	// AsGiven creates the inode with Mode, UID and GID exactly as given,
	// as an import does. Otherwise a parent directory with the setgid bit
	// gives the new inode its group instead of GID, as Linux does (and a
	// new directory the bit: MkdirRequest.AsGiven).
	AsGiven bool `json:"as_given,omitempty"`
}

// MaxTextLen bounds the text of a file (CreateRequest.Text).
const MaxTextLen = 64 << 10

// FindRequest asks one shard for a page of the inodes below Root that
// match every condition set (client.Client.Find asks every shard).
type FindRequest struct {
	// Shard is the shard to search (its leader answers).
	Shard string `json:"shard"`
	// Root is the directory searched, itself included ("/" for all).
	Root string `json:"root"`
	// Name is a glob on the base name (path.Match syntax, as find -name).
	Name string `json:"name,omitempty"`
	// Regex is an RE2 regular expression matched against the whole path.
	Regex string `json:"regex,omitempty"`
	// Query is a plain query: a base name that equals it matches at stage
	// "exact", a related one at stage "related" (package search);
	// FindResponse.Stages says which.
	Query string `json:"query,omitempty"`
	// Text holds words that the file's indexed text must all contain
	// (the full-text index: CreateRequest.Text), matched as the index's
	// analyzer splits them (Unicode words, any case; very common English
	// words are ignored). Matches are ranked best first within a shard
	// and carry the stage "text"; After is then a position, not a path.
	Text string `json:"text,omitempty"`
	// Type is "", TypeFile, TypeDir, TypeSymlink or a special file type.
	Type string `json:"type,omitempty"`
	// MinSize and MaxSize bound the size in bytes, inclusive (nil: none).
	MinSize *int64 `json:"min_size,omitempty"`
	MaxSize *int64 `json:"max_size,omitempty"`
	// MinMtime and MaxMtime bound the modification time, Unix
	// nanoseconds, inclusive (nil: none).
	MinMtime *int64 `json:"min_mtime,omitempty"`
	MaxMtime *int64 `json:"max_mtime,omitempty"`
	// After is the cursor of the previous page (FindResponse.Next).
	After string `json:"after,omitempty"`
	// Limit bounds the results of the page (default and maximum
	// MaxFindPage).
	Limit int `json:"limit,omitempty"`
}

// MaxFindPage bounds the results of one FindResponse.
const MaxFindPage = 1000

// FindResponse is one page of a shard's matches, in path order.
type FindResponse struct {
	// Inodes are the matches.
	Inodes []Inode `json:"inodes"`
	// Stages[i] is the stage that found Inodes[i] (with a Query only).
	Stages []string `json:"stages,omitempty"`
	// Next is the cursor of the next page; "" when the shard is done.
	Next string `json:"next,omitempty"`
	// Scanned is the number of inodes the page looked at.
	Scanned int `json:"scanned"`
}

// Source is a directory tree registered for "ghba scan" (the application
// modules paper's shared folders on network computers): the machine whose
// "ghba scan" imports it, where, how often, and what the last scan did.
type Source struct {
	// Name identifies the source ([A-Za-z0-9._-], at most 64 bytes).
	Name string `json:"name"`
	// Machine is the host name of the machine that scans it.
	Machine string `json:"machine"`
	// Dir is the tree's absolute path on that machine.
	Dir string `json:"dir"`
	// Dest is the namespace directory that mirrors it.
	Dest string `json:"dest"`
	// Every is the time between scans (a Go duration, e.g. "10m").
	Every string `json:"every"`
	// Content is the bytes of each text file indexed for search by text
	// (0: none; fsimport.Options.Content).
	Content int `json:"content,omitempty"`
	// LastScan is when the last scan ended, Unix nanoseconds (0: never).
	LastScan int64 `json:"last_scan,omitempty"`
	// LastDuration is how long it took (a Go duration).
	LastDuration string `json:"last_duration,omitempty"`
	// Entries counts the source's entries at the last scan; Created,
	// Updated, Deleted, Skipped and Errors what it changed and failed.
	Entries int64 `json:"entries"`
	Created int64 `json:"created"`
	Updated int64 `json:"updated"`
	Deleted int64 `json:"deleted"`
	Skipped int64 `json:"skipped"`
	Errors  int64 `json:"errors"`
	// LastError is the last scan's first error ("" when none).
	LastError string `json:"last_error,omitempty"`
}

// DataStore is the cluster's record of the object store that holds file
// contents (package node/contents): the blocks of the files of `ghba
// mount`, and the objects the servers' garbage collection deletes.
type DataStore struct {
	// URL is the store's URL: file:///DIR or s3://BUCKET?... (see
	// node/contents.Open). Empty when none is set.
	URL string `json:"url"`
	// Set is when it was set, Unix nanoseconds (0: never).
	Set int64 `json:"set,omitempty"`
}

// DataStoreGetRequest asks for the cluster's data store record.
type DataStoreGetRequest struct{}

// DataStoreSetRequest sets the cluster's data store.
type DataStoreSetRequest struct {
	// URL is the new store's URL: scheme file or s3.
	URL string `json:"url"`
	// Force replaces a different URL already set: the contents in the
	// old store are no longer found (the files keep layouts that name
	// objects of the old store). Without it that is refused with
	// fs.ErrExist.
	Force bool `json:"force,omitempty"`
	// NoCheck skips the check (node/contents.Store.Check: write, read
	// back and delete a probe object) that the node serving the request
	// runs before recording the URL.
	NoCheck bool `json:"no_check,omitempty"`
}

// DataStoreResponse is the record after the call; DataStore's fields
// are flattened into the JSON object.
type DataStoreResponse struct {
	DataStore
	// Changed reports that a Set changed the record (false: the same
	// URL was set already).
	Changed bool `json:"changed,omitempty"`
}

// SourcePutRequest registers a source or replaces its record.
type SourcePutRequest struct {
	Source Source `json:"source"`
	// Create fails with fs.ErrExist if the name is registered.
	Create bool `json:"create,omitempty"`
}

// SourcePutResponse is the stored record.
type SourcePutResponse struct {
	Source Source `json:"source"`
}

// SourceListRequest asks for every registered source.
type SourceListRequest struct{}

// SourceListResponse lists the sources by name.
type SourceListResponse struct {
	Sources []Source `json:"sources"`
}

// SourceDiscoverRequest asks for the machines that announce shared
// folders ("ghba share-agent").
type SourceDiscoverRequest struct{}

// SourceDiscoverResponse lists the share agents the answering node's
// gossip knows, by machine name.
type SourceDiscoverResponse struct {
	Machines []DiscoveredMachine `json:"machines"`
}

// DiscoveredMachine is a machine whose share agent announces folders.
type DiscoveredMachine struct {
	// Machine is its name, as the sources adopted from it carry.
	Machine string `json:"machine"`
	// Addr is its agent's gossip address (host:port).
	Addr string `json:"addr"`
	// Status is "alive", "leaving" or "failed" (not reachable now).
	Status string `json:"status"`
	// Shares are its shared folders, by name.
	Shares []DiscoveredShare `json:"shares"`
}

// DiscoveredShare is one folder a machine shares.
type DiscoveredShare struct {
	Name string `json:"name"`
	// Dir is its absolute path on the machine.
	Dir string `json:"dir"`
	// Source is the source it is adopted as ("" until it is).
	Source string `json:"source,omitempty"`
}

// SourceRemoveRequest removes a source's registration (not what was
// imported).
type SourceRemoveRequest struct {
	Name string `json:"name"`
}

// SourceRemoveResponse is empty.
type SourceRemoveResponse struct{}

// MaxBatchCreate bounds the entries of one BatchCreateRequest, and of all
// the directories of one BatchCreateDirsRequest.
const MaxBatchCreate = 1000

// BatchCreateRequest creates several entries of one directory in one call
// (what an import does). The directory's home checks the directory once
// and applies the children it homes itself in one replicated log entry;
// each child placed on another shard is created as Create would. Each
// entry succeeds or fails on its own (an existing name: fs.ErrExist).
// Entries get their mode and group as given, whatever the directory's
// setgid bit (CreateRequest.AsGiven).
type BatchCreateRequest struct {
	// Dir is the absolute path of the parent directory.
	Dir string `json:"dir"`
	// Entries are the children to create (at most MaxBatchCreate, names
	// distinct).
	Entries []BatchCreateEntry `json:"entries"`
}

// BatchCreateEntry is one child of a BatchCreateRequest.
type BatchCreateEntry struct {
	// Name is the child's name (one path component).
	Name string `json:"name"`
	// Type is TypeFile, TypeDir, TypeSymlink or a special file type
	// (SpecialType, as in CreateRequest.Type).
	Type string `json:"type"`
	// Mode, UID and GID as in CreateRequest.
	Mode uint32 `json:"mode"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	// Size, Atime, Mtime and Symlink (the target, for TypeSymlink) as in
	// CreateRequest.
	Size    int64  `json:"size,omitempty"`
	Atime   int64  `json:"atime,omitempty"`
	Mtime   int64  `json:"mtime,omitempty"`
	Symlink string `json:"symlink,omitempty"`
	// Rdev is a device's number, as in CreateRequest.
	Rdev uint64 `json:"rdev,omitempty"`
	// Text as in CreateRequest (TypeFile only).
	Text string `json:"text,omitempty"`
	// Xattrs are the entry's extended attributes (as SetAttrRequest.Xattr
	// would set them one by one; outside "user." for root only), as an
	// import copies them.
	Xattrs []Xattr `json:"xattrs,omitempty"`
}

// BatchCreateResponse holds one result per entry, in request order.
type BatchCreateResponse struct {
	// Results[i] answers Entries[i].
	Results []BatchCreateResult `json:"results"`
	// HomeAddrs maps each shard homing a created entry to the RPC address
	// of the node leading it, where the answering node knows it (for the
	// client's home cache).
	HomeAddrs map[string]string `json:"home_addrs,omitempty"`
	// Hops is the number of server-to-server RPCs the call took.
	Hops int `json:"hops"`
}

// BatchCreateResult is the new inode of one entry, or its error.
type BatchCreateResult struct {
	// Inode is the created inode when Code is CodeOK.
	Inode *Inode `json:"inode,omitempty"`
	// Code and Message are the entry's error (CodeOK on success).
	Code    Code   `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Err returns the entry's error (matching errors.Is like a call's error),
// or nil.
func (r *BatchCreateResult) Err() error { return r.Code.Err(r.Message) }

// BatchCreateDirsRequest creates entries of several directories in one
// call (what an import of many small directories does): a BatchCreate for
// each of Dirs, with at most MaxBatchCreate entries in all. The directories
// homed by one shard are created there together: one replicated log entry
// for the children homed with them, and one transaction with each other
// shard that a new child is placed on, instead of one of each per
// directory. Send it to the node leading the directories' shard (a client
// groups them by the homes it knows); a directory homed elsewhere is
// created as BatchCreate would create it.
type BatchCreateDirsRequest struct {
	// Dirs are the directories and their entries (a directory may come
	// more than once, each path only once).
	Dirs []BatchCreateRequest `json:"dirs"`
}

// BatchCreateDirsResponse answers a BatchCreateDirsRequest directory by
// directory.
type BatchCreateDirsResponse struct {
	// Dirs[i] answers the request's Dirs[i].
	Dirs []BatchCreateDirResult `json:"dirs"`
	// HomeAddrs and Hops as in BatchCreateResponse, for the whole call.
	HomeAddrs map[string]string `json:"home_addrs,omitempty"`
	Hops      int               `json:"hops"`
}

// BatchCreateDirResult is one directory's answer in a
// BatchCreateDirsResponse: one result per entry, or the error that
// BatchCreate would have failed as a whole with (for example, the
// directory does not exist, or an entry's name is bad); only the
// request's bounds (entries in all, a path named twice) fail the call.
type BatchCreateDirResult struct {
	// Results[i] answers the directory's Entries[i] when Code is CodeOK.
	Results []BatchCreateResult `json:"results,omitempty"`
	// Code and Message are the directory's error (CodeOK on success).
	Code    Code   `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Err returns the directory's error, or nil.
func (r *BatchCreateDirResult) Err() error { return r.Code.Err(r.Message) }

// CreateResponse is the new file's inode.
type CreateResponse struct {
	// Inode is the created inode (Home says where it was placed).
	Inode Inode `json:"inode"`
	// HomeAddr is the RPC address of the node leading Inode.Home; may be
	// empty.
	HomeAddr string `json:"home_addr,omitempty"`
	// Hops is the number of server-to-server RPCs the operation took.
	Hops int `json:"hops"`
}

// MkdirRequest creates a directory.
type MkdirRequest struct {
	// Path is the absolute path of the new directory.
	Path string `json:"path"`
	// Mode is the permission bits (0o7777).
	Mode uint32 `json:"mode"`
	// UID is the owner's user id.
	UID uint32 `json:"uid"`
	// GID is the owner's group id.
	GID uint32 `json:"gid"`
	// Parents creates missing parents and succeeds if Path already is a
	// directory (mkdir -p).
	Parents bool `json:"parents,omitempty"`
	// Atime and Mtime are the new directory's access and modification
	// times, Unix nanoseconds (0: the time of the mkdir; not applied to
	// missing parents or to a directory that already exists).
	Atime int64 `json:"atime,omitempty"`
	Mtime int64 `json:"mtime,omitempty"`
	// AsGiven creates the directory with Mode, UID and GID exactly as
	// given, as an import does. Otherwise, below a directory with the
	// setgid bit, it takes that directory's group and the bit, as on
	// Linux (missing parents too).
	AsGiven bool `json:"as_given,omitempty"`
}

// MkdirResponse is the directory's inode.
type MkdirResponse struct {
	// Inode is the directory's inode (the existing one under Parents).
	Inode Inode `json:"inode"`
	// HomeAddr is the RPC address of the node leading Inode.Home; may be
	// empty.
	HomeAddr string `json:"home_addr,omitempty"`
	// Created lists the directories this call created, outermost first.
	Created []string `json:"created,omitempty"`
	// Hops is the number of server-to-server RPCs the operation took.
	Hops int `json:"hops"`
}

// ReadDirRequest lists a directory, one page at a time, in name order.
type ReadDirRequest struct {
	// Path is the absolute path of the directory.
	Path string `json:"path"`
	// After is the last name of the previous page ("" for the first page);
	// the page starts with the first name greater than After.
	After string `json:"after,omitempty"`
	// Limit is the maximum number of entries; 0 means the server default.
	Limit int `json:"limit,omitempty"`
}

// DirEntry is one name in a directory.
type DirEntry struct {
	// Name is the entry's name (one path component).
	Name string `json:"name"`
	// Type is TypeFile, TypeDir, TypeSymlink or a special file type
	// (SpecialType).
	Type string `json:"type"`
	// Home is the shard that homes the child.
	Home string `json:"home,omitempty"`
	// ID is the child's inode id (Inode.ID), so that a listing gives it
	// without a stat; 0 when the directory's shard does not know it (an
	// entry written before ids existed whose inode lives on another
	// shard): stat the child then.
	ID uint64 `json:"id,omitempty"`
}

// ReadDirResponse is one page of a directory listing.
type ReadDirResponse struct {
	// Entries are sorted by name.
	Entries []DirEntry `json:"entries"`
	// Next is the After value for the next page; "" when this is the last.
	Next string `json:"next,omitempty"`
	// HomeAddrs maps each shard named by an entry's Home to the RPC
	// address of the node leading it, as far as the answering node knows
	// (the client sends the entries' stats straight there).
	HomeAddrs map[string]string `json:"home_addrs,omitempty"`
}

// SetAttrRequest changes attributes of a path; nil fields are left alone.
type SetAttrRequest struct {
	// Path is the absolute path.
	Path string `json:"path"`
	// Mode sets the permission bits (chmod).
	Mode *uint32 `json:"mode,omitempty"`
	// UID sets the owner (chown).
	UID *uint32 `json:"uid,omitempty"`
	// GID sets the group (chown).
	GID *uint32 `json:"gid,omitempty"`
	// Size truncates or extends a file (directories: fs.ErrInvalid/ErrIsDir).
	Size *int64 `json:"size,omitempty"`
	// Atime sets the access time, Unix nanoseconds.
	Atime *int64 `json:"atime,omitempty"`
	// Mtime sets the modification time, Unix nanoseconds.
	Mtime *int64 `json:"mtime,omitempty"`
	// Layout, when not empty, replaces the layout blob (as writing the
	// file's data would; the size and times are not changed by it).
	Layout []byte `json:"layout,omitempty"`
	// Text, when set, replaces a regular file's text in the full-text
	// index (CreateRequest.Text); an empty string removes it.
	Text *string `json:"text,omitempty"`
	// IfVersion, when set, makes the change conditional: it applies only
	// if the inode's Version equals *IfVersion, atomically with the
	// change, and fails with ErrVersionMismatch otherwise (a read,
	// merge, write-if-unchanged cycle, as a mount commits a file's
	// layout).
	IfVersion *uint64 `json:"if_version,omitempty"`
	// IfID, when not zero, makes the change conditional on the inode at
	// Path having this id: it fails with ErrVersionMismatch when the path
	// names another inode now (the file was replaced, say by a rename
	// over it). Versions count per inode, so IfVersion alone may match a
	// replacement's.
	IfID uint64 `json:"if_id,omitempty"`
	// Xattr, when set, sets or removes one extended attribute, with the
	// inode's ctime (and with the other changes of the request).
	Xattr *XattrChange `json:"xattr,omitempty"`
	// Accessed marks the request as recording a read of the inode (a
	// mount's atime update, docs/mount.md "Access times"): it sets Atime
	// alone, keeps the ctime, and needs read permission rather than the
	// owner's or write permission. With Accessed, Atime must be set and
	// nothing else (fs.ErrInvalid).
	Accessed bool `json:"accessed,omitempty"`
}

// SetAttrResponse is the inode after the change.
type SetAttrResponse struct {
	// Inode is the updated inode.
	Inode Inode `json:"inode"`
}

// UnlinkRequest removes a file (ErrIsDir for a directory).
type UnlinkRequest struct {
	// Path is the absolute path of the file.
	Path string `json:"path"`
}

// UnlinkResponse is the (empty) answer to UnlinkRequest.
type UnlinkResponse struct{}

// RmdirRequest removes an empty directory (ErrNotEmpty otherwise, ErrNotDir
// for a file).
type RmdirRequest struct {
	// Path is the absolute path of the directory.
	Path string `json:"path"`
}

// RmdirResponse is the (empty) answer to RmdirRequest.
type RmdirResponse struct{}

// RenameRequest renames a file or directory, within or across directories,
// atomically to observers.
type RenameRequest struct {
	// Src is the existing absolute path.
	Src string `json:"src"`
	// Dst is the new absolute path.
	Dst string `json:"dst"`
	// NoReplace fails the rename with fs.ErrExist if Dst exists, checked
	// atomically with the rename (renameat2's RENAME_NOREPLACE); without
	// it a file replaces a file and a directory an empty directory.
	NoReplace bool `json:"no_replace,omitempty"`
}

// RenameResponse reports what a rename moved.
type RenameResponse struct {
	// Rekeyed is the number of descendants re-keyed (directory renames).
	Rekeyed int64 `json:"rekeyed,omitempty"`
}

// LinkRequest makes New another name of the file at Old (link(2)): one
// inode, one link count and one set of contents under both names.
type LinkRequest struct {
	// Old is the existing absolute path: any type but a directory.
	Old string `json:"old"`
	// New is the new absolute path; it must not exist.
	New string `json:"new"`
}

// LinkResponse carries the inode as New names it (its link count
// includes the new name).
type LinkResponse struct {
	Inode Inode `json:"inode"`
}

// HoldRequest holds the contents of the inodes IDs, homed by shard Shard,
// for a client that has them open (a mount's open files): while a hold
// lasts, the shard deletes none of their objects, even once the files are
// removed, so the client keeps reading them (docs/design.md, "Garbage
// collection of contents"). A hold lasts HoldResponse.TTL; the client
// renews it while the files stay open.
type HoldRequest struct {
	// Shard is the shard that homes the inodes (rpc.Inode.Home).
	Shard string `json:"shard"`
	// IDs are the inodes' ids (at most MaxHoldIDs).
	IDs []uint64 `json:"ids"`
	// Release ends the holds at once (the files were closed).
	Release bool `json:"release,omitempty"`
}

// MaxHoldIDs bounds the ids of one HoldRequest.
const MaxHoldIDs = 10000

// HoldResponse says how long the holds last unless renewed.
type HoldResponse struct {
	// TTL is in nanoseconds.
	TTL int64 `json:"ttl"`
}

// ---- Cluster and admin ----

// MembersRequest asks a node for the cluster's members as it sees them.
type MembersRequest struct{}

// Member describes one node.
type Member struct {
	// ID is the node id.
	ID string `json:"id"`
	// Group is the node's group name.
	Group string `json:"group"`
	// Status is "alive" (serving every request it accepts), "starting"
	// (up, not serving yet), "failed", "leaving" or "left".
	Status string `json:"status"`
	// RPCAddr is the node's RPC address (host:port).
	RPCAddr string `json:"rpc_addr"`
	// RaftAddr is the node's Raft address.
	RaftAddr string `json:"raft_addr,omitempty"`
	// SerfAddr is the node's Serf address.
	SerfAddr string `json:"serf_addr,omitempty"`
	// HTTPAddr is the node's HTTP (metrics, status) address.
	HTTPAddr string `json:"http_addr,omitempty"`
	// RaftRole is "leader", "follower", "candidate", "nonvoter" or "".
	RaftRole string `json:"raft_role"`
	// Files is the number of paths of the shards the node leads.
	Files int64 `json:"files"`
	// ReplicasHeld is the number of segment-filter replicas the node holds.
	ReplicasHeld int `json:"replicas_held"`
	// ShardsLed and ShardsHosted are the shards the node leads and those
	// it hosts a replica of.
	ShardsLed    []string `json:"shards_led"`
	ShardsHosted []string `json:"shards_hosted"`
	// Build is the version of the node's binary; Versions the formats it
	// speaks ("log": the shard log, "snap": shard snapshots, "glog" and
	// "gsnap": the group FSM's log and snapshots, "rpc": the protocol);
	// LogFormatInUse the newest shard log format it knows in use in the
	// cluster (docs/design.md, "Upgrades and unknown commands").
	Build          string         `json:"build,omitempty"`
	Versions       map[string]int `json:"versions,omitempty"`
	LogFormatInUse int            `json:"log_format_in_use,omitempty"`
}

// MembersResponse lists the members.
type MembersResponse struct {
	// Members is sorted by ID.
	Members []Member `json:"members"`
}

// AliveAddrs returns the RPC addresses of the members whose status is
// "alive", in order (nil when there are none).
func (r *MembersResponse) AliveAddrs() []string {
	var addrs []string
	for _, m := range r.Members {
		if m.Status == "alive" && m.RPCAddr != "" {
			addrs = append(addrs, m.RPCAddr)
		}
	}
	return addrs
}

// GroupsRequest asks for the cluster's groups.
type GroupsRequest struct{}

// GroupInfo describes one group.
type GroupInfo struct {
	// Group is the group name.
	Group string `json:"group"`
	// Members are the member node ids.
	Members []string `json:"members"`
	// Leader is the Raft leader's node id ("" if none).
	Leader string `json:"leader"`
	// Replicas is the number of replicas assigned to each member (the
	// assignment balance).
	Replicas map[string]int `json:"replicas,omitempty"`
	// Settled reports that every member that is up sees its groups
	// settled (StatusResponse.Settled); Unsettled says why not.
	Settled   bool   `json:"settled"`
	Unsettled string `json:"unsettled,omitempty"`
	// MaxGroupSize is the group's maximum size M as its leader applies
	// it (0: the leader did not answer); Auto is set with max_group_size
	// auto, and SizeChoice then says how M was chosen.
	MaxGroupSize int              `json:"max_group_size,omitempty"`
	Auto         bool             `json:"auto,omitempty"`
	SizeChoice   *GroupSizeChoice `json:"size_choice,omitempty"`
}

// GroupSizeChoice is how the leader of a group with max_group_size auto
// chose the group's maximum size M (G-HBA §2.5, routing.ChooseGroupSize):
// the model's inputs, which of them were measured, and Γ per M.
type GroupSizeChoice struct {
	// M is the maximum group size in use; Best the model's optimum at the
	// last evaluation (M follows it once it has won twice in a row by
	// more than the hysteresis).
	M    int `json:"m"`
	Best int `json:"best"`
	// Servers is N; MinM and MaxM bound the choice.
	Servers int `json:"servers"`
	MinM    int `json:"min_m"`
	MaxM    int `json:"max_m"`
	// PLRU and PL2 are the hit rates, RTTMs and PerMsgMs the multicast
	// latency D(m) = RTT + PerMsg·(m−1), MemMs an array probe.
	PLRU     float64 `json:"p_lru"`
	PL2      float64 `json:"p_l2"`
	RTTMs    float64 `json:"rtt_ms"`
	PerMsgMs float64 `json:"per_msg_ms"`
	MemMs    float64 `json:"mem_ms"`
	// ReplicaBytes, L1Bytes and BudgetBytes are the memory terms.
	ReplicaBytes float64 `json:"replica_bytes"`
	L1Bytes      float64 `json:"l1_bytes"`
	BudgetBytes  float64 `json:"budget_bytes"`
	// Measured names the inputs measured on the cluster (the others are
	// the documented assumptions: too few lookups or multicasts yet).
	Measured []string `json:"measured"`
	// Gamma is Γ per M evaluated, in order of M.
	Gamma []GroupSizeGamma `json:"gamma"`
	// EvaluatedAt is when, Unix nanoseconds.
	EvaluatedAt int64 `json:"evaluated_at"`
}

// GroupSizeGamma is the model's Γ and latency for one M.
type GroupSizeGamma struct {
	M         int     `json:"m"`
	Gamma     float64 `json:"gamma"`
	LatencyMs float64 `json:"latency_ms"`
	Space     float64 `json:"space"`
}

// GroupsResponse lists the groups.
type GroupsResponse struct {
	// Groups is sorted by name.
	Groups []GroupInfo `json:"groups"`
	// Settled reports that every group is settled and every node that is
	// up is in one and answered; Unsettled says why not.
	Settled   bool   `json:"settled"`
	Unsettled string `json:"unsettled,omitempty"`
}

// JoinRequest asks the receiving node to join the Serf pool through the
// given addresses.
type JoinRequest struct {
	// Addrs are Serf addresses (host:port) of existing members.
	Addrs []string `json:"addrs"`
}

// JoinResponse reports how many addresses were contacted successfully.
type JoinResponse struct {
	// Joined is the number of nodes contacted.
	Joined int `json:"joined"`
}

// LeaveRequest asks the receiving node to leave the cluster gracefully:
// hand over its replicas, drain its files, leave Raft and Serf.
type LeaveRequest struct {
	// NodeID, if set, must be the receiving node's id (a guard against
	// draining the wrong node).
	NodeID string `json:"node_id,omitempty"`
}

// LeaveResponse reports what the leave moved.
type LeaveResponse struct {
	// MovedShardReplicas is the number of shard replicas the node hosted
	// that were moved to other members before it left (nothing is copied
	// file by file: the other replicas of each shard already hold it).
	MovedShardReplicas int `json:"moved_shard_replicas"`
	// HandedShards are the shards it owned, now owned by other members.
	HandedShards []string `json:"handed_shards,omitempty"`
	// HandedReplicas is the number of filter replicas handed to
	// group-mates.
	HandedReplicas int `json:"handed_replicas"`
}

// StatusRequest asks a node for its status.
type StatusRequest struct{}

// LevelCounts counts lookups by the level that resolved them.
type LevelCounts struct {
	// L1 counts lookups resolved by the L1 array.
	L1 uint64 `json:"l1"`
	// L2 counts lookups resolved by the segment array.
	L2 uint64 `json:"l2"`
	// L3 counts lookups resolved by the group multicast.
	L3 uint64 `json:"l3"`
	// L4 counts lookups resolved by the authoritative step.
	L4 uint64 `json:"l4"`
}

// StatusResponse is one node's status (the RPC form of /v1/status).
type StatusResponse struct {
	// NodeID is the node's id.
	NodeID string `json:"node_id"`
	// Group is the node's group.
	Group string `json:"group"`
	// RaftRole is the node's role in its group's Raft.
	RaftRole string `json:"raft_role"`
	// Status is "alive" while the node serves every request it accepts,
	// "starting" before (NotServing says why), "leaving" while it leaves.
	Status string `json:"status"`
	// NotServing is why the node does not serve yet ("" when it does).
	NotServing string `json:"not_serving,omitempty"`
	// Settled reports that the node sees its groups settled: it serves,
	// it is an active member of a group with a leader, no node is moving between
	// groups or without one, no group is about to split or merge, and
	// every filter replica its group assigns it is loaded. Unsettled says
	// why not.
	Settled   bool   `json:"settled"`
	Unsettled string `json:"unsettled,omitempty"`
	// Leader is the node id of its group's leader.
	Leader string `json:"leader"`
	// Files is the number of paths of the shards this node leads.
	Files int64 `json:"files"`
	// Replicas are the shard replicas this node hosts.
	Replicas []ReplicaStatus `json:"replicas"`
	// ShardLeaderships counts the times this node started serving a shard
	// as its leader (elections won: starts, fail-overs, transfers).
	ShardLeaderships uint64 `json:"shard_leaderships"`
	// ReplicaRepairs counts the members whose shard replicas this node,
	// as its group's leader, placed elsewhere after replica_repair_after.
	ReplicaRepairs uint64 `json:"replica_repairs"`
	// ReplicasHeld is the number of segment replicas held here.
	ReplicasHeld int `json:"replicas_held"`
	// ReplicasMigrated counts the replicas moved between members of this
	// node's group (light-weight migration, G-HBA §2.4) since it began.
	ReplicasMigrated uint64 `json:"replicas_migrated"`
	// Scheme is the configured routing scheme: "auto", "ghba" or "hba".
	Scheme string `json:"scheme,omitempty"`
	// Routing is the scheme the node routes with now: "hba" (no L3
	// multicast) or "ghba"; with scheme auto, "hba" while its memory
	// budget holds every other shard's filter.
	Routing string `json:"routing,omitempty"`
	// MaxGroupSize is the maximum group size this node applies as its
	// group's leader (the configured one, or with max_group_size auto the
	// one it chose, GroupSize); 0 on a node that does not lead its group.
	MaxGroupSize  int              `json:"max_group_size,omitempty"`
	GroupSizeAuto bool             `json:"group_size_auto,omitempty"`
	GroupSize     *GroupSizeChoice `json:"group_size,omitempty"`
	// L2Members is the number of filter replicas loaded in the L2 array;
	// ExtraReplicas of them are held beyond the G-HBA segment because the
	// memory budget FilterMemoryBudget (bytes, config filter_memory_mb)
	// leaves room for them.
	L2Members          int   `json:"l2_members"`
	ExtraReplicas      int   `json:"extra_replicas"`
	FilterMemoryBudget int64 `json:"filter_memory_budget"`
	// Multicasts and Broadcasts count the L3 multicasts and L4
	// broadcasts this node started.
	Multicasts uint64 `json:"multicasts"`
	Broadcasts uint64 `json:"broadcasts"`
	// FilterBytes is the memory used by all filters on this node.
	FilterBytes int64 `json:"filter_bytes"`
	// Levels counts the lookups this node entered, by resolving level.
	Levels LevelCounts `json:"levels"`
	// Hops is the total number of hops of those lookups.
	Hops uint64 `json:"hops"`
	// Version is the software version.
	Version string `json:"version,omitempty"`
	// StartedAt is the process start time, Unix nanoseconds.
	StartedAt int64 `json:"started_at,omitempty"`
	// Splits counts the group splits this node carried out as its group's
	// leader.
	Splits uint64 `json:"splits"`
	// Merges counts the merges of its group into another that this node
	// started as its group's leader.
	Merges uint64 `json:"merges"`
	// GroupSwitches counts the times this node moved to another group
	// (split or merge).
	GroupSwitches uint64 `json:"group_switches"`
}

// ReplicaStatus is one shard replica of a node.
type ReplicaStatus struct {
	// Shard is the shard.
	Shard string `json:"shard"`
	// Leading reports that this replica is the shard's leader; Leader is
	// the leader it knows.
	Leading bool   `json:"leading"`
	Leader  string `json:"leader"`
	// Owner is the shard's owner in this node's group FSM: its preferred
	// leader ("" when the FSM does not place the shard).
	Owner string `json:"owner,omitempty"`
	// Members are the voters of the shard's Raft configuration as this
	// replica knows it; Learners its non-voters (replicas catching up).
	Members  []string `json:"members"`
	Learners []string `json:"learners,omitempty"`
	// AppliedIndex is the last log entry the replica's store holds;
	// CommitIndex raft's commit index; Lag their difference (how far the
	// replica's store is behind what it knows committed).
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	Lag          uint64 `json:"lag"`
	// Files is the number of paths in the replica's store.
	Files int64 `json:"files"`
}

// ShardsRequest asks for every shard of the cluster.
type ShardsRequest struct{}

// ShardInfo is one shard as `ghba shards --json` prints it (a contract).
type ShardInfo struct {
	// Shard is the shard's id.
	Shard string `json:"shard"`
	// Group is the group that owns it.
	Group string `json:"group,omitempty"`
	// Leader is the node that leads it ("" while none does).
	Leader string `json:"leader"`
	// Owner is its preferred leader: leadership moves back to the owner
	// once it is alive and caught up.
	Owner string `json:"owner,omitempty"`
	// Replicas are the voters of its Raft configuration, sorted (while it
	// has no leader: the nodes that report a replica).
	Replicas []string `json:"replicas"`
	// Learners are replicas being added: non-voters catching up.
	Learners []string `json:"learners,omitempty"`
	// Files is the number of paths it homes, as its leader counts them.
	Files int64 `json:"files"`
	// AppliedIndex is its leader's applied index.
	AppliedIndex uint64 `json:"applied_index"`
	// MaxLag is the largest distance, in log entries, between the
	// leader's applied index and a replica's.
	MaxLag uint64 `json:"max_lag"`
}

// ShardsResponse lists the shards, sorted by id.
type ShardsResponse struct {
	Shards []ShardInfo `json:"shards"`
}

// Keyring operations (KeyringRequest.Op).
const (
	KeyringList    = "list"
	KeyringInstall = "install"
	KeyringUse     = "use"
	KeyringRemove  = "remove"
)

// KeyringRequest asks a node to run a gossip keyring operation on every
// member (Serf's key manager): list the keys, install a key, make one the
// primary (the one messages are encrypted with) or remove one.
type KeyringRequest struct {
	// Op is KeyringList, KeyringInstall, KeyringUse or KeyringRemove.
	Op string `json:"op"`
	// Key is the base64 key (ghba keygen) of install, use and remove.
	Key string `json:"key,omitempty"`
}

// KeyringResponse is what the members answered.
type KeyringResponse struct {
	// Keys maps each key to the number of members that hold it, and
	// PrimaryKeys to the number that use it as primary (list).
	Keys        map[string]int `json:"keys,omitempty"`
	PrimaryKeys map[string]int `json:"primary_keys,omitempty"`
	// Members is the number of members asked, Answered of answers,
	// Failed of members that could not do it (Messages says why, by
	// member).
	Members  int               `json:"members"`
	Answered int               `json:"answered"`
	Failed   int               `json:"failed"`
	Messages map[string]string `json:"messages,omitempty"`
}

// PingRequest is an empty request used to check that a node answers.
type PingRequest struct{}

// PingResponse names the node that answered.
type PingResponse struct {
	// NodeID is the answering node's id.
	NodeID string `json:"node_id"`
}
