// Package nexus holds the relationship graph of Nexus, the weighted-graph
// metadata prefetching algorithm of Gu, Wang, Zhu, Jiang and Shang, "A Novel
// Weighted-Graph-Based Grouping Algorithm for Metadata Prefetching" (IEEE
// Trans. Computers, 2010; "the paper" below).
//
// A Graph records a stream of metadata accesses (paths, or any comparable
// key). It keeps a look-ahead history window of the last Window accesses
// (§4.2, default 5 after §4.5.2); on every access j it adds weight to the
// edge (i, j) from every entry i ≠ j of the window, by the entry's distance
// to j and the chosen Assignment (§4.5.1: identical, linear decremental —
// the default —, polynomial or exponential decremental; Fig. 6 gives the
// pseudocode). When an addition would overflow MaxWeight, the out-edges of
// the vertex are renumbered 0…N−1 in their order (§4.5.4, Fig. 11), which
// keeps every vertex's order of successors. Successors returns the
// prefetch group of §4.3/§4.5.2: the n strongest successors of a key,
// strongest first (default group size 2).
//
// Memory is bounded, which the paper leaves open: at most MaxVertices
// vertices (the least recently accessed vertex is evicted with its
// out-edges) and MaxOutEdges out-edges per vertex (a new successor replaces
// the weakest edge). Stats reports the counts and a byte estimate.
//
// Client-oriented grouping (§4.5.3) is the caller's choice: keep one Graph
// per client stream; server-oriented grouping feeds every client's accesses
// to a single Graph.
//
// A Graph starts no goroutines and has no global state. It is not safe for
// concurrent use: the caller serializes Access, Remove and Reset (a live
// cache embeds a Graph and uses it under its own lock); the read-only
// methods (Successors, AppendSuccessors, Edges, Weight, Len, Stats, Config)
// may run concurrently with each other.
//
// Subpackage cachesim replays metadata traces against client caches with
// the paper's baselines and Nexus (`ghba sim nexus`).
package nexus
