package namespace

import (
	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// The namespace's server-to-server protocol: every method a node calls on
// another node, with its request and reply. The client API is in rpc/. The
// method names are part of the wire format: a cluster may run two builds
// during a rolling upgrade, so a name is never reused for another meaning.
//
// Routing: LocalCheck verifies a filter hit (or answers a broadcast), L3Query
// is the group multicast, Filter.* move filters and deltas, Group.IDBFA
// exports the group's IDBFA (segments.go).
//
// Requests forwarded by an entry node to the shard that must run them: a
// parent directory's shard (create, remove, rename) or a path's shard
// (readdir, setattr, entry). Each "Home." method answers NotHome instead of
// executing when the shard no longer homes the path it was asked about (a
// rename moved it); the entry node then looks the path up again (reach.go).
//
// Every request to a shard (Route.LocalCheck, Home.*, Txn.*, Filter.Pull)
// embeds shardReq: it names the shard, and a node that does not lead that
// shard forwards the request, once, to the leader it knows (shardRPC).
//
// Transactions (txn.go): Prepare stages a part at a participant;
// CommitChild and AbortChild end it; Status asks a coordinator how a
// transaction ended.
const (
	methodLocalCheck = "Route.LocalCheck" // localCheckReq → localCheckResp
	methodL3Query    = "Route.L3Query"    // l3QueryReq → l3QueryResp
	methodFilterPull = "Filter.Pull"      // filterPullReq → filterPullResp
	methodFilterPush = "Filter.Push"      // filterPushReq → filterPushResp
	methodIDBFA      = "Group.IDBFA"      // idbfaReq → idbfaResp
	methodHomeCreate = "Home.Create"      // homeCreateReq → homeCreateResp (at the parent's home)
	// methodHomeBatchCreate: homeBatchCreateReq → homeBatchCreateResp
	// (at the directory's home).
	methodHomeBatchCreate = "Home.BatchCreate"
	// methodHomeBatchCreateDirs: homeBatchCreateDirsReq →
	// homeBatchCreateDirsResp (at the directories' home).
	methodHomeBatchCreateDirs = "Home.BatchCreateDirs"
	// methodHomeFind: homeFindReq → rpc.FindResponse (at the shard's
	// leader).
	methodHomeFind    = "Home.Find"
	methodHomeRemove  = "Home.Remove"  // homeRemoveReq → homeRemoveResp (at the parent's home)
	methodHomeRename  = "Home.Rename"  // homeRenameReq → homeRenameResp (at the source parent's home)
	methodHomeLink    = "Home.Link"    // homeLinkReq → homeLinkResp (at the new name's parent's home)
	methodHomeReadDir = "Home.ReadDir" // homeReadDirReq → homeReadDirResp (at the directory's home)
	methodHomeSetAttr = "Home.SetAttr" // homeSetAttrReq → homeSetAttrResp (at the path's home)
	methodHomeEntry   = "Home.Entry"   // homeEntryReq → homeEntryResp (at the directory's home; L4)
	methodHomeLoad    = "Home.Load"    // homeLoadReq → homeLoadResp
	// methodHomeAllocIDs: homeAllocIDsReq → homeAllocIDsResp (at the
	// root shard's leader; ids.go).
	methodHomeAllocIDs = "Home.AllocIDs"
	methodHomeHold     = "Home.Hold"       // homeHoldReq → homeHoldResp (at the shard's leader)
	methodTxnPrepare   = "Txn.Prepare"     // txnPrepareReq → txnPrepareResp (at a participant)
	methodTxnCommit    = "Txn.CommitChild" // txnEndReq → txnEndResp (at a participant)
	methodTxnAbort     = "Txn.AbortChild"  // txnEndReq → txnEndResp (at a participant)
	methodTxnStatus    = "Txn.Status"      // txnStatusReq → txnStatusResp (at the coordinator)
)

// readMethods are the shard methods that change nothing: one whose
// outcome is unknown (its connection broke) may be sent again.
var readMethods = map[string]bool{
	methodLocalCheck: true, methodL3Query: true, methodFilterPull: true, methodHomeFind: true,
	methodHomeReadDir: true, methodHomeEntry: true, methodTxnStatus: true,
}

// Filter kinds in filter pulls and pushes.
const (
	filterLocal = "local" // the origin's counting local filter (L2 replicas)
	filterLRU   = "lru"   // the origin's LRU filter (the L1 array entry)
)

// shardReq is embedded in every request addressed to a shard.
type shardReq struct {
	// Shard is the shard the request is for.
	Shard string `json:"shard,omitempty"`
	// Forwarded is set by a node that forwarded the request to the
	// shard's leader; a forwarded request is not forwarded again.
	Forwarded bool `json:"fwd,omitempty"`
}

func (r *shardReq) header() *shardReq { return r }

// to returns a request header for shard.
func to(shard string) shardReq { return shardReq{Shard: shard} }

// filterPullReq asks a shard's leader for the full encoding of one of the
// shard's filters (a new replica holder does this before receiving
// pushes). Shard is the origin.
type filterPullReq struct {
	shardReq
	// Kind is filterLocal or filterLRU.
	Kind string `json:"kind"`
	// Holder, for a local filter, is the node that keeps the replica: the
	// leader pushes the filter's changes to it from now on (budget.go),
	// as long as it renews the pull.
	Holder string `json:"holder,omitempty"`
	// Renew asks for the filter only if the holder's replica, at
	// HaveVersion of the leadership HaveTerm, is not current.
	Renew       bool   `json:"renew,omitempty"`
	HaveTerm    uint64 `json:"have_term,omitempty"`
	HaveVersion uint64 `json:"have_version,omitempty"`
}

// filterPullResp carries a full filter encoding.
type filterPullResp struct {
	Origin  string    `json:"origin"`
	Kind    string    `json:"kind"`
	Version uint64    `json:"version"` // the filter version of Data
	Data    rpc.Bytes `json:"data"`    // routing's full encoding of the filter
	// Term is the Raft term of the leadership that answers (the versions
	// of a shard's filters start afresh with each leadership).
	Term uint64 `json:"term,omitempty"`
	// Unchanged answers a renewal whose replica is current: no Data.
	Unchanged bool `json:"unchanged,omitempty"`
}

// filterPushReq sends a filter change of shard Origin, from the shard's
// leader to a holder node: a delta from BaseVersion to Version, or the
// full encoding.
type filterPushReq struct {
	Origin      string    `json:"origin"`
	Kind        string    `json:"kind"`
	Full        bool      `json:"full,omitempty"`         // Data is a full encoding
	BaseVersion uint64    `json:"base_version,omitempty"` // the version a delta applies to
	Version     uint64    `json:"version"`                // the version after Data
	Data        rpc.Bytes `json:"data"`                   // routing's delta or full encoding
}

// filterPushResp says whether the holder applied the push.
type filterPushResp struct {
	// Applied: the holder's replica is now at Version.
	Applied bool `json:"applied"`
	// NotHolder: the receiver does not hold this origin's replica (a false
	// IDBFA hit or a stale assignment); the update is dropped.
	NotHolder bool `json:"not_holder,omitempty"`
	// NeedFull: the delta's base version did not match; the origin sends
	// the full encoding next time (and the holder pulls it).
	NeedFull bool `json:"need_full,omitempty"`
	// HaveVersion is the holder's replica version after the push.
	HaveVersion uint64 `json:"have_version"`
}

// l3QueryReq multicasts a path to the members of the entry node's group
// (L3); each answers from its segment array and its local filter.
type l3QueryReq struct {
	Path string `json:"path"` // normalized
}

// l3QueryResp lists the origins whose filters (replicas held by the
// answering node, or its own local filter) report the path.
type l3QueryResp struct {
	NodeID    string   `json:"node_id"`
	Positives []string `json:"positives,omitempty"`
}

// localCheckReq asks a shard whether it homes Path (verifying a filter
// hit, or answering an L4 broadcast).
type localCheckReq struct {
	shardReq
	Path      string `json:"path"`                 // normalized
	WithInode bool   `json:"with_inode,omitempty"` // also return the inode (saves a hop for stat)
}

// localCheckResp says whether the path is homed in the shard.
type localCheckResp struct {
	NodeID string     `json:"node_id"` // the shard's leader that answered
	Exists bool       `json:"exists"`
	Type   string     `json:"type,omitempty"`  // when Exists
	Inode  *rpc.Inode `json:"inode,omitempty"` // when Exists and WithInode
	// Anchor, when the path is one name of an inode with several, is the
	// shard of its record (hardlinks.go); Inode then is the record's.
	Anchor string `json:"anchor,omitempty"`
}

// idbfaReq asks for a group's IDBFA unless the caller has HaveVersion.
type idbfaReq struct {
	HaveVersion uint64 `json:"have_version"`
}

// idbfaResp carries the group's IDBFA (Data empty when Unchanged).
type idbfaResp struct {
	Group     string    `json:"group"`
	Version   uint64    `json:"version"`
	Unchanged bool      `json:"unchanged,omitempty"`
	Data      rpc.Bytes `json:"data,omitempty"`
}

// homeStatus is embedded in the replies of the Home.* methods.
type homeStatus struct {
	// NotHome: the receiver does not home the path (any more).
	NotHome bool `json:"not_home,omitempty"`
}

func (h *homeStatus) notHome() bool { return h.NotHome }

// notHomeHere is the homeStatus of a node that does not home the path.
var notHomeHere = homeStatus{NotHome: true}

// homeCreateReq asks the parent directory's home to create a file or a
// directory.
type homeCreateReq struct {
	shardReq
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Layout []byte `json:"layout,omitempty"`
	// Target is a symlink's target (Type rpc.TypeSymlink).
	Target string `json:"target,omitempty"`
	// Rdev is a device's number (rpc.TypeCharDev, rpc.TypeBlockDev).
	Rdev uint64 `json:"rdev,omitempty"`
	// Text is a file's text for the full-text index.
	Text string `json:"text,omitempty"`
	// Size, Atime and Mtime are the initial attributes (times 0: now).
	Size  int64 `json:"size,omitempty"`
	Atime int64 `json:"atime,omitempty"`
	Mtime int64 `json:"mtime,omitempty"`
	// Xattrs are the initial extended attributes, sorted by name
	// (checkCreate sorts them).
	Xattrs []rpc.Xattr `json:"xattrs,omitempty"`
	// AsGiven keeps Mode and GID below a setgid directory (newInode).
	AsGiven bool `json:"as_given,omitempty"`
	// Caller is the client's identity when ACLs are on (access.go).
	Caller *acl.Identity `json:"caller,omitempty"`
}

// homeFindReq asks a shard's leader for a page of a search.
type homeFindReq struct {
	shardReq
	Find   rpc.FindRequest `json:"find"`
	Caller *acl.Identity   `json:"caller,omitempty"`
}

// homeBatchCreateReq asks a directory's home to create several of its
// children (rpc.BatchCreateRequest); each entry's Path is the child's.
type homeBatchCreateReq struct {
	shardReq
	Dir     string          `json:"dir"`
	Entries []homeCreateReq `json:"entries"`
	Caller  *acl.Identity   `json:"caller,omitempty"`
}

type homeBatchCreateResp struct {
	homeStatus
	Results []rpc.BatchCreateResult `json:"results"`
	Hops    int                     `json:"hops"`
}

// homeBatchCreateDirsReq asks the home of several directories to create
// their children together (rpc.BatchCreateDirsRequest).
type homeBatchCreateDirsReq struct {
	shardReq
	Dirs   []homeBatchCreateReq `json:"dirs"`
	Caller *acl.Identity        `json:"caller,omitempty"`
}

type homeBatchCreateDirsResp struct {
	// Dirs[i] answers the request's Dirs[i].
	Dirs []homeDirResult `json:"dirs"`
	Hops int             `json:"hops"`
}

// homeDirResult is one directory's answer in a homeBatchCreateDirsResp:
// not homed here, its error, or one result per entry.
type homeDirResult struct {
	homeStatus
	Results []rpc.BatchCreateResult `json:"results,omitempty"`
	Code    rpc.Code                `json:"code,omitempty"`
	Message string                  `json:"message,omitempty"`
}

type homeCreateResp struct {
	homeStatus
	Inode rpc.Inode `json:"inode"`
	Hops  int       `json:"hops"`
}

// homeRemoveReq asks the parent directory's home to unlink a file (Dir
// false) or remove an empty directory (Dir true).
type homeRemoveReq struct {
	shardReq
	Path   string        `json:"path"`
	Dir    bool          `json:"dir"`
	Caller *acl.Identity `json:"caller,omitempty"`
	// stub is the record of the inode the removed name turned out to
	// share with other names (hardlinks.go), learnt by an earlier attempt.
	stub *stubRef
}

type homeHoldReq struct {
	shardReq
	IDs     []uint64 `json:"ids"`
	Release bool     `json:"release,omitempty"`
}

type homeHoldResp struct {
	TTL int64 `json:"ttl"` // nanoseconds
}

type homeLinkReq struct {
	shardReq
	Old    string        `json:"old"`
	New    string        `json:"new"`
	Caller *acl.Identity `json:"caller,omitempty"`
}

type homeLinkResp struct {
	homeStatus
	Inode rpc.Inode `json:"inode"`
}

type homeRemoveResp struct {
	homeStatus
	Hops int `json:"hops"`
}

// homeRenameReq asks the source parent's home to coordinate a rename.
type homeRenameReq struct {
	shardReq
	Src string `json:"src"`
	Dst string `json:"dst"`
	// NoReplace refuses an existing Dst (rpc.RenameRequest.NoReplace).
	NoReplace bool          `json:"no_replace,omitempty"`
	Caller    *acl.Identity `json:"caller,omitempty"`
	// srcStub and dstStub are the records of the inodes the source and
	// a replaced destination turned out to share with other names,
	// learnt by an earlier attempt.
	srcStub, dstStub *stubRef
}

type homeRenameResp struct {
	homeStatus
	Rekeyed int64 `json:"rekeyed,omitempty"`
	Hops    int   `json:"hops"`
}

// homeReadDirReq reads one page of a directory at its home.
type homeReadDirReq struct {
	shardReq
	Path   string        `json:"path"`
	After  string        `json:"after,omitempty"`
	Limit  int           `json:"limit,omitempty"`
	Caller *acl.Identity `json:"caller,omitempty"`
}

type homeReadDirResp struct {
	homeStatus
	Entries []rpc.DirEntry `json:"entries"`
	Next    string         `json:"next,omitempty"`
}

// homeSetAttrReq changes attributes at the path's home.
type homeSetAttrReq struct {
	shardReq
	Req rpc.SetAttrRequest `json:"req"`
	// Caller is the client's identity when ACLs are on (the home checks
	// the owner rules of chmod and chown against the inode).
	Caller *acl.Identity `json:"caller,omitempty"`
}

type homeSetAttrResp struct {
	homeStatus
	Inode rpc.Inode `json:"inode"`
}

// homeEntryReq asks a directory's home for one entry: the authoritative
// step (L4) of a lookup.
type homeEntryReq struct {
	shardReq
	Dir  string `json:"dir"`
	Name string `json:"name"`
}

type homeEntryResp struct {
	homeStatus
	// NotDir: Dir is homed here but is a file.
	NotDir bool `json:"not_dir,omitempty"`
	// Exists says whether Dir has the entry.
	Exists bool         `json:"exists"`
	Entry  rpc.DirEntry `json:"entry"`
}

// homeLoadReq asks a node for the loads of the shards it leads.
type homeLoadReq struct{}

// homeLoadResp reports, for each shard the answering node leads, the number
// of paths it homes (balanced placement).
type homeLoadResp struct {
	NodeID string           `json:"node_id"`
	Shards map[string]int64 `json:"shards"`
}

// Operation kinds of a prepared transaction part (txnOp.Kind).
const (
	opPutInode  = "put_inode"  // create Path with Inode; Path must be absent
	opDelInode  = "del_inode"  // delete Path (of Type); EmptyDir: must have no entries
	opMoveInode = "move_inode" // re-key the inode Path to New (file rename)
	opPutEntry  = "put_entry"  // put Entry into Dir; ExpectAbsent or ExpectHome/ExpectType
	opDelEntry  = "del_entry"  // delete Entry.Name from Dir; must point at ExpectHome
	opRekey     = "rekey"      // re-key every path under Path to New (directory rename)
	opRecode    = "recode"     // set Path's ancestor code in its subtree (chmod/chown of a directory)
	opLinkFirst = "link_first" // turn the inode Path (of id ID) into a stub and a record of Nlink+1 here
	opLinkCount = "link_count" // add Delta (maybe 0) to the link count of the record Path, set its ctime; delete it at 0 links
)

// txnOp is one change of a participant's part of a transaction. Ops are
// checked at prepare and applied in order at commit, in one batch, except
// opRekey and opRecode, which run after the batch (forward-only,
// resumable).
type txnOp struct {
	Kind string `json:"kind"`
	// Path is the inode path (put/del/move inode, rekey old prefix) or the
	// directory (put/del entry).
	Path string `json:"path"`
	// New is the destination of a move or rekey.
	New string `json:"new,omitempty"`
	// Type is the expected type for del/move inode ("" = any).
	Type string `json:"type,omitempty"`
	// EmptyDir requires a directory to be empty (del inode).
	EmptyDir bool `json:"empty_dir,omitempty"`
	// Inode is the inode to create (put inode).
	Inode *rpc.Inode `json:"inode,omitempty"`
	// Entry is the entry to put or delete.
	Entry *rpc.DirEntry `json:"entry,omitempty"`
	// ExpectAbsent requires the entry to be absent (put entry).
	ExpectAbsent bool `json:"expect_absent,omitempty"`
	// ExpectHome and ExpectType require the entry's current home and type
	// (put entry replacing, del entry).
	ExpectHome string `json:"expect_home,omitempty"`
	ExpectType string `json:"expect_type,omitempty"`
	// Ctime is the change time set on a moved inode.
	Ctime int64 `json:"ctime,omitempty"`
	// RequireOwner, on a del or move of an inode in a sticky directory,
	// refuses it (fs.ErrPermission) unless the inode has this owner
	// (access.go).
	RequireOwner *uint32 `json:"require_owner,omitempty"`
	// Ancestors are the ancestor codes of New: a moved inode's (move
	// inode) or the chain of a re-keyed subtree's root (rekey).
	Ancestors []rpc.AncestorCode `json:"ancestors,omitempty"`
	// Code is Path's new ancestor code (recode); nil: it grants search to
	// everyone now.
	Code *rpc.AncestorCode `json:"code,omitempty"`
	// DirVersion, if not 0, requires the directory's inode to have this
	// version (put entry of a rename: the destination directory as the
	// coordinator read it, whose codes the moved inodes take).
	DirVersion uint64 `json:"dir_version,omitempty"`
	// ID is the inode id a link_first expects at Path.
	ID uint64 `json:"id,omitempty"`
	// Delta is what a link_count adds to the record's link count.
	Delta int32 `json:"delta,omitempty"`
	// Anchor makes the inode a put_inode creates a stub of the record
	// in that shard (a hard link's new name).
	Anchor string `json:"anchor,omitempty"`
	// Stub, on a del_inode or move_inode, is the record the coordinator
	// knows the inode to be a stub of (nil: not a stub); a prepare that
	// finds otherwise answers busy with what it found
	// (txnPrepareResp.Stub).
	Stub *stubRef `json:"stub,omitempty"`
}

// txnPrepareReq stages a participant shard's part of transaction TxnID,
// coordinated by shard Coordinator. Marks are the paths (each with its subtree)
// that the part makes "in flux": until the transaction is resolved every
// reader of them at the participant asks the coordinator how it ended.
type txnPrepareReq struct {
	shardReq
	TxnID       string   `json:"txn_id"`
	Coordinator string   `json:"coordinator"`
	Ops         []txnOp  `json:"ops"`
	Marks       []string `json:"marks"`
}

// txnPrepareResp acknowledges a staged part. Busy means another
// transaction or operation on related paths is in progress; nothing was
// staged and the coordinator should abort and retry.
type txnPrepareResp struct {
	Busy bool `json:"busy,omitempty"`
	// Stub, with Busy, says that a del_inode's path is a stub of this
	// record (hardlinks.go): the coordinator plans again with it.
	Stub *stubRef `json:"stub,omitempty"`
	// Rekeyed is the number of inodes under a rekey's old prefix here.
	Rekeyed int64 `json:"rekeyed,omitempty"`
}

// Transaction states in txnStatusResp.State.
const (
	txnPending   = "pending"
	txnCommitted = "committed"
	txnAborted   = "aborted"
	txnUnknown   = "unknown"
)

// txnEndReq makes a prepared part visible (Txn.CommitChild) or discards it
// (Txn.AbortChild). Both are idempotent: ending an unknown or already
// ended transaction is harmless.
type txnEndReq struct {
	shardReq
	TxnID string `json:"txn_id"`
}

// txnEndResp is the (empty) reply to txnEndReq.
type txnEndResp struct{}

// txnStatusReq asks a coordinator how a transaction ended (participants
// resolving prepared parts).
type txnStatusReq struct {
	shardReq
	TxnID string `json:"txn_id"`
}

// txnStatusResp is the transaction's state: txnPending, txnCommitted,
// txnAborted or txnUnknown (no record: aborted, or never committed).
type txnStatusResp struct {
	State string `json:"state"`
}

// ---- conversions ----

// fileTypes pairs the store's file types with their wire names.
var fileTypes = [...]struct {
	st   store.FileType
	wire string
}{
	{store.TypeFile, rpc.TypeFile}, {store.TypeDir, rpc.TypeDir}, {store.TypeSymlink, rpc.TypeSymlink},
	{store.TypeFIFO, rpc.TypeFIFO}, {store.TypeSocket, rpc.TypeSocket},
	{store.TypeCharDev, rpc.TypeCharDev}, {store.TypeBlockDev, rpc.TypeBlockDev},
}

func typeString(t store.FileType) string {
	for _, ft := range fileTypes {
		if ft.st == t {
			return ft.wire
		}
	}
	return ""
}

func storeType(t string) store.FileType {
	for _, ft := range fileTypes {
		if ft.wire == t {
			return ft.st
		}
	}
	return 0
}

// wireInode converts a stored inode at path p homed in shard home.
func wireInode(p, home string, in *store.Inode) rpc.Inode {
	return rpc.Inode{
		Path: p, Type: typeString(in.Type), Mode: in.Mode, UID: in.UID, GID: in.GID,
		Size: in.Size, Atime: in.Atime, Mtime: in.Mtime, Ctime: in.Ctime,
		Nlink: in.Nlink, Version: in.Version, Home: home, Layout: in.Layout, Target: in.Target,
		Rdev: in.Rdev, HasText: in.Text != "", Ancestors: wireCodes(in.Ancestors), ID: in.ID,
		Xattrs: wireXattrs(in.Xattrs), Anchor: in.Anchor,
	}
}

// withoutText returns a copy of in without its text, as responses carry
// it (HasText says whether it has one).
func withoutText(in rpc.Inode) *rpc.Inode {
	in.HasText = in.HasText || in.Text != ""
	in.Text = ""
	return &in
}

// storeInode converts a wire inode for storage.
func storeInode(in *rpc.Inode) store.Inode {
	return store.Inode{
		Type: storeType(in.Type), Mode: in.Mode, UID: in.UID, GID: in.GID,
		Size: in.Size, Atime: in.Atime, Mtime: in.Mtime, Ctime: in.Ctime,
		Nlink: in.Nlink, Version: in.Version, Layout: in.Layout, Target: in.Target,
		Rdev: in.Rdev, Text: in.Text, Ancestors: storeCodes(in.Ancestors), ID: in.ID,
		Xattrs: storeXattrs(in.Xattrs),
	}
}

// wireXattrs converts stored extended attributes (nil stays nil); the
// values are shared.
func wireXattrs(in []store.Xattr) []rpc.Xattr {
	if len(in) == 0 {
		return nil
	}
	out := make([]rpc.Xattr, len(in))
	for i, x := range in {
		out[i] = rpc.Xattr{Name: x.Name, Value: x.Value}
	}
	return out
}

// storeXattrs converts wire extended attributes for storage.
func storeXattrs(in []rpc.Xattr) []store.Xattr {
	if len(in) == 0 {
		return nil
	}
	out := make([]store.Xattr, len(in))
	for i, x := range in {
		out[i] = store.Xattr{Name: x.Name, Value: x.Value}
	}
	return out
}

// wireCodes converts stored ancestor codes (nil stays nil).
func wireCodes(in []store.AncestorCode) []rpc.AncestorCode {
	if len(in) == 0 {
		return nil
	}
	out := make([]rpc.AncestorCode, len(in))
	for i, c := range in {
		out[i] = rpc.AncestorCode(c)
	}
	return out
}

// storeCodes converts wire ancestor codes (nil stays nil).
func storeCodes(in []rpc.AncestorCode) []store.AncestorCode {
	if len(in) == 0 {
		return nil
	}
	out := make([]store.AncestorCode, len(in))
	for i, c := range in {
		out[i] = store.AncestorCode(c)
	}
	return out
}

func wireEntry(e store.Entry) rpc.DirEntry {
	return rpc.DirEntry{Name: e.Name, Type: typeString(e.Type), Home: e.Home, ID: e.ID}
}

func storeEntry(e *rpc.DirEntry) store.Entry {
	return store.Entry{Name: e.Name, Type: storeType(e.Type), Home: e.Home, ID: e.ID}
}
