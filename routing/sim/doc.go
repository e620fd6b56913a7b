// Package sim is the trace-driven simulator of HBA and G-HBA (HBA §5–6,
// G-HBA §3). It replays a metadata trace (routing/workload records) against
// N simulated metadata servers built from the real routing structures —
// CountingFilter local filters, LRU lists and their filters, FilterArray
// replicas updated by deltas past a propagation threshold, the group
// Assignment and the analytical formulas of routing — and returns result
// structs.
//
// The package is pure: no disk, no network, no goroutines. Traces come in
// through a Source (a generator or an io.Reader); the command line in
// cmd/ghba does the file I/O, the tables, the CSV files and the plots.
//
// Model common to every simulation (HBA §5, G-HBA §3):
//   - The records up to the first timed one (the trace's `exists` records)
//     are the initial population. Every file, initial or created, is placed
//     on a server chosen uniformly at random (the papers' random placement)
//     and stays there: renames keep the home (HBA §4.2.2: no migration).
//   - Every request enters a server X chosen uniformly at random.
//   - stat, open and readdir of a present path are lookups of existing
//     files; create and mkdir of an absent path are lookups of new files
//     followed by the creation; unlink and rmdir delete; rename moves the
//     path and its descendants on their homes. A request for an absent path
//     that creates nothing counts as a lookup of a new file.
//   - The home touches the path in its LRU list on every access.
//   - Filters are replicated by real deltas (Filter.MarkDelta applied with
//     FilterArray.Apply) when the owner's changed share of bits reaches the
//     propagation threshold; one propagation is one update message.
//   - A replica array is probed with the unique-hit rule; the entry
//     server's own filters are always live (it never waits for its own
//     update), everything else is as stale as the threshold makes it.
//   - With G-HBA, GHBAConfig.MemoryBudget adds replicas beyond a server's
//     segment (group-mates first, then others; budget.go), as the server's
//     filter_memory_mb does.
package sim
