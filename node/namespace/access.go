package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Access control of client requests (docs/design.md, "Security"). With
// ACLs on, the RPC server puts the identity of the request's token in its
// context (acl.FromContext); a request from inside the node, from another
// node, or to a node with ACLs off has none, and is not checked.

// caller returns the identity of a client's request, nil when there is
// none to check.
func caller(ctx context.Context) *acl.Identity {
	id, ok := acl.FromContext(ctx)
	if !ok || id.Server {
		return nil
	}
	return id
}

// guard refuses a client's request that names the reserved directory
// (acl.ReservedDir), where the cluster keeps its users and tokens.
func guard(ctx context.Context, paths ...string) error {
	if caller(ctx) == nil {
		return nil
	}
	for _, p := range paths {
		if c, err := CleanPath(p); err == nil && acl.Reserved(c) {
			return fmt.Errorf("%s: %w: reserved for the cluster's own records", p, fs.ErrPermission)
		}
	}
	return nil
}

// guardBatch guards the directory and the entries of a batch create and
// stamps the entries' owners (see guard and stampOwner).
func guardBatch(ctx context.Context, r *rpc.BatchCreateRequest) error {
	if err := guard(ctx, r.Dir); err != nil {
		return err
	}
	for i := range r.Entries {
		if err := guard(ctx, path.Join(r.Dir, r.Entries[i].Name)); err != nil {
			return err
		}
		stampOwner(ctx, &r.Entries[i].UID, &r.Entries[i].GID)
	}
	return nil
}

// stampOwner sets the owner of a new file or directory to the caller's
// uid and primary gid: with ACLs on the owner comes from the token, not
// from the request, except for root (uid 0), who may chown anyway and so
// may create with any owner (an import keeps the source's owners).
func stampOwner(ctx context.Context, uid, gid *uint32) {
	if id := caller(ctx); id != nil && id.UID != 0 {
		*uid, *gid = id.UID, id.GID
	}
}

// hideReserved drops the reserved directory from a client's listing of
// the root.
func hideReserved(ctx context.Context, dir string, r *rpc.ReadDirResponse) {
	if caller(ctx) == nil || dir != "/" {
		return
	}
	name := acl.ReservedDir[1:]
	for i, e := range r.Entries {
		if e.Name == name {
			r.Entries = append(r.Entries[:i:i], r.Entries[i+1:]...)
			return
		}
	}
}

// checkAccessBy allows id to record a read of the inode ino of path p
// (SetAttrRequest.Accessed) when it may read it.
func checkAccessBy(id *acl.Identity, p string, ino *store.Inode) error {
	if id == nil || id.UID == 0 {
		return nil
	}
	if err := allowAncestors(id, p, ino.Ancestors); err != nil {
		return err
	}
	if !id.Allowed(ino.Mode, ino.UID, ino.GID, acl.Read) {
		return fmt.Errorf("%s: %w: recording a read needs read permission (uid %d, owner %d)", p, fs.ErrPermission, id.UID, ino.UID)
	}
	return nil
}

// checkSetAttrBy applies POSIX's rules for a change of attributes by id to
// the inode ino of path p: only the owner or root may chmod; only root may
// change the owner; the owner may change the group to one of its own;
// the size and times need the owner or write permission.
func checkSetAttrBy(id *acl.Identity, p string, ino *store.Inode, r *rpc.SetAttrRequest) error {
	if id == nil || id.UID == 0 {
		return nil
	}
	if err := allowAncestors(id, p, ino.Ancestors); err != nil {
		return err
	}
	owner := id.UID == ino.UID
	deny := func(what string) error {
		return fmt.Errorf("%s: %w: %s (uid %d, owner %d)", p, fs.ErrPermission, what, id.UID, ino.UID)
	}
	if r.Mode != nil && !owner {
		return deny("only the owner or root may chmod")
	}
	if r.UID != nil && *r.UID != ino.UID {
		return deny("only root may change the owner")
	}
	if r.GID != nil && *r.GID != ino.GID && (!owner || !id.InGroup(*r.GID)) {
		return deny(fmt.Sprintf("only the owner, to one of its groups, or root may change the group to %d", *r.GID))
	}
	if (r.Size != nil || r.Atime != nil || r.Mtime != nil || len(r.Layout) > 0) && !owner && !id.Allowed(ino.Mode, ino.UID, ino.GID, acl.Write) {
		return deny("changing the size or times needs the owner or write permission")
	}
	if x := r.Xattr; x != nil {
		// Linux (fs/xattr.c, xattr_permission): "trusted." and
		// "security." need CAP_SYS_ADMIN here (root); "user." is for
		// regular files and directories, on a sticky directory for its
		// owner only, and needs write permission.
		switch {
		case !strings.HasPrefix(x.Name, "user."):
			return deny("only root may change " + x.Name)
		case ino.Type != store.TypeFile && ino.Type != store.TypeDir:
			return deny(fmt.Sprintf("a %s has no user extended attributes", ino.Type))
		case ino.Type == store.TypeDir && ino.Mode&0o1000 != 0 && !owner:
			return deny("only the owner may change the user extended attributes of a sticky directory")
		case !id.Allowed(ino.Mode, ino.UID, ino.GID, acl.Write):
			return deny("changing an extended attribute needs write permission")
		}
	}
	return nil
}

