// Package cachesim replays a metadata trace against client metadata caches
// to compare the caching and prefetching algorithms of the Nexus paper (Gu
// et al., "A Novel Weighted-Graph-Based Grouping Algorithm for Metadata
// Prefetching", IEEE Trans. Computers 2010): LRU, LFU, MRU, First
// Successor, Last Successor, Noah, Recent Popularity, probability-based
// successor group prediction (PG1, PG2), Nexus (package nexus) and OPT
// (Belady's MIN), as in its §5.
//
// The model (§5.2, simplified): every client has its own cache of a
// fraction of the distinct paths it accesses (its working set). Every
// timed trace record is an access of its path (see Trace). A hit costs a
// memory access; a miss sends one request to the metadata server, which
// returns the path's metadata and, for the prefetching algorithms, its
// prefetch group (prefetched entries occupy cache space behind the demanded
// one; paths deleted meanwhile are not prefetched). The server has one LRU
// cache, shared by all clients; what it misses costs a disk read. Writes go
// to the server even when cached, and write-invalidate (§5.2: the paper
// adopts cooperative caching with write-invalidate) removes the copies of
// other clients, which costs the writer an extra round trip and two
// messages per copy (Fig. 16). Cooperative caching itself (N-chance
// forwarding), queueing at the servers and the number of servers and
// clients of Figs. 14, 15 and 17 are not modelled: the response time is
// the mean latency of an unloaded system.
//
// Run replays every Spec in one pass; predictors whose predictions do not
// depend on the cache (a Nexus graph, PG's counts) are shared by the specs
// that use them. Nothing here is safe for concurrent use; there is no
// global state.
package cachesim
