// Package contents holds the contents of the files of `ghba mount` in an
// object store, as JuiceFS does: the metadata service keeps, per inode, the
// file's Size and an opaque Layout blob; the bytes live in immutable
// objects.
//
// # Layout
//
// A file's contents are fixed-size blocks (DefaultBlockSize, 4 MiB; a
// file's block size is part of its layout). Each block is one object.
// The Layout maps block indexes to objects as a sorted list of extents:
// Extent{First, Count, Gen} says that blocks [First, First+Count) are the
// objects of generation Gen. A block absent from the layout is a hole and
// reads as zeros; so do the bytes past an object's end (the last block's
// object holds only the bytes below the size at upload). Bytes at or past
// Size are never returned. Layout.Encode is a compact binary form with a
// format version byte (a file written in one go is one extent, whatever its
// size); DecodeLayout reads it and rejects anything else without
// panicking.
//
// # Keys
//
// The object of block b, generation g, of the inode with cluster-unique id
// ino is stored under Key(ino, BlockRef{b, g}):
//
//	blocks/<ino, 16 hex digits>/<b, decimal>-<g, 16 hex digits>
//
// so all the objects of one inode share InodePrefix(ino), and ParseKey
// reads a key back.
//
// # Generations and immutability
//
// Every upload of a block is a new object: its generation is never one
// that block was uploaded under before. A File draws a random 64-bit
// generation (never 0; math/rand/v2 ChaCha8 seeded from crypto/rand) for
// each commit epoch and uploads under it the blocks it changes in that
// epoch; a block uploaded twice in one epoch gets a fresh random
// generation the second time. Sharing the generation within an epoch keeps
// layouts small (extents join), and no object is ever overwritten: an
// object a committed layout references stays as it was until it is
// deleted. Readers and caches can therefore trust any copy of an object
// (the BlockCache never holds a stale block), and two mounts writing the
// same block never clobber each other's objects: the metadata decides
// which one the file holds.
//
// # Writing and committing
//
// A File buffers writes per block, uploads a block written in full at once
// in the background, and the rest at Flush (partly written blocks are first
// filled in from their current object). Flush returns a Commit: the new
// generation of each changed block, the truncation if any, and the size.
// The metadata server applies it with Merge to the layout it holds NOW
// (another mount may have committed meanwhile): truncation first, then the
// blocks, so concurrent writers of one file get last-close-wins per block.
// After that, File.Committed makes the result the file's new base.
//
// Shrinking a file into the middle of a block rewrites that block with
// zeros past the new size, so that every committed object reads as zeros
// past the file's size: growing the file later (by a write or a
// truncation) then needs no object change. The metadata layer must thus
// shrink a file only through File.Truncate and a commit, never by setting
// Size alone.
//
// # Garbage collection
//
// An object becomes garbage when no committed layout references it. Two
// cases:
//
//   - An object a File uploaded and replaced (or truncated away) before
//     any commit referenced it: only that File knows it, and deletes it in
//     Flush (never offered in a Commit) or Committed (offered, but not in
//     the Commit that was applied).
//   - An object a committed layout referenced: when the metadata server
//     replaces an inode's layout old by new, Dropped(old, new) lists the
//     objects to delete (Store.Delete), and when it removes the inode, all
//     of old's (old.Refs()). This is safe because objects are never reused:
//     an object new does not reference can only be referenced by layouts
//     that are gone. A reader holding an older layout that finds its object
//     deleted re-reads its current layout once it moved on, and otherwise
//     returns an error wrapping ErrNotFound (close-to-open consistency).
//
// Objects of a crash between an upload and its commit are leaked; a
// sweeper can find them with Store.Objects and remove those that the
// inode's layout does not reference and that are older than any commit in
// flight.
//
// # Memory
//
// Each File bounds its dirty block memory (FileOptions.MaxDirty); a Budget
// shared by the files of a mount bounds them together, and a file waiting
// for budget makes the holders write back even partly written blocks so
// that the wait ends. Clean blocks live in a BlockCache bounded in bytes,
// shared by the files, keyed by object; blocks just written bypass it
// (except a file's partial last block) so that a large copy does not flush
// it. Block buffers are recycled through a per-store bounded free list. A
// File with nothing dirty holds no goroutine, so a mount can keep many
// files open.
//
// # Flush and concurrency
//
// Flush waits for the blocks dirty when it is called and the uploads then
// in flight, not for later writes (a steady writer would starve it); the
// Commit it returns carries every upload done by then and the file's
// current size. A mount serializes Flush, the metadata commit and
// Committed per file.
package contents
