# banlieue developer entry points. Every target installs what it needs into .venv/.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
ARGS ?=
# Go wrappers under hack/ are modules with a committed go.sum, built with the Go on PATH and the
# default (shared) GOCACHE / GOMODCACHE, so every worktree and CI run on a machine share builds.
GO := GOTOOLCHAIN=local GO111MODULE=on GOFLAGS='-mod=readonly -buildvcs=false' go
VCSIM_MOD := hack/vcsim/go.mod hack/vcsim/go.sum

.PHONY: dev test lint check-generated check-base-image unit vcsim govc envtest capi capv deps venv clean generate release clusterctl-repo image e2e-kind lock

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	@# setuptools announces every editable install with a 10-line warning; nothing to act on.
	PYTHONWARNINGS='ignore:Editable installation' $(PIP) install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

deps:
	bash hack/install-deps.sh

# govmomi's vCenter simulator (github.com/vmware/govmomi/simulator, pinned in hack/vcsim/go.mod)
# with banlieue's inventory, TLS and guest additions (hack/vcsim/README.md).
bin/vcsim: $(wildcard hack/vcsim/*.go) $(VCSIM_MOD)
	@mkdir -p bin
	cd hack/vcsim && $(GO) build -o $(CURDIR)/bin/vcsim .

# govmomi's CLI from the same module, to look into a simulator (docs/operations.md).
bin/govc: $(wildcard hack/vcsim/govc/*.go) $(VCSIM_MOD)
	@mkdir -p bin
	cd hack/vcsim && $(GO) build -o $(CURDIR)/bin/govc ./govc

vcsim: deps bin/vcsim

govc: deps bin/govc

# Cluster API: core manager, kubeadm bootstrap and control-plane managers and clusterctl, built
# from the pinned wrapper module hack/capi (go.mod + go.sum, no code: each binary is an upstream
# `package main` built by its package path). Module mode, the shared default GOCACHE/GOMODCACHE,
# the installed Go (GOTOOLCHAIN=local). The version is stamped at link time as upstream's release
# build does (clusterctl reads it).
CAPI_VERSION := v1.14.2
CAPI_GOENV := GO111MODULE=on GOTOOLCHAIN=local GOFLAGS='-mod=readonly -buildvcs=false'
CAPI_LDFLAGS := -X sigs.k8s.io/cluster-api/version.gitVersion=$(CAPI_VERSION) \
	-X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=14 \
	-X sigs.k8s.io/cluster-api/version.gitTreeState=clean
CAPI_BINS := bin/capi-manager bin/capi-kubeadm-bootstrap-manager bin/capi-kubeadm-control-plane-manager bin/clusterctl
bin/capi-manager: CAPI_PKG := core
bin/capi-kubeadm-bootstrap-manager: CAPI_PKG := bootstrap/kubeadm
bin/capi-kubeadm-control-plane-manager: CAPI_PKG := controlplane/kubeadm
bin/clusterctl: CAPI_PKG := cmd/clusterctl

$(CAPI_BINS): hack/capi/go.mod hack/capi/go.sum
	@mkdir -p bin
	cd hack/capi && $(CAPI_GOENV) go build -trimpath -ldflags "$(strip $(CAPI_LDFLAGS))" -o $(CURDIR)/$@ sigs.k8s.io/cluster-api/$(CAPI_PKG)

capi: $(CAPI_BINS)

# cluster-api-provider-vsphere (CAPV), the Go provider bench/capv.py measures banlieue against. Built
# from the pinned wrapper module hack/capv (go.mod + go.sum, no code: CAPV's manager is its module's
# root `package main`). Not a prerequisite of `make test`: only the benchmark needs it.
CAPV_VERSION := v1.16.1
bin/capv-manager: hack/capv/go.mod hack/capv/go.sum
	@mkdir -p bin
	cd hack/capv && $(CAPI_GOENV) go build -trimpath -ldflags "-X sigs.k8s.io/cluster-api-provider-vsphere/pkg/version.gitVersion=$(CAPV_VERSION)" -o $(CURDIR)/$@ sigs.k8s.io/cluster-api-provider-vsphere

capv: bin/capv-manager

# envtest: kube-apiserver, kube-controller-manager and etcd built from pinned Go modules
# (hack/envtest/go.mod, hack/envtest/etcd/go.mod, go.sum committed). Module mode, the shared default
# GOCACHE/GOMODCACHE, the installed Go (GOTOOLCHAIN=local). The version is stamped at link time:
# unstamped, the server reports v0.0.0-master and CAPI's managers refuse to start on it.
ENVTEST_K8S_VERSION := v1.34.4
ENVTEST_GOENV := GO111MODULE=on GOTOOLCHAIN=local GOFLAGS='-mod=readonly -buildvcs=false'
ENVTEST_K8S_LDFLAGS := $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(ENVTEST_K8S_VERSION) -X $(pkg).gitMajor=1 -X $(pkg).gitMinor=34 -X $(pkg).gitTreeState=clean)

bin/kube-apiserver bin/kube-controller-manager: bin/%: hack/envtest/go.mod hack/envtest/go.sum hack/envtest/%/main.go
	@mkdir -p bin
	cd hack/envtest && $(ENVTEST_GOENV) go build -ldflags "$(strip $(ENVTEST_K8S_LDFLAGS))" -o $(CURDIR)/$@ ./$*

bin/etcd: hack/envtest/etcd/go.mod hack/envtest/etcd/go.sum hack/envtest/etcd/main.go
	@mkdir -p bin
	cd hack/envtest/etcd && $(ENVTEST_GOENV) go build -o $(CURDIR)/$@ .

envtest: bin/kube-apiserver bin/kube-controller-manager bin/etcd

lint: venv
	$(VENV)/bin/ruff check banlieue tests bench hack
	$(VENV)/bin/mypy

# Regenerate every generated file (CRDs, RBAC, admission policies, API reference) from banlieue/api.
generate: venv
	$(VENV)/bin/banlieue crdgen --out config/crd --rbac-out config/rbac --admission-out config/admission \
	  --namespaced-rbac-out config/namespaced/rbac
	$(VENV)/bin/banlieue crddoc --out docs/api-reference.md

check-generated: venv
	bash hack/check-generated.sh

# The Dockerfile's default base image is pinned by digest (docs/security.md, issue 23 case 10).
check-base-image:
	@grep -Eq '^ARG PYTHON_IMAGE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}$$' Dockerfile \
	  || { echo "Dockerfile: ARG PYTHON_IMAGE must be python:3.11-slim-bookworm@sha256:<64 hex> (docs/security.md)" >&2; exit 1; }

# The README's test command: everything CI runs (the e2e suite also against envtest's kube-apiserver);
# --durations=30 lists the slowest tests in the output (CI time budget: 45 min on a fresh machine).
# The tests mostly wait (on simulators, servers, fault windows): PYTEST_WORKERS=2 runs test files
# side by side on two pytest-xdist workers, the longest first (tests/parallel_plan.py): 24 min
# instead of 46 serially on 2 cores (2026-12-02). PYTEST_WORKERS=0 runs the suite in one
# process, in collection order (README "make test PYTEST_WORKERS=...").
PYTEST_WORKERS ?= 2
test: deps venv bin/vcsim bin/govc envtest capi lint check-generated check-base-image
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=30 -n $(PYTEST_WORKERS) --dist loadfile $(ARGS)

unit: venv
	$(VENV)/bin/pytest -q tests/unit $(ARGS)

# The README's first command: banlieue on an embedded default (API double + vcsim + manager).
# KEEP_STATE=1: start from the previous run's API objects (banlieue dev --keep-state, docs/dev.md).
dev: deps venv bin/vcsim
	$(VENV)/bin/banlieue dev $(if $(filter 1 true yes,$(KEEP_STATE)),--keep-state) $(ARGS)

# clusterctl provider components (out/infrastructure-components.yaml).
release:
	bash hack/release.sh

# The same release as a clusterctl local repository: out/repo/infrastructure-banlieue/<tag>/ and
# out/repo/clusterctl.yaml (clusterctl generate provider|cluster --config out/repo/clusterctl.yaml).
clusterctl-repo:
	REPO_DIR=$(or $(REPO_DIR),out/repo) bash hack/release.sh

# requirements.lock: the image's hash-locked dependencies, resolved from pyproject.toml by a pinned uv.
UV_VERSION := 0.13.9
lock:
	@test -x .cache/uv/bin/uv || (python3 -m venv .cache/uv && .cache/uv/bin/pip install -q uv==$(UV_VERSION))
	{ sed -n '1,4p' requirements.lock; .cache/uv/bin/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --no-header --quiet -o -; } > requirements.lock.new && mv requirements.lock.new requirements.lock

image:
	docker build -t banlieue:dev .

# The demo against a real cluster (kind + CAPI + a real vCenter); cannot run on the dev machines.
e2e-kind:
	bash hack/e2e-kind.sh

clean:
	rm -rf $(VENV) bin .cache .banlieue
