# Amelia. `make run` builds and runs a command in a sandbox on the embedded
# default profile; `make test` runs every check CI runs.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/amelia-sandbox/amelia/core/buildinfo.version=$(VERSION)
# amelia's and amelia-providers' build tags (internal/testbin.HostTags):
# grpcnotrace leaves out gRPC's request tracing, which amelia never turns on.
HOST_TAGS := grpcnotrace
EXAMPLES := examples/provider-hello
# Race-enabled binaries sleep 1 s at exit by default; the tests start many
# plugin processes.
export GORACE = atexit_sleep_ms=0
# How long one package's tests may take before go test calls them hung: a
# guard against a hang, not a figure any test must meet. The end-to-end
# package (cmd/amelia) takes most of a CI run: 56 minutes with -race beside
# the other packages on 2 cores (2026-11-30), more on a loaded machine
# (load 20+ must pass), so go test's 10m is far too short.
TEST_TIMEOUT ?= 80m
# Where make install puts amelia, amelia-providers and the workers (amelia
# looks for them beside itself): $(go env GOPATH)/bin unless PREFIX or BINDIR says.
PREFIX   ?= $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))
BINDIR   ?= $(PREFIX)/bin

.PHONY: all build worker run demo install test fmt-check vet lint cross base-image kube-binaries agent-binaries kube-cluster proto proto-check bench fuzz clean

all: build

## build: bin/amelia and, beside it, amelia-providers (the built-in providers) and the workers it puts into sandboxes
# Both static: without libc, each concurrent run's amelia maps less.
build: worker
	@echo "make: go build bin/amelia bin/amelia-providers (static)"
	@CGO_ENABLED=0 $(GO) build -trimpath -tags '$(HOST_TAGS)' -ldflags '$(LDFLAGS)' -o bin/amelia ./cmd/amelia
	@CGO_ENABLED=0 $(GO) build -trimpath -tags '$(HOST_TAGS)' -ldflags '$(LDFLAGS)' -o bin/amelia-providers ./cmd/amelia-providers

## worker: the static in-sandbox worker, bin/amelia-worker-linux-{amd64,arm64}
# The first build on a fresh machine compiles every dependency, three times
# (two workers, then amelia) and prints nothing while it does: say so.
worker:
	@if [ ! -e bin/amelia ]; then echo "make: the first build compiles every dependency for amd64 and arm64 and prints nothing meanwhile: it can take many minutes"; fi
	@for arch in amd64 arm64; do \
		echo "make: go build bin/amelia-worker-linux-$$arch (static)"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
			-o bin/amelia-worker-linux-$$arch ./cmd/worker || exit 1; \
	done

## run: build, then run a command in the default profile's sandbox
run: build
	bin/amelia sandbox exec -- sh -c 'echo "hello from $$(pwd)"; echo "this went to stderr" >&2; uname -sm'

## demo: build, then amelia run in a throwaway git repo (a scripted model unless OPENAI_API_KEY is set)
demo: build
	@echo "make: go run ./internal/demo (compiled first: a minute or more on a fresh machine)"
	@$(GO) run ./internal/demo -amelia bin/amelia

## install: bin/amelia, amelia-providers and the workers into $(BINDIR) ($(go env GOPATH)/bin unless PREFIX=DIR or BINDIR=DIR), where amelia finds them beside it
install: build
	@echo "make: installing amelia, amelia-providers and amelia-worker-linux-{amd64,arm64} into $(BINDIR)"
	@install -d '$(BINDIR)'
	@install -m 755 bin/amelia bin/amelia-providers bin/amelia-worker-linux-amd64 bin/amelia-worker-linux-arm64 '$(BINDIR)/'
	@case ":$$PATH:" in *":$(BINDIR):"*) ;; *) echo "make: $(BINDIR) is not on your PATH: add it (export PATH=\"$(BINDIR):\$$PATH\") to run amelia by name";; esac

## base-image: amelia-base:bookworm for the Docker tests and amelia-sshd:bookworm (a remote machine for the SSH tests), made with mmdebstrap (image/bootstrap-base.sh); says so and does nothing without a Docker engine
base-image:
	@if docker version >/dev/null 2>&1; then \
		image/bootstrap-base.sh && image/bootstrap-base.sh sshd; \
	elif [ -n "$$AMELIA_REQUIRE_DOCKER" ]; then \
		echo "make base-image: no Docker engine answers (docker version failed), and AMELIA_REQUIRE_DOCKER is set"; exit 1; \
	else \
		echo "make base-image: no Docker engine answers: SKIPPING the base image; the Docker tests will skip, saying so"; \
	fi

