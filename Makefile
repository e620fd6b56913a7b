# ghba — build, test, benchmark and demo targets.
GO        ?= go
BIN       := bin/ghba
PKGS      := ./...
BENCHTIME ?= 1s
# Link only hashicorp/go-metrics (raft-boltdb's compat layer would pull in armon/go-metrics).
TAGS      := -tags hashicorpmetrics

.PHONY: all build image test bench scale scale-load demo groups-bench compare-etcd mount-bench pjdfstest sim-demo fuzz vet fmt clean chaos chaos-broken formation

all: build

## build: static binary in bin/ghba
build:
	CGO_ENABLED=0 $(GO) build $(TAGS) -trimpath -o $(BIN) ./cmd/ghba

## image: the container image IMAGE (default ghba:latest) FROM scratch from the
## static binary (deploy/Dockerfile; nothing is pulled); deploy/compose.yaml runs it
IMAGE ?= ghba:latest
image: build
	DOCKER_BUILDKIT=0 docker build -q -f deploy/Dockerfile -t $(IMAGE) bin

## test: vet, then every test with the race detector (the README's test command); the
## in-process group tests (package node) and the container fault suite (cmd/ghba/chaos,
## short run) after the rest, each alone: on 2 cores, the leaders of their Raft groups lost
## their leases while the process tests of cmd/ghba ran beside them; last, pjdfstest's
## quick subset through a mount (skipped with a message without root, FUSE or the suite's
## source, unless GHBA_REQUIRE_PJDFSTEST is set)
test:
	$(GO) vet $(TAGS) $(PKGS)
	$(GO) test $(TAGS) -race -count=1 -timeout 40m $$($(GO) list $(PKGS) | grep -v -e '/cmd/ghba/chaos$$' -e '/ghba/node$$')
	$(GO) test $(TAGS) -race -count=1 -timeout 20m ./node/
	$(GO) test $(TAGS) -race -count=1 -timeout 15m ./cmd/ghba/chaos/
	QUICK=1 MISSING_OK=1 scripts/pjdfstest.sh

## chaos: the container fault suite with random faults for DURATION (default 10m) on
## CHAOS_GROUPS groups of 3 nodes (default 3); needs docker. `make test` runs its short
## form (one fault of each kind). CHAOS_AUTO=1: 9 nodes with group auto (max 3 per
## group), split-kill among the faults. CHAOS_DOUBLE=1 (the default here; 0 to turn it
## off): one fault slot in three overlaps two faults. The run fails unless porcupine
## answers Ok. A failed run prints the directory it keeps the history, the
## counterexample, the porcupine visualization and the node logs in.
DURATION      ?= 10m
CHAOS_GROUPS  ?= 3
CHAOS_AUTO    ?= 0
CHAOS_DOUBLE  ?= 1
CHAOS_TIMEOUT ?= 3h
chaos:
	GHBA_CHAOS_DURATION=$(DURATION) GHBA_CHAOS_GROUPS=$(CHAOS_GROUPS) GHBA_CHAOS_AUTO=$(CHAOS_AUTO) \
		GHBA_CHAOS_DOUBLE=$(CHAOS_DOUBLE) \
		$(GO) test $(TAGS) -count=1 -run '^TestChaos$$' -timeout $(CHAOS_TIMEOUT) -v ./cmd/ghba/chaos/

## chaos-broken: the short fault suite against a server built BROKEN on purpose
## (-tags ghba_broken; BROKEN=stale: stale directory listings, BROKEN=early-ack: creates
## acknowledged before they are durable); passes only if the suite catches it with a
## porcupine counterexample, and keeps the evidence. Not part of make test.
BROKEN ?= stale
chaos-broken:
	GHBA_CHAOS_BROKEN=$(BROKEN) \
		$(GO) test $(TAGS) -count=1 -run '^TestChaosBroken$$' -timeout 1h -v ./cmd/ghba/chaos/

## formation: RUNS rounds (default 20) of 9 agent processes with group auto (max 3 per
## group) started at once; each must settle into 3 groups of 3 with 2 filter replicas per
## member while a reader looks the paths already created up through every serving node,
## none failing; prints a table, settle p50/max and a "formation:" summary line. Not part
## of make test. GHBA_FORMATION_BIN=PATH measures another ghba binary (e.g. an older build).
RUNS ?= 20
formation:
	GHBA_FORMATION_RUNS=$(RUNS) \
		$(GO) test $(TAGS) -race=false -count=1 -run '^TestProcessFormation$$' -timeout 90m -v ./cmd/ghba/

## bench: the tracked benchmarks (no -race)
bench:
	$(GO) test $(TAGS) -run=NONE -bench=. -benchmem -benchtime=$(BENCHTIME) ./routing/... ./rpc/... ./node/...

