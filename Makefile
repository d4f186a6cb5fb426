# tiled-operator Makefile. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
IMG ?= ghcr.io/bluesky/tiled-operator:latest

.PHONY: all
all: build

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code and apply configurations.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./apis/...
	$(CONTROLLER_GEN) applyconfiguration:headerFile=hack/boilerplate.go.txt paths=./apis/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC.
	$(CONTROLLER_GEN) crd paths=./apis/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths=./controllers/... paths=./cmd/... paths=./webhooks output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=webhook-certs-role paths=./webhooks/certs/... output:rbac:artifacts:config=config/rbac/webhookcerts
	$(CONTROLLER_GEN) webhook paths=./webhooks/... output:webhook:artifacts:config=config/webhook

.PHONY: verify-generated
verify-generated: generate manifests ## Fail if generated code or manifests are stale.
	@if [ -n "$$(git status --porcelain -- apis applyconfiguration config)" ]; then \
	  echo "Generated code or manifests are stale; run 'make generate manifests' and commit:"; \
	  git status --porcelain -- apis applyconfiguration config; git diff --stat -- apis applyconfiguration config; exit 1; fi

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) vet ## Run golangci-lint and go vet.
	$(GOLANGCI_LINT) run ./...

.PHONY: controlplane
controlplane: ## Build kube-apiserver, etcd and kube-controller-manager into the cache (once per version).
	@hack/controlplane.sh

.PHONY: promtool
promtool: ## Build promtool into the cache (once per version) for the tests of the alerts and the dashboard.
	@hack/prometheus/promtool.sh

.PHONY: tools
tools: ## Build every pinned tool of hack/lib/gotool.sh into the cache (CoreDNS, versitygw, metrics-server, kube-router, Prometheus, promtool), once per recipe.
	@for t in hack/node/coredns.sh hack/s3/versitygw.sh hack/node/metrics-server.sh hack/node/kube-router.sh \
	  hack/prometheus/prometheus.sh hack/prometheus/promtool.sh; do $$t; done

.PHONY: test
test: ## Run unit and integration tests on the real control plane (built if needed).
	hack/test.sh

.PHONY: build
build: ## Build the manager and kubectl-tiled into bin/.
	CGO_ENABLED=0 go build -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -o $(LOCALBIN)/kubectl-tiled ./cmd/kubectl-tiled

# The platforms of the kubectl-tiled archives that hack/krew/tiled.yaml names, and their version.
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
PLUGIN_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

