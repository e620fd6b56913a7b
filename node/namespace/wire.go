package node

import (
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Server-to-server methods of the namespace that are not in rpc/types.go:
// requests forwarded by an entry node to the node that must coordinate
// them (a parent directory's home, or a path's home), the generic prepare
// of the two-phase protocol, and load reports for balanced placement. Each
// "Home." method answers NotHome instead of executing when the receiver is
// no longer the home it was thought to be (the entry node then looks the
// path up again).
const (
	methodHomeCreate  = "Home.Create"  // homeCreateReq → homeCreateResp (at the parent's home)
	methodHomeRemove  = "Home.Remove"  // homeRemoveReq → homeRemoveResp (at the parent's home)
	methodHomeRename  = "Home.Rename"  // homeRenameReq → homeRenameResp (at the source parent's home)
	methodHomeReadDir = "Home.ReadDir" // homeReadDirReq → homeReadDirResp (at the directory's home)
	methodHomeSetAttr = "Home.SetAttr" // homeSetAttrReq → homeSetAttrResp (at the path's home)
	methodHomeEntry   = "Home.Entry"   // homeEntryReq → homeEntryResp (at the directory's home; L4)
	methodHomeLoad    = "Home.Load"    // homeLoadReq → homeLoadResp
	methodTxnPrepare  = "Txn.Prepare"  // txnPrepareReq → txnPrepareResp (at a participant)
)

// homeCreateReq asks the parent directory's home to create a file or a
// directory.
type homeCreateReq struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Layout []byte `json:"layout,omitempty"`
}

type homeCreateResp struct {
	Inode   rpc.Inode `json:"inode"`
	Hops    int       `json:"hops"`
	NotHome bool      `json:"not_home,omitempty"`
}

// homeRemoveReq asks the parent directory's home to unlink a file (Dir
// false) or remove an empty directory (Dir true).
type homeRemoveReq struct {
	Path string `json:"path"`
	Dir  bool   `json:"dir"`
}

type homeRemoveResp struct {
	Hops    int  `json:"hops"`
	NotHome bool `json:"not_home,omitempty"`
}

// homeRenameReq asks the source parent's home to coordinate a rename.
type homeRenameReq struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
}

type homeRenameResp struct {
	Rekeyed int64 `json:"rekeyed,omitempty"`
	Hops    int   `json:"hops"`
	NotHome bool  `json:"not_home,omitempty"`
}

