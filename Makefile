# webhook-guard. Run "make help" for the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# Tests and binaries share one build configuration, so the test binaries
# reuse the Kubernetes packages compiled for the control-plane tools.
export CGO_ENABLED := 0
GOFLAGS_BUILD := -trimpath
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN := bin

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Run

.PHONY: demo
demo: tools ## Start a local control plane and a slow webhook, and show what each failure policy costs.
	KUBEBUILDER_ASSETS="$$(hack/tools/install.sh)" go run $(GOFLAGS_BUILD) ./hack/demo

##@ Test

.PHONY: test
test: tools unit e2e ## Run every test: unit, then e2e against a real kube-apiserver (builds the binaries first if missing).

.PHONY: unit
unit: ## Run the unit tests (no cluster).
	go test $(GOFLAGS_BUILD) -count=1 $$(go list ./... | grep -v /test/e2e)

.PHONY: e2e
e2e: tools ## Run the e2e tests against a real kube-apiserver and etcd.
	KUBEBUILDER_ASSETS="$$(hack/tools/install.sh)" go test $(GOFLAGS_BUILD) -count=1 -timeout 40m ./test/e2e/...

.PHONY: bench
bench: ## Run the benchmarks.
	go test $(GOFLAGS_BUILD) -run '^$$' -bench . -benchmem ./internal/...

.PHONY: lint
lint: ## gofmt and go vet.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	go vet ./...

##@ Build

.PHONY: build
build: ## Build bin/guard (the same command the Dockerfile runs).
	go build $(GOFLAGS_BUILD) -ldflags "$(LDFLAGS)" -o $(BIN)/guard ./cmd/guard

.PHONY: tools
tools: ## Build kube-apiserver, etcd, kubectl and kustomize from source into the cache if missing (about 11 minutes the first time).
	@hack/tools/install.sh >/dev/null