.PHONY: plugin-dist
plugin-dist: ## Build the kubectl-tiled archives of a krew release into bin/dist and print their sha256.
	rm -rf $(LOCALBIN)/dist && mkdir -p $(LOCALBIN)/dist
	for p in $(PLUGIN_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; exe=kubectl-tiled; [ "$$os" = windows ] && exe=kubectl-tiled.exe; \
	  dir=$(LOCALBIN)/dist/kubectl-tiled_$${os}_$${arch}; mkdir -p $$dir; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags "-s -w -X main.version=$(PLUGIN_VERSION)" -o $$dir/$$exe ./cmd/kubectl-tiled; \
	  tar -czf $$dir.tar.gz -C $$dir $$exe; rm -rf $$dir; \
	done
	cd $(LOCALBIN)/dist && sha256sum *.tar.gz

.PHONY: run
run: ## Run the operator: against the current kubeconfig, or a local control plane it starts.
	hack/run.sh

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

$(CONTROLLER_GEN): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(LOCALBIN)/controller-gen $(CONTROLLER_GEN)

$(GOLANGCI_LINT): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/golangci-lint $(GOLANGCI_LINT)

##@ Packaging

# The release hack/bundle/release.go describes; override for a release candidate, e.g.
#   make bundle BUNDLE_FLAGS="--version=0.2.0 --replaces=0.1.0 --created-at=2027-01-15T00:00:00Z"
BUNDLE_FLAGS ?=
BUNDLE_IMG ?= ghcr.io/bluesky/tiled-operator-bundle:$(shell sed -n 's/^\tVersion = "\(.*\)"/\1/p' hack/bundle/release.go)
CONTAINER_TOOL ?= docker

.PHONY: bundle
bundle: manifests ## Generate the OLM bundle (bundle/, bundle.Dockerfile) from config/ and the generated CRDs and RBAC.
	go run ./hack/bundle $(BUNDLE_FLAGS)

.PHONY: verify-bundle
verify-bundle: bundle ## Fail if bundle/ or bundle.Dockerfile is stale.
	@if [ -n "$$(git status --porcelain -- bundle bundle.Dockerfile)" ]; then \
	  echo "The OLM bundle is stale; run 'make bundle' and commit:"; \
	  git status --porcelain -- bundle bundle.Dockerfile; exit 1; fi

.PHONY: test-bundle
test-bundle: ## Validate the committed bundle (operator-framework/api: bundle, CSV, CRD, OperatorHubV2, capabilities, categories, deprecated APIs, good practices).
	go test -count=1 ./hack/bundle/

.PHONY: test-packaging
test-packaging: ## Test config/ (renders, accepted by the real apiserver, RBAC, Pod Security), the image and kubectl explain.
	hack/test.sh ./test/packaging/

.PHONY: docs
docs: ## Generate docs/profile-reference.md from the CRDs.
	go run ./hack/crdref > docs/profile-reference.md

.PHONY: verify-docs
verify-docs: docs ## Fail if docs/profile-reference.md is stale.
	@if [ -n "$$(git status --porcelain -- docs/profile-reference.md)" ]; then \
	  echo "docs/profile-reference.md is stale; run 'make docs' and commit"; exit 1; fi

.PHONY: docker-build
docker-build: ## Build the manager image (needs a container engine).
	$(CONTAINER_TOOL) build -t $(IMG) .

.PHONY: bundle-build
bundle-build: ## Build the bundle image (needs a container engine).
	$(CONTAINER_TOOL) build -f bundle.Dockerfile -t $(BUNDLE_IMG) .

##@ Figures

# Fleet sizes and idle windows of `make bench`, e.g. `make bench N=30 BENCH_SHORT_IDLE=20s`: the sizes
# in BENCH_IDLE_SIZES idle for BENCH_IDLE, the others for BENCH_SHORT_IDLE. N > 1000 is several
# clusters of 1,000 beamlines, one namespace each.
N ?= 30,300,1000,3000
BENCH_IDLE ?= 10m
BENCH_IDLE_SIZES ?= 1000
BENCH_SHORT_IDLE ?= 1m
BENCH_FLAGS ?= -skip=naive

.PHONY: bench
bench: ## Measure API traffic, speed and memory as deployed (the manager binary, leader election, webhooks, kube-controller-manager, audit log; N=30,300,1000,3000); writes bench/results.json, heap profiles bench/heap.N[.peak] and docs/benchmarks-figures.md.
	go run ./hack/bench -n $(N) -idle $(BENCH_IDLE) -idle-sizes $(BENCH_IDLE_SIZES) -short-idle $(BENCH_SHORT_IDLE) -heap-profile bench/heap $(BENCH_FLAGS)
	$(MAKE) bench-report

.PHONY: bench-report
bench-report: ## Generate docs/benchmarks-figures.md from bench/results.json.
	go run ./hack/bench -out bench/results.json -report docs/benchmarks-figures.md

.PHONY: verify-bench-report
verify-bench-report: bench-report ## Fail if docs/benchmarks-figures.md is stale.
	@if [ -n "$$(git status --porcelain -- docs/benchmarks-figures.md)" ]; then \
	  echo "docs/benchmarks-figures.md is stale; run 'make bench-report' and commit"; exit 1; fi

# Size of the fleet and number of random stop points of `make test-faults`.
FAULTS_N ?= 100
FAULTS_TRIALS ?= 10
FAULTS_SEED ?= 1
# Size of the fleet CachesFreedWithTheFleet stamps out and deletes three times (the applier's records
# must return to their count before it, the heap stay flat).
FAULTS_CACHE_N ?= 150
# How many of the independent fault trials run at once (each in its namespace, with its manager): two
# were measured faster than one on this machine's two cores (docs/benchmarks.md).
FAULTS_PARALLEL ?= 2

.PHONY: test-faults
test-faults: ## Fault-injection suite on the real control plane (FAULTS_N, FAULTS_TRIALS, FAULTS_SEED, FAULTS_PARALLEL); prints seconds per trial and "N passed, N failed".
	TILED_FAULTS=1 TILED_FAULTS_N=$(FAULTS_N) TILED_FAULTS_TRIALS=$(FAULTS_TRIALS) TILED_FAULTS_SEED=$(FAULTS_SEED) TILED_FAULTS_CACHE_N=$(FAULTS_CACHE_N) TILED_FAULTS_PARALLEL=$(FAULTS_PARALLEL) \
	  TEST_TIMEOUT=$${TEST_TIMEOUT:-25m} hack/test.sh ./test/faults/ -v -run 'TestFaults'

.PHONY: test-tiled
test-tiled: ## Conformance with real Tiled (PyPI, at expansion.TiledVersion) and PostgreSQL (Debian): the rendered config must run.
	hack/tiled/conformance.sh

##@ Images

.PHONY: images
images: ## Build the node's images (pause, CoreDNS, manager, Tiled, PostgreSQL) as docker-archive tarballs, no registry; cached (docs/images.md).
	hack/images/build.sh

##@ End to end

.PHONY: test-e2e
test-e2e: ## End-to-end suite on a real single node (containerd, kubelet, CoreDNS in a network namespace): real Tiled and PostgreSQL pods; writes bench/e2e.json.
	hack/e2e/run.sh

.PHONY: e2e-report
e2e-report: ## Generate docs/e2e-figures.md from bench/e2e.json.
	go run ./hack/e2e/report

.PHONY: verify-e2e-report
verify-e2e-report: e2e-report ## Fail if docs/e2e-figures.md is stale.
	@if [ -n "$$(git status --porcelain -- docs/e2e-figures.md)" ]; then \
	  echo "docs/e2e-figures.md is stale; run 'make e2e-report' and commit"; exit 1; fi

##@ Real node

.PHONY: node
node: ## Build the real node's binaries (kubelet, kube-scheduler, kube-proxy, kubectl, CoreDNS, kube-router) and install containerd, runc, CNI, ipset from Debian (pinned, cached).
	hack/node/build.sh

.PHONY: cluster
cluster: node images ## Start a real single-node cluster in the network namespace tiled-e2e and leave it running (docs/real-node.md).
	hack/node/cluster.sh up
	@echo
	@echo "The cluster runs inside the network namespace $${TILED_E2E_NETNS:-tiled-e2e}; use it with:"
	@echo "  hack/node/cluster.sh exec kubectl get nodes"
	@echo "  hack/node/cluster.sh exec bash        # a shell with KUBECONFIG and the built kubectl"
	@echo "  hack/node/cluster.sh status           # which components run"
	@echo "Remove it (and check the host is as before) with: make cluster-down"

.PHONY: cluster-down
cluster-down: ## Stop the real node cluster, clean up, and fail if the host differs from before `make cluster`.
	hack/node/cluster.sh down

.PHONY: cluster-check
cluster-check: node ## Bring the real node up, run a StatefulSet with a PVC and a DNS client pod on it, prove NetworkPolicy is enforced, tear it down, require an identical host.
	hack/node/check.sh
