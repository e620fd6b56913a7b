package routing

import "unsafe"

// LRU is the top level of HBA (§4.2.2, Fig. 4): a list of the names of
// recently visited files whose metadata is stored locally, and the LRU
// filter that represents exactly the files on that list. An overflow of the
// list evicts the least recently used name, which is an addition to and a
// deletion from the filter; that is why the filter is a counting filter.
//
// The filter's plain view (Filter) is what is replicated to all nodes: its
// change tracking tells the owner when the changed share of bits has passed
// the propagation threshold.
//
// The list lives in a node slab allocated up front and the index map is
// sized at capacity, so Touch does not allocate in steady state. The LRU
// keeps references to the path strings it is given. It is not safe for
// concurrent use; callers serialize access.
type LRU struct {
	cf    *CountingFilter
	nodes []lruNode        // slab; len = nodes in use or freed, cap = capacity
	index map[string]int32 // path -> slot
	head  int32            // most recently used, or -1
	tail  int32            // least recently used, or -1
	free  int32            // free list through next, or -1
	bytes int              // total length of the paths held
}

type lruNode struct {
	path       string
	prev, next int32
}

// NewLRU returns an empty LRU list of at most capacity paths whose filter
// has geometry g, typically NewGeometry(capacity, 20, 0, HashXX) (HBA uses
// 20 bits per file for the LRU filter). A capacity of zero (or less) gives a
// list that never holds anything. NewLRU panics if g is invalid.
func NewLRU(capacity int, g Geometry) *LRU {
	capacity = max(capacity, 0)
	if capacity > 1<<31-1 {
		panic("routing: LRU capacity over 2^31-1")
	}
	return &LRU{
		cf:    NewCountingFilter(g),
		nodes: make([]lruNode, 0, capacity),
		index: make(map[string]int32, capacity),
		head:  -1,
		tail:  -1,
		free:  -1,
	}
}

// Len returns the number of paths on the list.
func (l *LRU) Len() int { return len(l.index) }

// Cap returns the capacity of the list.
func (l *LRU) Cap() int { return cap(l.nodes) }

// Contains reports whether path is on the list (exactly, not through the
// filter). It does not change the recency order.
func (l *LRU) Contains(path string) bool {
	_, ok := l.index[path]
	return ok
}

// Filter returns the live plain view of the LRU filter (see
// CountingFilter.Filter): every path on the list tests positive.
func (l *LRU) Filter() *Filter { return l.cf.Filter() }

// Touch records a use of path: it moves path to the front of the list, or
// inserts it there (and into the filter) when absent. When the insertion
// overflows the list, the least recently used path is evicted, deleted from
// the filter and returned with ok = true.
func (l *LRU) Touch(path string) (evicted string, ok bool) {
	if i, hit := l.index[path]; hit {
		l.moveToFront(i)
		return "", false
	}
	if cap(l.nodes) == 0 {
		return "", false
	}
	var i int32
	switch {
	case l.free >= 0:
		i = l.free
		l.free = l.nodes[i].next
	case len(l.nodes) < cap(l.nodes):
		i = int32(len(l.nodes))
		l.nodes = l.nodes[:i+1]
	default: // full: reuse the tail's node
		i = l.tail
		evicted, ok = l.nodes[i].path, true
		l.unlink(i)
		delete(l.index, evicted)
		l.cf.Remove(evicted)
		l.bytes -= len(evicted)
	}
	l.nodes[i].path = path
	l.pushFront(i)
	l.index[path] = i
	l.cf.Add(path)
	l.bytes += len(path)
	return evicted, ok
}

// Remove deletes path from the list and the filter (for example when the
// file is deleted or migrates away). It reports whether path was listed.
func (l *LRU) Remove(path string) bool {
	i, ok := l.index[path]
	if !ok {
		return false
	}
	l.unlink(i)
	delete(l.index, path)
	l.cf.Remove(path)
	l.bytes -= len(path)
	l.nodes[i] = lruNode{next: l.free}
	l.free = i
	return true
}

// Paths returns the listed paths from the most to the least recently used.
func (l *LRU) Paths() []string {
	out := make([]string, 0, len(l.index))
	for i := l.head; i >= 0; i = l.nodes[i].next {
		out = append(out, l.nodes[i].path)
	}
	return out
}

// SizeBytes approximates the memory of the LRU: the counting filter
// (counters and plain view), the node slab, the index map (estimated at
// its Swiss-table layout: one control byte per slot, load factor 7/8) and
// the bytes of the paths held.
func (l *LRU) SizeBytes() int {
	const slot = unsafe.Sizeof("") + unsafe.Sizeof(int32(0)) + 4 // key, value, padding
	c := cap(l.nodes)
	mapBytes := int(slot+1) * c * 8 / 7
	return l.cf.SizeBytes() + c*int(unsafe.Sizeof(lruNode{})) + mapBytes + l.bytes
}

func (l *LRU) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
}

func (l *LRU) pushFront(i int32) {
	n := &l.nodes[i]
	n.prev, n.next = -1, l.head
	if l.head >= 0 {
		l.nodes[l.head].prev = i
	} else {
		l.tail = i
	}
	l.head = i
}

func (l *LRU) moveToFront(i int32) {
	if l.head == i {
		return
	}
	l.unlink(i)
	l.pushFront(i)
}
