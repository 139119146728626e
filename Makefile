# meshfed — run `make help` for the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO       ?= go
TOOL     := $(GO) tool -modfile=tools/go.mod
BIN      := $(CURDIR)/bin
# vtproto's code (equality, unmarshalling that aliases the buffer) is for
# the federation messages alone; the ADS messages use none of it.
VTPROTOS := $(wildcard federation/federationpb/*.proto)
PROTOS   := $(VTPROTOS) $(wildcard internal/adspb/*.proto)
TESTFLAGS ?= -race -count=1 -timeout=15m

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The version every binary reports (version, --version, the start log line
# and meshfed_build_info): git describe of the checkout, or "dev" outside one.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X github.com/meshfed/meshfed/internal/version.version=$(VERSION) -X github.com/meshfed/meshfed/internal/version.revision=$(REVISION)

# Every build, test and the binaries tests build are built with BUILDTAGS.
# grpcnotrace builds gRPC without golang.org/x/net/trace, whose templates
# would keep the linker from dropping methods nothing calls (the generated
# validation of every linked Envoy type among them): meshfed-hub is a third
# smaller, and so are the pages of it a running hub holds (docs/images.md).
BUILDTAGS ?= grpcnotrace
export GOFLAGS := $(strip $(GOFLAGS) -tags=$(BUILDTAGS))

.PHONY: build
build: ## Build bin/meshfed, and bin/meshfed-hub and bin/meshfed-spoke (each alone, for images).
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/meshfed ./cmd/meshfed
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/meshfed-hub ./cmd/meshfed-hub
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/meshfed-spoke ./cmd/meshfed-spoke

# The images of meshfed-hub and meshfed-spoke (IMAGES), FROM scratch, one
# index per image with IMAGE_PLATFORMS, written as an OCI image layout to
# IMAGE_OUT without a container daemon (docs/images.md). hack/image is a
# module of its own so that go-containerregistry stays out of this one's
# graph.
IMAGES          ?= meshfed-hub,meshfed-spoke
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_OUT       ?= $(BIN)/images/oci

.PHONY: image
image: ## Build the hub and spoke images (linux/amd64, linux/arm64) into bin/images/oci, an OCI layout; no Docker needed.
	cd hack/image && GOWORK=off $(GO) run . -root '$(CURDIR)' -out '$(abspath $(IMAGE_OUT))' -go '$(GO)' \
		-version '$(VERSION)' -revision '$(REVISION)' -ldflags '$(LDFLAGS)' -tags '$(BUILDTAGS)' \
		-images '$(IMAGES)' -platforms '$(IMAGE_PLATFORMS)'

# Modules of their own beside the main one, so that what only their
# tests or tools need (chromedp, Prometheus' PromQL parser,
# go-containerregistry) stays out of the main module's graph.
SUBMODULES := hack/image e2e/browser charts/promql

.PHONY: download
download: ## Download the modules of every Go module here (the main one, tools and the others).
	$(GO) mod download
	cd tools && $(GO) mod download
	for m in $(SUBMODULES); do (cd $$m && GOWORK=off $(GO) mod download) || exit 1; done

.PHONY: test
test: test-assets ## Run every test with the race detector.
	$(GO) test $(TESTFLAGS) ./...
	for m in $(SUBMODULES); do (cd $$m && GOWORK=off $(GO) test $(TESTFLAGS) ./...) || exit 1; done

# The end-to-end tests are of three kinds, each a build tag (e2e/doc.go):
# without one, every kind runs.
.PHONY: test-e2e test-e2e-memory test-e2e-process test-e2e-browser
test-e2e: test-assets test-e2e-browser ## Run the multi-cluster end-to-end tests only, every kind.
	$(GO) test $(TESTFLAGS) ./e2e/...
test-e2e-memory: test-assets ## Run the end-to-end tests whose hub and spokes run in the test's process.
	$(GO) test $(TESTFLAGS) -tags '$(BUILDTAGS),e2e_memory' ./e2e/
test-e2e-process: test-assets ## Run the end-to-end tests on meshfed processes (the fault matrix, chaos, security).
	$(GO) test $(TESTFLAGS) -tags '$(BUILDTAGS),e2e_process' ./e2e/
test-e2e-browser: ## Run the web view's test in a real headless Chromium.
	cd e2e/browser && GOWORK=off $(GO) test $(TESTFLAGS) ./...

# kube-apiserver and etcd for internal/kubetest, and coredns for
# internal/dnstest, built from the Go module proxy by hack/testassets into a
# folder keyed by the versions its go.mod files pin (coredns into a sibling
# folder keyed by its own version, linked from this one: build.sh). The
# first build takes minutes; after that, nothing is done.
TESTASSETS_K8S  := $(shell awk '$$1 == "k8s.io/kubernetes" { print $$2; exit }' hack/testassets/kube-apiserver/go.mod)
TESTASSETS_ETCD := $(shell awk '$$1 == "go.etcd.io/etcd/server/v3" { print $$2; exit }' hack/testassets/etcd/go.mod)
TESTASSETS      := $(CURDIR)/.cache/testassets/k8s-$(TESTASSETS_K8S:v%=%)-etcd-$(TESTASSETS_ETCD:v%=%)

.PHONY: test-assets
test-assets: ## Build kube-apiserver, etcd and coredns for the tests (once, into .cache/testassets).
	@hack/testassets/build.sh $(TESTASSETS)

# istiod (pilot-discovery) for internal/istiodtest, into its own folder
# .cache/testassets/istiod-VERSION linked from TESTASSETS. Not part of
# test-assets: cold, it is about 9.5 CPU-minutes more than the other three's
# 22, so `make test` runs without it and the tests that need it skip;
# test-istiod builds it and makes them fail rather than skip. CI builds it
# first (test-assets-istiod), so that make test runs them.
ISTIOD_PKGS := ./internal/istiodtest/...

.PHONY: test-assets-istiod
test-assets-istiod: ## Build the test assets and istiod (pilot-discovery) too (once; minutes the first time).
	@hack/testassets/build.sh --istiod $(TESTASSETS)

.PHONY: test-istiod
test-istiod: test-assets-istiod ## Run the tests against a real istiod (ISTIOD_PKGS, and e2e's of kind e2e_istiod), which never skip here.
	$(GO) test $(TESTFLAGS) $(ISTIOD_PKGS)
	$(GO) test $(TESTFLAGS) -tags '$(BUILDTAGS),e2e_istiod' ./e2e/

test test-e2e test-e2e-memory test-e2e-process test-istiod bench-e2e chaos: export KUBEBUILDER_ASSETS := $(TESTASSETS)
test-istiod: export MESHFED_REQUIRE_ISTIOD := 1

# The packages whose Go benchmarks time hot paths (fast at -benchtime=1x).
HOTPATHS := ./federation/syncproto ./hub/registry ./xds ./xds/resources ./xds/translate ./xds/workloads ./spoke/shard ./spoke/uplink

.PHONY: bench
bench: build ## Run the load harness, short (meshfed vs the baseline, a table), and the hot-path benchmarks once.
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1x $(HOTPATHS)
	$(BIN)/meshfed bench --short --json $(BIN)/bench-short.json

.PHONY: bench-e2e
bench-e2e: test-assets ## Run every Go benchmark once, incl. the end-to-end ones (long; see BENCHMARKS.md).
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1x -timeout=60m ./...

# Every func FuzzXxx(f *testing.F) of the module, found by hack/fuzz.sh,
# one after the other, each from its seeds and testdata/fuzz corpus.
FUZZTIME ?= 20s

.PHONY: chaos
chaos: test-assets ## Run the chaos loop long: 60 random faults on real hub and spoke processes (CHAOS_FAULTS, CHAOS_SEED).
	$(GO) test -race -count=1 -timeout=30m -run='^TestProcessChaos$$' ./e2e/ -args -chaos.faults=$${CHAOS_FAULTS:-60} -chaos.seed=$${CHAOS_SEED:-0}

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (20s) each.
	FUZZTIME=$(FUZZTIME) GO=$(GO) hack/fuzz.sh

.PHONY: lint
lint: ## Run golangci-lint (pinned in tools/go.mod), over the main module and the others.
	$(TOOL) golangci-lint run --allow-parallel-runners ./...
	for m in $(SUBMODULES); do (cd $$m && GOWORK=off $(GO) tool -modfile=$(CURDIR)/tools/go.mod golangci-lint run --allow-parallel-runners ./...) || exit 1; done

.PHONY: fmt
fmt: ## Format the code with gofumpt.
	$(TOOL) gofumpt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

PLUGINS := $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-go-vtproto

$(PLUGINS): tools/go.mod
	GOBIN=$(BIN) $(GO) install -modfile=tools/go.mod google.golang.org/protobuf/cmd/protoc-gen-go \
		google.golang.org/grpc/cmd/protoc-gen-go-grpc github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto

.PHONY: gen
gen: $(PLUGINS) ## Generate code from the protos (needs protoc), docs/flags.md from the flags, and the hub chart's PromQL expressions for charts/promql.
	@command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
	protoc --plugin=protoc-gen-go=$(BIN)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
		--plugin=protoc-gen-go-vtproto=$(BIN)/protoc-gen-go-vtproto \
		-I . --go_out=. --go_opt=module=github.com/meshfed/meshfed \
		--go-grpc_out=. --go-grpc_opt=module=github.com/meshfed/meshfed \
		$(PROTOS)
	protoc --plugin=protoc-gen-go-vtproto=$(BIN)/protoc-gen-go-vtproto -I . \
		--go-vtproto_out=. --go-vtproto_opt=module=github.com/meshfed/meshfed,features=equal+unmarshal_unsafe \
		$(VTPROTOS)
	$(GO) test -count=1 -run '^TestFlagReference$$' ./cmd/meshfed -update
	$(GO) test -count=1 -run '^TestMonitoringExpressions$$' ./charts -update

.PHONY: verify
verify: gen ## Fail when generated code or go.mod drift from the sources, or git tracks a build output.
	@hack/check-tracked.sh
	$(GO) mod tidy
	cd tools && $(GO) mod tidy
	for m in $(SUBMODULES); do (cd $$m && GOWORK=off $(GO) mod tidy) || exit 1; done
	@git diff --exit-code -- . || { echo "generated code or go.mod out of date: run 'make gen' and 'go mod tidy'" >&2; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard); [ -z "$$untracked" ] || { echo "untracked files: $$untracked" >&2; exit 1; }

.PHONY: demo
demo: build ## Run the demo: a hub and two spokes (east, west) on loopback.
	$(BIN)/meshfed demo $(DEMO_FLAGS)
