# mrmarket — every target builds with the libvirt_dlopen tag, so no libvirt
# headers are needed: libvirt.so.0 is loaded at run time (docs/PLATFORM.md).
GO          ?= go
TAGS        := libvirt_dlopen
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN         := bin/mrmarket

.PHONY: all build guest demo up test fmt vet staticcheck unit unit-alone experiments-race experiments benchonce faults e2e bench results mutations clean

all: build

build:
	$(GO) build -buildvcs=auto -tags $(TAGS) -o $(BIN) ./cli/mrmarket

## guest: the worker guest (hadoopvm/worker) that `cluster create --guest` boots:
## the distribution's kernel, an initramfs whose init is the static Go worker, and
## mrm-guest (input images), into $(GUEST_DIR); reading Debian's kernel needs root
GUEST_DIR ?= bin/guest
guest:
	bash .ci/guest.sh $(GUEST_DIR)

## demo: the whole market in one process, a scripted scenario in simulated time
demo: build
	./$(BIN) demo

## up: a persistent local market in ./.data (Ctrl-C to stop)
up: build
	./$(BIN) up --data .data

## test: gofmt, vet, staticcheck, every test with the race detector, then every benchmark once
# The simulator's experiments assert no time or CPU fraction (a virtual
# clock), and the benchmarks run once only to show they run: so the
# experiments without the race detector (one core, six minutes) run beside
# the Jockey builds under it and the benchmarks, their output kept until
# those end.
test: fmt vet staticcheck
	@fail=0; \
	$(MAKE) --no-print-directory unit-alone || fail=1; \
	mkdir -p $(ARTEFACTS); \
	$(MAKE) --no-print-directory experiments > $(ARTEFACTS)/experiments.log 2>&1 & exp=$$!; \
	$(MAKE) -k --no-print-directory experiments-race benchonce || fail=1; \
	wait $$exp || fail=1; \
	echo "== the experiments, run beside the benchmarks"; cat $(ARTEFACTS)/experiments.log; \
	exit $$fail

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet -tags $(TAGS) ./...

staticcheck:
	$(GO) run $(STATICCHECK) -tags $(TAGS) ./...

# Packages whose tests measure time or CPU fractions run each alone, not
# beside the others (go test runs packages side by side): the real QEMU
# guests' shares (agent/virt) and the attack suite's latency bounds would
# otherwise measure the machine's other tests. The worker guests' jobs
# (hadoopvm/workertest: TCG guests, which fill both cores) run alone too,
# so as not to slow those tests down. So does the dashboard's browser
# test: Chromium takes both cores while it renders, and the test bounds
# how soon a spend shows on the page. The experiments are
# single-goroutine simulations but for Jockey's C(p, a) builds: those run
# under the race detector, the whole package without it (the detector
# makes it five times slower and finds nothing to race).
ALONE = /agent/virt$$|/attack$$|/dashboard$$|/hadoopvm/sim/experiments$$|/hadoopvm/workertest$$
EXPERIMENTS = ./hadoopvm/sim/experiments/
# What tests keep for people to look at: the dashboard's screenshots.
ARTEFACTS ?= bin/test-artefacts
# The disk and network share tests measure throughput through the test's own
# devices (an NBD server, TCP peers), which the race detector slows below the
# speeds the tests set (a guest alone no longer fills the shared disk): they
# run without it; the enforcer is raced by the package's other tests.
IOSHARES := ^(TestDiskSharesOnRealGuests|TestDiskSharesOnNBDKit|TestNetShares)$$
# Each step prints what go test prints without -v, and under each package the
# tests it skipped and why (a suite skipped for want of libvirt, PostgreSQL or
# Chromium would otherwise print the same "ok" line as one that ran). A step
# that fails does not stop the later ones; unit fails at the end.
TESTREPORT = $(GO) run ./internal/testreport

unit: unit-alone experiments-race experiments

unit-alone:
	@fail=0; \
	$(TESTREPORT) $(GO) test -json -tags $(TAGS) -race -count=1 -timeout 30m $$($(GO) list -tags $(TAGS) ./... | grep -Ev '$(ALONE)') || fail=1; \
	$(TESTREPORT) $(GO) test -json -tags $(TAGS) -race -count=1 -timeout 30m -skip '$(IOSHARES)' ./agent/virt/ || fail=1; \
	$(TESTREPORT) $(GO) test -json -tags $(TAGS) -count=1 -timeout 30m -run '$(IOSHARES)' ./agent/virt/ || fail=1; \
	$(TESTREPORT) $(GO) test -json -tags $(TAGS) -race -count=1 -timeout 30m ./attack/ || fail=1; \
	$(TESTREPORT) $(GO) test -json -tags $(TAGS) -race -count=1 -timeout 30m ./hadoopvm/workertest/ || fail=1; \
	MRM_TEST_ARTEFACTS=$(CURDIR)/$(ARTEFACTS)/dashboard $(TESTREPORT) $(GO) test -json -tags $(TAGS) -race -count=1 -timeout 30m ./dashboard/ || fail=1; \
	exit $$fail

experiments-race:
	$(TESTREPORT) $(GO) test -json -tags $(TAGS) -race -count=1 -timeout 30m -run 'Jockey' $(EXPERIMENTS)

experiments:
	$(TESTREPORT) $(GO) test -json -tags $(TAGS) -count=1 -timeout 30m $(EXPERIMENTS)

## faults: the distributed market as separate processes (3 NATS nodes, 2 banks on a
## PostgreSQL primary + standby, 2 brokers, 3 simulated agents) while each is killed in turn
faults: build
	MRM_FAULTS=1 MRM_BIN=$(CURDIR)/$(BIN) $(GO) test -tags $(TAGS) -count=1 -run '^TestFaults$$' -v -timeout 20m ./faults/

## e2e: the market on real worker guests (TCG, 160 MiB): alice's and bob's clusters
## boot through `cluster create`, the agent governs them, and each case reports what
## the agent's shares predict beside what was measured (docs/E2E.md); minutes, alone
e2e: build
	MRM_E2E=1 MRM_BIN=$(CURDIR)/$(BIN) $(GO) test -tags $(TAGS) -count=1 -run '^TestE2E$$' -v -timeout 40m ./e2e/

## bench: every benchmark at its full size (the broker at 100,000 hosts, the simulator
## at 10,000, the market at 1,000; most of an hour on 2 cores), then one table of their
## headline figures with the goals and the new path's ratio to the old beside them.
## Each runs for BENCHTIME (1s): a benchmark whose one iteration takes longer runs once,
## a microbenchmark (a signature) enough times for its figure to mean something.
## BENCH narrows the set. One package at a time, so no benchmark measures another.
BENCH ?= .
BENCHTIME ?= 1s
bench:
	$(GO) run ./internal/benchtable $(GO) test -tags $(TAGS) -p 1 -v -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -timeout 90m ./...

# benchonce: every benchmark once at its small size (-short), so none rots
# unseen; make test runs it after the tests.
benchonce:
	$(GO) run ./internal/benchtable $(GO) test -tags $(TAGS) -p 1 -short -v -run '^$$' -bench . -benchtime 1x -timeout 30m ./...

## mutations: each conclusion test fails under the mutation of the mechanism it claims
## (hadoopvm/sim/experiments/mutations/*.patch, applied one at a time; a clean tree)
mutations:
	./hadoopvm/sim/experiments/mutations/check.sh

## results: every paper's experiment on the simulator → docs/RESULTS.md and docs/results/
results: build
	./$(BIN) sim results --out docs

clean:
	rm -rf bin
