package nexus_test

import (
	"fmt"

	"github.com/ghba/ghba/routing/nexus"
)

// A client cache keeps one Graph per client stream (client-oriented
// grouping, §4.5.3), records every metadata access, and on a miss fetches
// the missed path with its prefetch group.
func ExampleGraph() {
	g, err := nexus.New[string](nexus.Config{Window: 2}) // linear weights, the paper's Fig. 7a
	if err != nil {
		panic(err)
	}
	for _, p := range []string{"/A", "/B", "/C", "/A", "/D", "/C", "/B", "/A"} {
		g.Access(p)
	}
	fmt.Println(g.Successors("/A", 1), g.Successors("/A", 2)) // Table 2, N2
	fmt.Println(g.Edges("/A"))
	s := g.Stats()
	fmt.Println(s.Vertices, s.Edges)
	// Output:
	// [/C] [/C /D]
	// [{/C 18} {/D 10} {/B 10}]
	// 4 10
}
