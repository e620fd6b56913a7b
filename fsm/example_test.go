package fsm_test

import (
	"fmt"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/routing"
	"github.com/hashicorp/raft"
)

// The leader encodes commands and passes them to raft.Apply; every server's
// FSM applies them. Here the entries are applied directly.
func Example() {
	f := fsm.New(fsm.Options{OnChange: func(ev fsm.Event) {
		// Runs on raft's FSM goroutine: hand off, never block.
		for _, mv := range ev.Moves {
			if mv.To == "b" {
				fmt.Printf("b pulls the filter of %s from its origin\n", mv.Origin)
			}
		}
	}})
	geo, _ := routing.NewGeometry(1<<20, 8, 0, routing.HashXX)
	lru, _ := routing.NewGeometry(1000, 20, 0, routing.HashXX)
	entries := [][]byte{
		fsm.EncodeBootstrap(fsm.Config{Group: "g1", MaxGroupSize: 3, Filter: geo, LRUEntries: 1000, LRU: lru}),
		fsm.EncodeAddMember(fsm.Member{ID: "a", RPCAddr: "10.0.0.1:7000"}),
		fsm.EncodeSetOrigins([]string{"x1", "x2", "x3", "x4"}),
		fsm.EncodeAddMember(fsm.Member{ID: "b", RPCAddr: "10.0.0.2:7000"}),
		fsm.EncodeAddMember(fsm.Member{ID: "c"}),
		fsm.EncodeAddMember(fsm.Member{ID: "d"}),
	}
	for i, e := range entries {
		res, err := fsm.Result(f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e}))
		if err != nil {
			fmt.Printf("entry %d (%s): %v\n", res.Index, res.Type, err)
		}
	}
	lo, hi := f.Balance()
	fmt.Println("held by a:", f.Held("a"), "balance:", lo, hi, "migrated:", f.ReplicasMigrated())
	// Output:
	// b pulls the filter of x4 from its origin
	// b pulls the filter of x2 from its origin
	// entry 6 (add-member): add-member: 3 members + 1 new > 3: fsm: group full
	// held by a: [x1 x3] balance: 1 2 migrated: 3
}