## kube-binaries: build Kubernetes, the Agent Sandbox controller and kube-router for the test cluster into ~/.cache/amelia/kubernetes ($AMELIA_KUBE_CACHE): ~20 minutes the first time, seconds after
kube-binaries:
	@echo "make: go run ./internal/k8stest/cmd/kube-cluster build (the first build compiles Kubernetes: about 20 minutes on 2 cores)"
	@$(GO) run ./internal/k8stest/cmd/kube-cluster build

## agent-binaries: build opencode and the MCP everything server for the CLI-agent tests into ~/.cache/amelia/agents ($AMELIA_AGENT_CACHE): ~15 minutes the first time, seconds after
agent-binaries:
	@echo "make: go run ./internal/agentbin/cmd/agent-binaries (the first build compiles opencode: about 15 minutes on 2 cores)"
	@$(GO) run ./internal/agentbin/cmd/agent-binaries

## kube-cluster: start a two-node Kubernetes test cluster (as root; needs make base-image) and print how to use its kubeconfig; Ctrl-C stops it
kube-cluster: kube-binaries
	@$(GO) run ./internal/k8stest/cmd/kube-cluster up

## test: gofmt, go vet, staticcheck, the macOS build and all tests with the race detector, examples included
test: fmt-check vet lint cross base-image
	@echo "make: go test -race ./... (every package compiled with the race detector first: many minutes on a fresh machine; each package's line comes when its tests end)"
	@python3 -c 'import pydantic, sys; sys.exit(not pydantic.VERSION.startswith("2."))' 2>/dev/null || \
		echo "make test: SKIPPING the checks of the worker with the Python models (its output, and compat/harness.py): python3 with pydantic v2 not found"
	$(GO) test -race -count=1 -timeout=$(TEST_TIMEOUT) ./...
	cd $(EXAMPLES) && $(GO) test -race -count=1 -timeout=$(TEST_TIMEOUT) ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	@echo "make: go vet ./... (the first run compiles every package)"
	@$(GO) vet ./...
	@cd $(EXAMPLES) && $(GO) vet ./...

## cross: amelia and amelia-providers build for macOS, which the README promises (compiled, not run)
cross:
	@echo "make: go build for darwin/arm64 (the first run compiles every package for it)"
	@GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags '$(HOST_TAGS)' ./cmd/amelia ./cmd/amelia-providers

## lint: staticcheck, a tool of go.mod (`go tool staticcheck`), so CI downloads nothing else
lint:
	@echo "make: staticcheck ./... (the first run builds staticcheck, then checks every package)"
	@$(GO) tool staticcheck ./...

# The provider API: its .proto is public (for plugins in other languages),
# the Go code generated from it internal (the SDK's Serve and the host's
# client use it; a Go provider never sees it).
PROTO_DIR := plugins/sdk/providerv1
PB_DIR    := internal/providerwire/providerv1
PROTOC    := protoc --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
	--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc)

## proto: regenerate the provider API's Go code (needs protoc: apt install protobuf-compiler)
proto:
	$(PROTOC) -I $(PROTO_DIR) --go_out=paths=source_relative:$(PB_DIR) \
		--go-grpc_out=paths=source_relative:$(PB_DIR) provider.proto

## proto-check: fail if the checked-in generated code is not what `make proto` makes
proto-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(PROTOC) -I $(PROTO_DIR) --go_out=paths=source_relative:$$tmp \
		--go-grpc_out=paths=source_relative:$$tmp provider.proto && \
	for f in provider.pb.go provider_grpc.pb.go; do \
		diff -u $(PB_DIR)/$$f $$tmp/$$f || { echo "$(PB_DIR)/$$f is stale: run make proto"; exit 1; }; \
	done

