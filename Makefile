# gpusampler — build, run, test, bench.
GO       ?= go
BIN      := bin/gpusampler
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.buildCommit=$(COMMIT)
# go-nvml's headers mark many functions deprecated; gcc would print ~150
# warnings on every cgo build. Silenced for our build only.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# Nested modules: the Telegraf plugin (telegraf/) and the test modules
# (heavy test-only peers live in their own go.mod).
NESTED   := telegraf $(patsubst %/go.mod,%,$(wildcard test/*/go.mod))

.PHONY: build run test test-nocgo bench nvml-calls tree-rss fleet-sim lint generate clean gpu-check gpu-check-build gpu-check-bench

build:
	CGO_ENABLED=1 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/gpusampler

## run: the main job — live samples on stdout (simulated GPUs when no driver).
run: build
	./$(BIN) run

## test: everything, with the race detector, integration tests included.
## First scripts/test-deps.sh: as root it installs the Debian packages whose
## programs the tests start (silent when all are there); otherwise it stops
## with the one command to run.
## TEST_TIMEOUT is a liveness bound per test binary (a hung test fails
## there), far above what any package takes on a loaded machine.
TEST_TIMEOUT ?= 25m
test:
	@scripts/test-deps.sh
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@for m in $(NESTED); do echo "== $$m"; (cd $$m && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...) || exit 1; done

## test-nocgo: everything but the NVML backend builds and passes without cgo.
test-nocgo:
	@scripts/test-deps.sh
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

## bench: Go benchmarks, 5 runs each, summarised as medians and same-run ratios.
bench:
	@mkdir -p out
	$(GO) test -run '^$$' -bench . -benchmem -count 5 -timeout 30m ./... | tee out/bench.txt
	$(GO) run ./bench/cmd/benchsummary < out/bench.txt

## nvml-calls: NVML calls per GPU per second by function and driver samples
## per call, counted by the fake driver (8 GPUs, default config, 60 s,
## steady state 10-60 s); GPUS, DURATION, SKIP_MS override.
nvml-calls:
	scripts/nvml-calls.sh

## tree-rss: memory of `run`'s process tree (the program and its output
## processes: RSS and PSS) on 8 simulated GPUs with four network outputs
## against real sinks (influxd, nats-server); GPUS, WARMUP, READINGS override.
tree-rss: build
	scripts/tree-rss.sh

## fleet-sim: FLEET_NODES (default 100) simulated nodes × FLEET_GPUS (8)
## publish through the NATS output with JetStream into a 3-server cluster
## (replicas 3) for FLEET_DURATION (30s) in FLEET_ENCODING (protobuf); a
## durable pull consumer reads it all back. FLEET_FAULTS=1 kills and restarts
## the stream leader and the consumer and partitions one node. Prints the
## figures and one summary line; fails on any loss or duplicate
## (test/fleet; `make test` runs the same code with 3 nodes).
FLEET_NODES ?= 100
fleet-sim:
	cd test/fleet && FLEET_NODES=$(FLEET_NODES) $(GO) run ./cmd/fleetsim

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet ./...
	@# Every module's go.mod/go.sum tidy: a dependency bumped in the main module
	@# leaves the nested modules that replace it stale ("updates to go.mod needed").
	@for m in . $(NESTED); do (cd $$m && $(GO) mod tidy -diff >/dev/null) || { echo "lint: $$m: go.mod/go.sum not tidy; run: (cd $$m && go mod tidy)"; exit 1; }; done

## gpu-check-build: build the GPU check here (cgo) into bin/, for a GPU machine
## without a Go toolchain (carry bin/ there).
gpu-check-build:
	CGO_ENABLED=1 $(GO) build -ldflags '$(LDFLAGS)' -o bin/gpucheck ./cmd/gpucheck
	CGO_ENABLED=1 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/gpusampler

## gpu-check: on a machine with an NVIDIA GPU, one call of at most 10 minutes:
## real-driver checks (every read, buffer periods, load/idle beside nvidia-smi,
## NVML calls at the default config, bench overhead); one report in
## $$OUT/report.md (or ./gpu-check-report/). Never changes clocks, limits or modes.
gpu-check:
	@test -x bin/gpucheck || $(MAKE) gpu-check-build
	scripts/gpu-check.sh

## gpu-check-bench: on a GPU machine, bench's sampling overhead alone (also
## part of gpu-check) on a torch load (ABBA pairs, ≥ 10, paired 95% CI) and a
## full bench report in $$OUT; at most ~4 minutes.
gpu-check-bench:
	@test -x $(BIN) || $(MAKE) gpu-check-build
	scripts/gpu-check-bench.sh

## generate: regenerate the record messages' and the plugin protocol's Go code (needs Debian's
## protobuf-compiler and the pinned protoc-gen-go v1.36.12 and
## protoc-gen-go-grpc v1.5.1 in GOPATH/bin), config.example.toml from the
## outputs' sample.conf fragments, and the sample.conf block of every output's
## and plugin's README.
generate:
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" $(GO) generate ./record/recordpb ./plugins/proto
	$(GO) generate ./internal/registry
	$(GO) run ./internal/readmegen/cmd/readmegen

clean:
	rm -rf bin out