## scale: scale-out at equal CPU per node (cmd/ghba/scale, needs docker): the bench's mdtest
## phases against SCALE_NODES nodes (default 1,2,4,8) at SCALE_R (default 1,3), each node a
## container of the image limited to SCALE_CPUS cores (default 0.1), the client in its own
## container with SCALE_CLIENTS tasks per node (default 32); prints the table, writes
## SCALE_OUT/scale.csv and SCALE_OUT/scale.png (default out/scale) with HBA Fig. 16 beside it.
SCALE_NODES   ?= 1,2,4,8
SCALE_R       ?= 1,3
SCALE_CPUS    ?= 0.1
SCALE_CLIENTS ?= 32
SCALE_ITEMS   ?= 20
SCALE_OUT     ?= $(CURDIR)/out/scale
scale:
	GHBA_SCALE=1 GHBA_SCALE_NODES=$(SCALE_NODES) GHBA_SCALE_REPLICATION=$(SCALE_R) GHBA_SCALE_CPUS=$(SCALE_CPUS) \
		GHBA_SCALE_CLIENTS=$(SCALE_CLIENTS) GHBA_SCALE_ITEMS=$(SCALE_ITEMS) GHBA_SCALE_OUT=$(SCALE_OUT) \
		$(GO) test $(TAGS) -count=1 -run '^TestScaleOut$$' -timeout 40m -v ./cmd/ghba/scale/

## scale-load: HBA Figs. 15-17 (cmd/ghba/scale, needs docker): against SCALE_NODES nodes at
## LOAD_R (default 1), each limited to SCALE_CPUS cores, the file phases with LOAD_CLIENTS
## client tasks in all (default 4,16,64,256), one cluster per node count; prints the table,
## writes SCALE_OUT/load.csv and SCALE_OUT/load.png (mean latency, throughput and speedup
## against the clients, a line per node count).
LOAD_R       ?= 1
LOAD_CLIENTS ?= 4,16,64,256
LOAD_PHASES  ?= tree-create,file-create,file-stat,file-remove,tree-remove
scale-load:
	GHBA_SCALE=1 GHBA_SCALE_NODES=$(SCALE_NODES) GHBA_SCALE_REPLICATION=$(LOAD_R) GHBA_SCALE_CPUS=$(SCALE_CPUS) \
		GHBA_SCALE_WORKLOADS=$(LOAD_CLIENTS) GHBA_SCALE_PHASES=$(LOAD_PHASES) GHBA_SCALE_ITEMS=$(SCALE_ITEMS) \
		GHBA_SCALE_OUT=$(SCALE_OUT) $(GO) test $(TAGS) -count=1 -run '^TestScaleOut$$' -timeout 60m -v ./cmd/ghba/scale/

## fuzz: run every decoder fuzzer for FUZZTIME each (default 30s)
FUZZTIME ?= 30s
fuzz:
	@for f in $$($(GO) test $(TAGS) -list 'Fuzz.*' ./routing/ | grep ^Fuzz); do \
		echo "== $$f"; $(GO) test -run=NONE -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) ./routing/ || exit 1; done
	@for p in ./routing/workload/ ./rpc/ ./rpc/internal/wire/ ./node/store/ ./node/raftmux/ ./node/shard/ ./fsm/; do \
		for f in $$($(GO) test $(TAGS) -list 'Fuzz.*' $$p | grep ^Fuzz); do \
			echo "== $$p $$f"; $(GO) test $(TAGS) -run=NONE -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s $$p || exit 1; done; done

## demo: build, start a 3-node loopback cluster from testdata/, load and look up
## a few thousand paths through every node, print levels and hops, stop it
demo: build
	GHBA_BIN=$(BIN) scripts/demo.sh

## groups-bench: G-HBA (groups of 3), without and with a filter memory budget, against HBA on loopback clusters of
## 3, 6, 9 and 12 agent processes: lookup levels, hops, filter memory, replicas
groups-bench: build
	GHBA_BIN=$(BIN) scripts/groups-bench.sh

## compare-etcd: a 3-member etcd (Debian's etcd-server, installed if missing) and the
## testdata/ ghba cluster, one after the other on this machine: scripts/etcdbench
## (put, serializable and linearizable get) against ghba bench (create, stat), same
## CMP_CONCURRENCY (16) and CMP_PATHS (20000); one side-by-side table with the load
compare-etcd: build
	GHBA_BIN=$(BIN) scripts/compare-etcd.sh

## mount-bench: ghba mount against the Go client (mkdir, create, stat, unlink at
## CONC 16, with whole-machine CPU per operation) and against the local disk (1 GiB
## sequential write and read), and the mount's memory while copying 100,000 files;
## with MDTEST=1 also mdtest's phases through both (ghba bench --phases mdtest -c CONC
## -n MDTEST_ITEMS --iterations MDTEST_ITERATIONS, defaults 1000 and 2) and mdtest's
## summary; the testdata/ cluster, one sitting (needs root and FUSE)
mount-bench: build
	GHBA_BIN=$(BIN) scripts/mount-bench.sh

## pjdfstest: the POSIX conformance suite pjdfstest through a mount of the testdata/
## cluster (R=3), built from PJDFSTEST_TOOLS (default ../shared/tools/pjdfstest); one line
## per test file and a summary per directory; ONLY=REGEX runs the matching files, QUICK=1
## all but the known failures and the slowest files, as `make test` does (needs root,
## FUSE, autoconf, automake, gcc, perl)
pjdfstest: build
	GHBA_BIN=$(BIN) scripts/pjdfstest.sh

## sim-demo: the simulator's quick mode on generated traces
sim-demo: build
	./$(BIN) sim pba --quick --servers 10 --bits-per-file 8
	./$(BIN) sim hba --quick --servers 10 --lru-entries 300
	./$(BIN) sim ghba --quick --servers 30 --max-group 6
	./$(BIN) sim migration --quick --servers 30 --max-group 6

vet:
	$(GO) vet $(TAGS) $(PKGS)

fmt:
	gofmt -l -w .

clean:
	rm -rf bin