## bench: our figure, the baseline's and the ratio, for each benchmark (the docker and daytona ones need the engine and the base image: make base-image; the kubernetes ones the test cluster, as root: make kube-binaries)
bench: base-image agent-binaries
	$(GO) test -run='^$$' -bench=ExecTrue -benchtime=500x ./plugins/local/
	$(GO) test -run='^$$' -bench=Stream -benchtime=3x ./plugins/local/
	$(GO) test -run='^$$' -bench=DecodeSideBySide -benchtime=3000x -cpu=1 ./core/protocol/
	$(GO) test -run='^$$' -bench=StartToFirstLine -benchtime=100x ./internal/worker/
	$(GO) test -run='^$$' -bench=ToolRoundTrip -benchtime=1x ./internal/worker/agent/
	$(GO) test -run='^$$' -bench='ProxyLatency|SSEFirstByte' -benchtime=2000x ./core/tunnel/
	$(GO) test -run='^$$' -bench=ProxyThroughput -benchtime=4000x ./core/tunnel/
	$(GO) test -run='^$$' -bench=Redact -benchtime=200x ./proxy/
	$(GO) test -run='^$$' -bench=Translate -benchtime=100x ./proxy/
	$(GO) test -run='^$$' -bench='ExecTrue|Stream|ColdEnsureRunning|WarmPoolClaim|TenSandboxes' -benchtime=5x ./plugins/kubernetes/
	$(GO) test -run='^$$' -bench='RunToFirstRequest$$' -benchtime=20x ./cmd/amelia/
	$(GO) test -run='^$$' -bench=TenConcurrentRuns -benchtime=2x ./cmd/amelia/
	$(GO) test -run='^$$' -bench=RunToFirstRequestOnDocker -benchtime=10x ./cmd/amelia/
	$(GO) test -run='^$$' -bench=OpencodeToFirstRequestOnDocker -benchtime=5x ./cmd/amelia/
	$(GO) test -run='^$$' -bench=TwentyRunsOnDocker -benchtime=1x -timeout=60m ./cmd/amelia/
	$(GO) test -run='^$$' -bench='FilesOnDocker|FilesOnSSH|FilesOnDaytona|FilesOnKubernetes' -benchtime=2x -timeout=90m ./cmd/amelia/
	$(GO) test -run='^$$' -bench=WorkspaceSetup -benchtime=3x ./core/workspace/
	$(GO) test -timeout 40m -run='^$$' -bench=WorkspaceLarge -benchtime=1x ./core/workspace/
	$(GO) test -run='^$$' -bench=TenGenerates -benchtime=5x ./core/driver/sessionbench/
	$(GO) test -run='^$$' -bench='ColdEnsureRunning|WarmExecTrue' -benchtime=20x ./plugins/docker/
	$(GO) test -run='^$$' -bench=Stream -benchtime=5x ./plugins/docker/
	$(GO) test -run='^$$' -bench=SetupStartReady -benchtime=5x ./plugins/docker/
	$(GO) test -run='^$$' -bench='WarmExecTrue|Connect' -benchtime=30x ./plugins/ssh/
	$(GO) test -run='^$$' -bench=Stream -benchtime=5x ./plugins/ssh/
	$(GO) test -run='^$$' -bench='ExecGatewayVsToolbox|EnsureRunningStarted' -benchtime=30x ./plugins/daytona/
	$(GO) test -run='^$$' -bench='FramedExecTrue|Cancel' -benchtime=30x ./plugins/daytona/
	$(GO) test -run='^$$' -bench=FramedStream -benchtime=3x ./plugins/daytona/
	$(GO) test -run='^$$' -bench=SetupStartReady -benchtime=3x ./plugins/daytona/
	$(GO) test -run='^$$' -bench=Stream -benchtime=5x ./internal/envelope/

## fuzz: fuzz the protocol decoder, the git credential parser, the egress host matcher and the response redactor (FUZZTIME=60s each by default)
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecoder -fuzztime=$${FUZZTIME:-60s} ./core/protocol/
	$(GO) test -run='^$$' -fuzz=FuzzRead -fuzztime=$${FUZZTIME:-60s} ./core/gitcredential/
	$(GO) test -run='^$$' -fuzz=FuzzMatchHost -fuzztime=$${FUZZTIME:-60s} ./proxy/
	$(GO) test -run='^$$' -fuzz=FuzzRedact -fuzztime=$${FUZZTIME:-60s} ./proxy/

clean:
	rm -rf bin
