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

// Shards: each node joining brings the shard named after it; the FSM places
// R replicas of every shard and gives a leaving member's shards away.
func ExampleFSM_Shards() {
	f := fsm.New(fsm.Options{})
	geo, _ := routing.NewGeometry(1<<20, 8, 0, routing.HashXX)
	lru, _ := routing.NewGeometry(1000, 20, 0, routing.HashXX)
	entries := [][]byte{
		fsm.EncodeBootstrap(fsm.Config{Group: "g1", MaxGroupSize: 4, Filter: geo, LRUEntries: 1000, LRU: lru, Replication: 2}),
		fsm.EncodeAddMember(fsm.Member{ID: "a"}),
		fsm.EncodeAddMember(fsm.Member{ID: "b"}),
		fsm.EncodeAddMember(fsm.Member{ID: "c"}),
		fsm.EncodeSetStatus("c", fsm.StatusLeaving),
	}
	for i, e := range entries {
		if _, err := fsm.Result(f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e})); err != nil {
			fmt.Println(err)
		}
	}
	for _, sh := range f.Shards() {
		fmt.Printf("shard %s: owner %s, replicas %v\n", sh.ID, sh.Owner, sh.Replicas)
	}
	fmt.Println("b hosts", f.HostedBy("b"), "and owns", f.OwnedBy("b"))
	// Output:
	// shard a: owner a, replicas [a b]
	// shard b: owner b, replicas [a b]
	// shard c: owner a, replicas [a b]
	// b hosts [a b c] and owns [b]
}
