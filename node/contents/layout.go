package contents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// DefaultBlockSize is the block size of new files: 4 MiB.
const DefaultBlockSize = 4 << 20

// MaxBlockSize is the largest block size a layout may name.
const MaxBlockSize = 1 << 30

// MaxLayoutLen is the largest encoded layout the metadata server stores
// (its limit on an inode's opaque blob).
const MaxLayoutLen = 1 << 20

// layoutVersion is the format version byte Encode writes first.
const layoutVersion = 1

// minExtentLen is the fewest bytes one encoded extent takes: a one-byte
// gap, a one-byte count and the 8-byte generation.
const minExtentLen = 1 + 1 + 8

// ErrCorruptLayout is wrapped by every error DecodeLayout returns.
var ErrCorruptLayout = errors.New("contents: corrupt layout")

// Layout maps a file's block indexes to the objects that hold them. A block
// absent from the layout is a hole: it reads as zeros.
type Layout struct {
	// BlockSize is the size of every block but the last in bytes; 0 means
	// DefaultBlockSize.
	BlockSize int64
	// Extents are sorted by First and do not overlap.
	Extents []Extent
}

// Extent says that blocks [First, First+Count) are the objects of
// generation Gen.
type Extent struct {
	First, Count uint64
	Gen          uint64
}

// BlockRef names one object of a file: a block index and the generation
// it was uploaded under.
type BlockRef struct {
	Block, Gen uint64
}

// BlockLen returns the block size in bytes: BlockSize, or DefaultBlockSize
// when BlockSize is 0.
func (l Layout) BlockLen() int64 {
	if l.BlockSize <= 0 {
		return DefaultBlockSize
	}
	return l.BlockSize
}

// DecodeLayout decodes a layout that Encode produced. A nil or empty b is
// the layout of a file without blocks, with the default block size. Any
// other input that is not a valid encoding returns an error wrapping
// ErrCorruptLayout; DecodeLayout never panics.
func DecodeLayout(b []byte) (Layout, error) {
	if len(b) == 0 {
		return Layout{BlockSize: DefaultBlockSize}, nil
	}
	if b[0] != layoutVersion {
		return Layout{}, fmt.Errorf("%w: format version %d (want %d)", ErrCorruptLayout, b[0], layoutVersion)
	}
	b = b[1:]
	bs, n := binary.Uvarint(b)
	if n <= 0 {
		return Layout{}, fmt.Errorf("%w: bad block size", ErrCorruptLayout)
	}
	b = b[n:]
	if bs > MaxBlockSize {
		return Layout{}, fmt.Errorf("%w: block size %d over %d", ErrCorruptLayout, bs, MaxBlockSize)
	}
	l := Layout{BlockSize: int64(bs)}
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return Layout{}, fmt.Errorf("%w: bad extent count", ErrCorruptLayout)
	}
	b = b[n:]
	if count > uint64(len(b)/minExtentLen) {
		return Layout{}, fmt.Errorf("%w: %d extents in %d bytes", ErrCorruptLayout, count, len(b))
	}
	maxBlocks := uint64(math.MaxInt64 / l.BlockLen())
	if count > 0 {
		l.Extents = make([]Extent, 0, count)
	}
	var end uint64
	for i := uint64(0); i < count; i++ {
		gap, n := binary.Uvarint(b)
		if n <= 0 {
			return Layout{}, fmt.Errorf("%w: extent %d: bad first block", ErrCorruptLayout, i)
		}
		b = b[n:]
		cnt, n := binary.Uvarint(b)
		if n <= 0 {
			return Layout{}, fmt.Errorf("%w: extent %d: bad count", ErrCorruptLayout, i)
		}
		b = b[n:]
		if len(b) < 8 {
			return Layout{}, fmt.Errorf("%w: extent %d: short generation", ErrCorruptLayout, i)
		}
		gen := binary.LittleEndian.Uint64(b)
		b = b[8:]
		switch {
		case cnt == 0:
			return Layout{}, fmt.Errorf("%w: extent %d: no blocks", ErrCorruptLayout, i)
		case gen == 0:
			return Layout{}, fmt.Errorf("%w: extent %d: generation 0", ErrCorruptLayout, i)
		case gap > maxBlocks-end || cnt > maxBlocks-end-gap:
			return Layout{}, fmt.Errorf("%w: extent %d: blocks beyond the largest file", ErrCorruptLayout, i)
		}
		first := end + gap
		l.Extents = append(l.Extents, Extent{First: first, Count: cnt, Gen: gen})
		end = first + cnt
	}
	if len(b) != 0 {
		return Layout{}, fmt.Errorf("%w: %d trailing bytes", ErrCorruptLayout, len(b))
	}
	return l, nil
}

// Encode returns the compact binary form of l: a format version byte, the
// block size, the extent count, then per extent the gap from the previous
// extent's end, the count (varints) and the 8-byte generation. A file
// written sequentially in one go is one extent whatever its size.
// DecodeLayout(l.Encode()) equals l for every valid l.
func (l Layout) Encode() []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(l.Extents)*(2*binary.MaxVarintLen64+8))
	b = append(b, layoutVersion)
	b = binary.AppendUvarint(b, uint64(l.BlockSize))
	b = binary.AppendUvarint(b, uint64(len(l.Extents)))
	var end uint64
	for _, e := range l.Extents {
		b = binary.AppendUvarint(b, e.First-end)
		b = binary.AppendUvarint(b, e.Count)
		b = binary.LittleEndian.AppendUint64(b, e.Gen)
		end = e.First + e.Count
	}
	return b
}

// Clone returns a copy of l that shares no memory with it.
func (l Layout) Clone() Layout {
	return Layout{BlockSize: l.BlockSize, Extents: slices.Clone(l.Extents)}
}

