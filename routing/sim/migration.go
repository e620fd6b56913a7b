package sim

import (
	"fmt"
	"slices"

	"github.com/ghba/ghba/routing"
)

// MigrationConfig is one server join to measure (G-HBA §2.4, Fig. 5).
type MigrationConfig struct {
	// Servers is N, the number of servers before the join.
	Servers int
	// MaxGroup is M for G-HBA and for the hash-placement baseline.
	MaxGroup int
}

// MigrationResult counts the filter replicas that must move when one
// server joins a system of N (G-HBA Fig. 5).
type MigrationResult struct {
	Servers  int `json:"servers"`
	MaxGroup int `json:"max_group"`
	// GroupSizeBefore is M', the size of the group the newcomer joins
	// before the join; Origins = N − M' replicas live in that group.
	GroupSizeBefore int `json:"group_size_before"`
	Origins         int `json:"origins"`
	// HBA: the newcomer needs a replica of every server's filter (N).
	HBA int `json:"hba"`
	// Hash: replicas whose holder members[hash(origin) mod M'] changes
	// when the group grows to M'+1 (routing.HashHolder).
	Hash int `json:"hash"`
	// GHBA: replicas moved by Assignment.AddMember, the light-weight
	// migration (each member hands over current − (N−M')/(M'+1)).
	GHBA int `json:"ghba"`
	// Expectations: (N−M')·M'/(M'+1) for hashing, (N−M')/(M'+1) for G-HBA.
	HashExpected float64 `json:"hash_expected"`
	GHBAExpected float64 `json:"ghba_expected"`
	// NewcomerReplicas is what the newcomer holds after the join (equal to
	// GHBA unless its group was empty).
	NewcomerReplicas int `json:"newcomer_replicas"`
	// OtherGroupCopies is the number of other groups that must store a
	// replica of the newcomer's own filter (one copy each, the same for
	// hash placement; not a migration).
	OtherGroupCopies int `json:"other_group_copies"`
	// IDBFAMisroutes counts origins whose IDBFA lookup, after the moves
	// were applied to it, is not a unique hit on the new holder.
	IDBFAMisroutes int `json:"idbfa_misroutes"`
}

// Migration simulates one server joining a system of cfg.Servers servers
// grouped by Groups(N+1, M): the newcomer is server N and joins the group
// that Groups puts it in. It uses the real structures: a FilterArray for
// HBA's copies, HashHolder before and after, and an Assignment and IDBFA
// for G-HBA.
func Migration(cfg MigrationConfig) (MigrationResult, error) {
	n, mg := cfg.Servers, cfg.MaxGroup
	if n < 1 || mg < 1 {
		return MigrationResult{}, fmt.Errorf("sim: migration with %d servers, max group %d: %w", n, mg, ErrConfig)
	}
	res := MigrationResult{Servers: n, MaxGroup: mg}
	ids := make([]string, n+1)
	for i := range ids {
		ids[i] = serverID(i)
	}
	newcomer := ids[n]
	groups := Groups(n+1, mg)
	var group []int
	for _, g := range groups {
		if slices.Contains(g, n) {
			group = g
		}
	}
	var before []string // members before the join, sorted
	inGroup := make(map[string]bool)
	for _, s := range group {
		inGroup[ids[s]] = true
		if s != n {
			before = append(before, ids[s])
		}
	}
	slices.Sort(before)
	after := slices.Clone(before)
	after = append(after, newcomer)
	slices.Sort(after)
	var origins []string
	for _, id := range ids[:n] {
		if !inGroup[id] {
			origins = append(origins, id)
		}
	}
	mp := len(before)
	res.GroupSizeBefore, res.Origins = mp, len(origins)
	res.OtherGroupCopies = len(groups) - 1
	res.GHBAExpected = float64(len(origins)) / float64(mp+1)
	res.HashExpected = float64(len(origins)) * float64(mp) / float64(mp+1)
	if mp == 0 {
		// A new group: every replica is copied to the newcomer either way.
		res.HashExpected = float64(len(origins))
	}

	// HBA: the newcomer builds the full array of every server's filter.
	g, err := routing.NewGeometry(64, 8, 0, routing.HashXX)
	if err != nil {
		return res, fmt.Errorf("sim: migration geometry: %w", err)
	}
	arr := routing.NewFilterArray(g)
	f := routing.NewFilter(g)
	for _, id := range ids[:n] {
		if err := arr.Add(id, f); err != nil {
			return res, fmt.Errorf("sim: hba copy: %w", err)
		}
		res.HBA++
	}

	// Hash placement: recompute every origin's holder.
	for _, o := range origins {
		if routing.HashHolder(o, before) != routing.HashHolder(o, after) {
			res.Hash++
		}
	}

	// G-HBA: the group's assignment and IDBFA, then the join.
	a := routing.NewAssignment()
	for _, m := range before {
		a.AddMember(m)
	}
	for _, o := range origins {
		a.AddOrigin(o)
	}
	_, hi := a.Balance()
	idGeo, err := routing.NewGeometry(max(hi, 1), 16, 0, routing.HashXX)
	if err != nil {
		return res, fmt.Errorf("sim: IDBFA geometry: %w", err)
	}
	x := routing.NewIDBFA(idGeo)
	for _, m := range before {
		if err := x.AddMember(m); err != nil {
			return res, fmt.Errorf("sim: IDBFA: %w", err)
		}
		for _, o := range a.Held(m) {
			if err := x.Assign(m, o); err != nil {
				return res, fmt.Errorf("sim: IDBFA: %w", err)
			}
		}
	}
	// A newcomer alone in a new group (M' = 0) receives every origin's
	// replica: AddMember moves the unassigned ones to it.
	moves := a.AddMember(newcomer)
	res.GHBA = len(moves)
	if err := x.AddMember(newcomer); err != nil {
		return res, fmt.Errorf("sim: IDBFA: %w", err)
	}
	for _, mv := range moves {
		if mv.From != "" {
			if err := x.Unassign(mv.From, mv.Origin); err != nil {
				return res, fmt.Errorf("sim: IDBFA: %w", err)
			}
		}
		if err := x.Assign(mv.To, mv.Origin); err != nil {
			return res, fmt.Errorf("sim: IDBFA: %w", err)
		}
	}
	res.NewcomerReplicas = a.Load(newcomer)
	for _, o := range origins {
		h, _ := a.HolderOf(o)
		if r := x.Lookup(o); !r.Hit() || r.ID != h {
			res.IDBFAMisroutes++
		}
	}
	return res, nil
}
