package workload_test

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ghba/ghba/routing/workload"
)

// The example of docs/trace-format.md.
const exampleTrace = `# ghba synthetic metadata trace
0 0 exists /home/
0 0 exists /home/my%20notes.txt
0.5 3 stat /home/my%20notes.txt
0.750012 3 open /home/my%20notes.txt
1 7 create /home/draft
1.000000001 7 rename /home/draft /home/final
2 7 mkdir /home/old
3 2 rename /home/old/ /home/archive/
4 2 readdir /home
`

func ExampleReader() {
	r := workload.NewReader(strings.NewReader(exampleTrace))
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%v %d %s %q %q dir=%v\n", rec.Time, rec.Client, rec.Op, rec.Path, rec.Path2, rec.IsDir())
	}
	// Output:
	// 0s 0 exists "/home" "" dir=true
	// 0s 0 exists "/home/my notes.txt" "" dir=false
	// 500ms 3 stat "/home/my notes.txt" "" dir=false
	// 750.012ms 3 open "/home/my notes.txt" "" dir=false
	// 1s 7 create "/home/draft" "" dir=false
	// 1.000000001s 7 rename "/home/draft" "/home/final" dir=false
	// 2s 7 mkdir "/home/old" "" dir=true
	// 3s 2 rename "/home/old" "/home/archive" dir=true
	// 4s 2 readdir "/home" "" dir=true
}

func ExampleIntensify() {
	cfg := workload.DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops, cfg.Clients = 100, 10, 3, 2
	w := workload.NewWriter(os.Stdout)
	err := workload.Intensify(2, cfg, func(r workload.Record) error {
		if r.Op == workload.OpExists {
			return nil // skip the namespace in this example
		}
		return w.Write(r)
	})
	if err == nil {
		err = w.Flush()
	}
	fmt.Println(err)
	// Output:
	// 0.000023811 3 open /s001/d1/d7/f71
	// 0.00069454 1 stat /s000/d1/d6/d8/f15
	// 0.000710551 3 stat /s001/d1/d2/f11
	// 0.000826591 1 stat /s000/d1/d6/d8/f15
	// 0.001001757 1 stat /s000/d2/d7/f12
	// 0.001360328 3 stat /s001/d1/f16
	// <nil>
}

func ExampleStats() {
	cfg := workload.DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops = 5000, 500, 50000
	s := workload.NewSummary()
	if err := workload.Generate(cfg, func(r workload.Record) error { s.Add(r); return nil }); err != nil {
		fmt.Println(err)
		return
	}
	share := s.Share(0.07)
	fmt.Println(s.Accesses(), "accesses; top 7% of metadata within 78–92%:", share >= 0.78 && share <= 0.92)
	// Output: 50000 accesses; top 7% of metadata within 78–92%: true
}