// Blocks returns the number of blocks l references.
func (l Layout) Blocks() uint64 {
	var n uint64
	for _, e := range l.Extents {
		n += e.Count
	}
	return n
}

// Refs returns every object l references, in block order.
func (l Layout) Refs() []BlockRef {
	refs := make([]BlockRef, 0, l.Blocks())
	for _, e := range l.Extents {
		for b := e.First; b < e.First+e.Count; b++ {
			refs = append(refs, BlockRef{Block: b, Gen: e.Gen})
		}
	}
	return refs
}

// find returns the index of the first extent that ends after block.
func (l Layout) find(block uint64) int {
	return sort.Search(len(l.Extents), func(i int) bool {
		e := l.Extents[i]
		return e.First+e.Count > block
	})
}

// Gen returns the generation of block, and false if block is a hole.
func (l Layout) Gen(block uint64) (gen uint64, ok bool) {
	i := l.find(block)
	if i < len(l.Extents) && l.Extents[i].First <= block {
		return l.Extents[i].Gen, true
	}
	return 0, false
}

// Set makes block the object of generation gen, splitting the extent that
// held it and joining equal neighbours.
func (l *Layout) Set(block, gen uint64) {
	i := l.find(block)
	var repl [3]Extent
	r := repl[:0]
	lo, hi := i, i // l.Extents[lo:hi] are replaced by r
	if i < len(l.Extents) && l.Extents[i].First <= block {
		e := l.Extents[i]
		if e.Gen == gen {
			return
		}
		hi = i + 1
		if e.First < block {
			r = append(r, Extent{First: e.First, Count: block - e.First, Gen: e.Gen})
		}
		r = append(r, Extent{First: block, Count: 1, Gen: gen})
		if end := e.First + e.Count; block+1 < end {
			r = append(r, Extent{First: block + 1, Count: end - block - 1, Gen: e.Gen})
		}
	} else {
		r = append(r, Extent{First: block, Count: 1, Gen: gen})
	}
	// Join with the neighbours when contiguous and of the same generation.
	if lo > 0 {
		p := l.Extents[lo-1]
		if p.Gen == r[0].Gen && p.First+p.Count == r[0].First {
			r[0] = Extent{First: p.First, Count: p.Count + r[0].Count, Gen: p.Gen}
			lo--
		}
	}
	if hi < len(l.Extents) {
		n := l.Extents[hi]
		last := &r[len(r)-1]
		if n.Gen == last.Gen && last.First+last.Count == n.First {
			last.Count += n.Count
			hi++
		}
	}
	l.Extents = slices.Replace(l.Extents, lo, hi, r...)
}

// Truncate drops every block at or beyond ceil(size/BlockSize): the blocks
// that hold no byte below size. The block that holds the last byte stays.
func (l *Layout) Truncate(size int64) {
	if size < 0 {
		size = 0
	}
	bs := l.BlockLen()
	keep := uint64(size / bs)
	if size%bs != 0 {
		keep++
	}
	i := l.find(keep) // first extent ending after keep
	if i < len(l.Extents) && l.Extents[i].First < keep {
		l.Extents[i].Count = keep - l.Extents[i].First
		i++
	}
	clear(l.Extents[i:])
	l.Extents = l.Extents[:i]
	if len(l.Extents) == 0 {
		l.Extents = nil
	}
}

// Dropped returns the objects old references and new does not, in block
// order: after new replaces old in the metadata, these objects are garbage
// (no committed layout references them, and objects are never reused).
func Dropped(old, new Layout) []BlockRef {
	var out []BlockRef
	drop := func(lo, hi, gen uint64) {
		for b := lo; b < hi; b++ {
			out = append(out, BlockRef{Block: b, Gen: gen})
		}
	}
	j := 0
	for _, e := range old.Extents {
		end := e.First + e.Count
		for j < len(new.Extents) && new.Extents[j].First+new.Extents[j].Count <= e.First {
			j++
		}
		pos := e.First
		for k := j; k < len(new.Extents) && new.Extents[k].First < end; k++ {
			n := new.Extents[k]
			lo, hi := max(pos, n.First), min(end, n.First+n.Count)
			drop(pos, lo, e.Gen) // a hole in new
			if n.Gen != e.Gen {
				drop(lo, hi, e.Gen)
			}
			pos = hi
		}
		drop(pos, end, e.Gen)
	}
	return out
}

// Commit is what a File's Flush asks the metadata server to apply to the
// file's inode (with Merge).
type Commit struct {
	// Blocks maps each block uploaded since the last commit to its new
	// generation.
	Blocks map[uint64]uint64
	// Truncated says the file was truncated since the last commit, to
	// TruncSize at the smallest.
	Truncated bool
	// TruncSize is the smallest size the file was truncated to; meaningful
	// only when Truncated.
	TruncSize int64
	// Size is the file's size as the writer sees it.
	Size int64
}

// Merge applies c to the server's current layout and size (another mount
// may have committed since this file's contents were read): the truncation
// first when c.Truncated, then c.Blocks. The size is c.Size when truncated,
// else the larger of curSize and c.Size. Concurrent writers of one file
// thus get last-close-wins per block. cur is not modified.
func Merge(cur Layout, curSize int64, c *Commit) (Layout, int64) {
	l := cur.Clone()
	size := curSize
	if c == nil {
		return l, size
	}
	if c.Truncated {
		l.Truncate(c.TruncSize)
		size = c.Size
	} else if c.Size > size {
		size = c.Size
	}
	blocks := make([]uint64, 0, len(c.Blocks))
	for b := range c.Blocks {
		blocks = append(blocks, b)
	}
	slices.Sort(blocks)
	for _, b := range blocks {
		l.Set(b, c.Blocks[b])
	}
	return l, size
}