// checkXattrsBy refuses, with fs.ErrPermission, a create by id of path p
// with extended attributes outside "user." unless id is root (what
// setting them afterwards would need).
func checkXattrsBy(id *acl.Identity, p string, xs []rpc.Xattr) error {
	if id == nil || id.UID == 0 {
		return nil
	}
	for _, x := range xs {
		if !strings.HasPrefix(x.Name, "user.") {
			return fmt.Errorf("%s: %w: only root may set %s (uid %d)", p, fs.ErrPermission, x.Name, id.UID)
		}
	}
	return nil
}

// allowDir refuses, with fs.ErrPermission, an access by id to the
// directory dir (inode ino) that its mode does not grant every bit of
// want to. POSIX: writing or searching a directory is what creating,
// removing and renaming an entry in it need, reading it what listing
// needs.
func allowDir(id *acl.Identity, dir string, ino *store.Inode, want uint32) error {
	if err := allowAncestors(id, dir, ino.Ancestors); err != nil {
		return err
	}
	if id == nil || id.Allowed(ino.Mode, ino.UID, ino.GID, want) {
		return nil
	}
	return fmt.Errorf("%s: %w: %s needs %s permission (uid %d; mode %#o, owner %d:%d)",
		dir, fs.ErrPermission, id.User, permNames(want), id.UID, ino.Mode&0o7777, ino.UID, ino.GID)
}

// allowAncestors refuses, with fs.ErrPermission, an access by id to path
// p unless every ancestor code of p's inode grants id search: POSIX's
// search permission on every ancestor, checked with the codes the inode
// carries (HBA §4.2.2) instead of a lookup per ancestor.
func allowAncestors(id *acl.Identity, p string, codes []store.AncestorCode) error {
	if id == nil {
		return nil
	}
	for _, c := range codes {
		if !id.Allowed(c.Mode, c.UID, c.GID, acl.Execute) {
			return fmt.Errorf("%s: %w: %s has no search permission on %s (uid %d; mode %#o, owner %d:%d)",
				p, fs.ErrPermission, id.User, ancestorAt(p, int(c.Depth)), id.UID, c.Mode, c.UID, c.GID)
		}
	}
	return nil
}

// ancestorAt returns the ancestor of p at depth d (d components).
func ancestorAt(p string, d int) string {
	if d <= 0 {
		return "/"
	}
	n := 0
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			n++
			if n == d {
				return p[:i]
			}
		}
	}
	return p
}

// allowInode checks id's search permission on the ancestors of the inode
// in of path p (a stat's or lookup's answer, at the node the client
// asked).
func allowInode(id *acl.Identity, p string, in *rpc.Inode) error {
	if id == nil || len(in.Ancestors) == 0 {
		return nil
	}
	return allowAncestors(id, p, storeCodes(in.Ancestors))
}

// missing answers, for id, a lookup of path p that found nothing (err):
// POSIX resolves a path from the root, so a missing path under a
// directory id may not search is refused rather than reported missing.
// The nearest existing ancestor decides; it costs lookups only on a miss.
func (n *Namespace) missing(ctx context.Context, id *acl.Identity, p string, err error) error {
	if id == nil || id.UID == 0 || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for q := p; q != "/"; {
		q, _ = splitPath(q)
		l, lerr := n.locate(ctx, q, true)
		if errors.Is(lerr, fs.ErrNotExist) {
			continue
		}
		if lerr != nil || l.inode == nil || l.typ != rpc.TypeDir {
			return err
		}
		if aerr := allowInode(id, q, l.inode); aerr != nil {
			return aerr
		}
		dino := storeInode(l.inode)
		if !id.Allowed(dino.Mode, dino.UID, dino.GID, acl.Execute) {
			return fmt.Errorf("%s: %w: %s has no search permission on %s (uid %d; mode %#o, owner %d:%d)",
				p, fs.ErrPermission, id.User, q, id.UID, dino.Mode&0o7777, dino.UID, dino.GID)
		}
		return err
	}
	return err
}

// allow applies allowDir to the directory of a change of entries.
func (o *parentOp) allow(id *acl.Identity, want uint32) error {
	return allowDir(id, o.dir, &o.dino, want)
}

// permNames spells a want of Read, Write and Execute ("write and search").
func permNames(want uint32) string {
	var out []string
	for _, p := range []struct {
		bit  uint32
		name string
	}{{acl.Read, "read"}, {acl.Write, "write"}, {acl.Execute, "search"}} {
		if want&p.bit != 0 {
			out = append(out, p.name)
		}
	}
	return strings.Join(out, " and ")
}

// stickyOwner returns the owner an entry of directory dir must have for id
// to remove or rename it: in a sticky directory (mode 01000, as /tmp) only
// the entry's owner, the directory's owner or root may. Nil when any owner
// will do.
func stickyOwner(id *acl.Identity, dir *store.Inode) *uint32 {
	if id == nil || id.UID == 0 || dir.Mode&0o1000 == 0 || dir.UID == id.UID {
		return nil
	}
	uid := id.UID
	return &uid
}

// checkOwner refuses, with fs.ErrPermission, a removal or rename of ino
// (at path p) in a sticky directory unless it is owned by *owner.
func checkOwner(p string, ino *store.Inode, owner *uint32) error {
	if owner == nil || ino.UID == *owner {
		return nil
	}
	return fmt.Errorf("%s: %w: the directory is sticky: only the entry's owner (%d), the directory's owner or root may remove or rename it (uid %d)",
		p, fs.ErrPermission, ino.UID, *owner)
}