// homeReadDirReq reads one page of a directory at its home.
type homeReadDirReq struct {
	Path  string `json:"path"`
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

type homeReadDirResp struct {
	Entries []rpc.DirEntry `json:"entries"`
	Next    string         `json:"next,omitempty"`
	NotHome bool           `json:"not_home,omitempty"`
}

// homeSetAttrReq changes attributes at the path's home.
type homeSetAttrReq struct {
	Req rpc.SetAttrRequest `json:"req"`
}

type homeSetAttrResp struct {
	Inode   rpc.Inode `json:"inode"`
	NotHome bool      `json:"not_home,omitempty"`
}

// homeEntryReq asks a directory's home for one entry: the authoritative
// step (L4) of a lookup.
type homeEntryReq struct {
	Dir  string `json:"dir"`
	Name string `json:"name"`
}

type homeEntryResp struct {
	// NotHome: the receiver does not home Dir (any more).
	NotHome bool `json:"not_home,omitempty"`
	// NotDir: Dir is homed here but is a file.
	NotDir bool `json:"not_dir,omitempty"`
	// Exists says whether Dir has the entry.
	Exists bool         `json:"exists"`
	Entry  rpc.DirEntry `json:"entry"`
}

type homeLoadReq struct{}

// homeLoadResp reports the number of paths a node homes (balanced
// placement) and whether it takes new homes.
type homeLoadResp struct {
	NodeID   string `json:"node_id"`
	Files    int64  `json:"files"`
	Draining bool   `json:"draining,omitempty"`
}

// Operation kinds of a prepared transaction part (txnOp.Kind).
const (
	opPutInode  = "put_inode"  // create Path with Inode; Path must be absent
	opDelInode  = "del_inode"  // delete Path (of Type); EmptyDir: must have no entries
	opMoveInode = "move_inode" // re-key the inode Path to New (file rename)
	opPutEntry  = "put_entry"  // put Entry into Dir; ExpectAbsent or ExpectHome/ExpectType
	opDelEntry  = "del_entry"  // delete Entry.Name from Dir; must point at ExpectHome
	opPutDir    = "put_dir"    // add Entries to directory Path (drain: a moved directory's entries)
	opDelDir    = "del_dir"    // delete every entry of directory Path (drain)
	opRekey     = "rekey"      // re-key every path under Path to New (directory rename)
)

// txnOp is one change of a participant's part of a transaction. Ops are
// checked at prepare and applied in order at commit, in one batch, except
// opRekey, which runs after the batch (forward-only, resumable).
type txnOp struct {
	Kind string `json:"kind"`
	// Path is the inode path (put/del/move inode, put/del dir, rekey old
	// prefix) or the directory (put/del entry).
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
	// Entries are the entries of a moved directory (put dir).
	Entries []rpc.DirEntry `json:"entries,omitempty"`
	// ExpectAbsent requires the entry to be absent (put entry).
	ExpectAbsent bool `json:"expect_absent,omitempty"`
	// ExpectHome and ExpectType require the entry's current home and type
	// (put entry replacing, del entry).
	ExpectHome string `json:"expect_home,omitempty"`
	ExpectType string `json:"expect_type,omitempty"`
	// Ctime is the change time set on a moved inode.
	Ctime int64 `json:"ctime,omitempty"`
}

// txnPrepareReq stages a participant's part of transaction TxnID,
// coordinated by Coordinator. Marks are the paths (each with its subtree)
// that the part makes "in flux": until the transaction is resolved every
// reader of them at the participant asks the coordinator how it ended.
type txnPrepareReq struct {
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
	// Rekeyed is the number of inodes under a rekey's old prefix here.
	Rekeyed int64 `json:"rekeyed,omitempty"`
}

// ---- conversions ----

func typeString(t store.FileType) string {
	switch t {
	case store.TypeFile:
		return rpc.TypeFile
	case store.TypeDir:
		return rpc.TypeDir
	}
	return ""
}

func storeType(t string) store.FileType {
	switch t {
	case rpc.TypeFile:
		return store.TypeFile
	case rpc.TypeDir:
		return store.TypeDir
	}
	return 0
}

// wireInode converts a stored inode at path p homed at home.
func wireInode(p, home string, in *store.Inode) rpc.Inode {
	return rpc.Inode{
		Path: p, Type: typeString(in.Type), Mode: in.Mode, UID: in.UID, GID: in.GID,
		Size: in.Size, Atime: in.Atime, Mtime: in.Mtime, Ctime: in.Ctime,
		Nlink: in.Nlink, Version: in.Version, Home: home, Layout: in.Layout,
	}
}

// storeInode converts a wire inode for storage.
func storeInode(in *rpc.Inode) store.Inode {
	return store.Inode{
		Type: storeType(in.Type), Mode: in.Mode, UID: in.UID, GID: in.GID,
		Size: in.Size, Atime: in.Atime, Mtime: in.Mtime, Ctime: in.Ctime,
		Nlink: in.Nlink, Version: in.Version, Layout: in.Layout,
	}
}

func wireEntry(e store.Entry) rpc.DirEntry {
	return rpc.DirEntry{Name: e.Name, Type: typeString(e.Type), Home: e.Home}
}

func storeEntry(e *rpc.DirEntry) store.Entry {
	return store.Entry{Name: e.Name, Type: storeType(e.Type), Home: e.Home}
}
