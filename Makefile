# gofit: make build | test | check | bench | fuzz | lab | docs (docs/development.md)
GO ?= go
FUZZTIME ?= 20s

.PHONY: build build-nokube image e2e test test-v2 qos-v2 bench fuzz lab vet test-go-min test-race tidy-check check lab-services lab-real groundtruth fleet-scale vpa-golden

# The version and commit gofit reports (gofit version, the log's first
# line, gofit_build_info): make release sets VERSION.
VERSION ?= dev
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/gofit-dev/gofit/cmd/gofit/internal/buildinfo
LDFLAGS := -s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT)

build:
	$(GO) build -ldflags='-X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT)' -o bin/gofit ./cmd/gofit

# gofit without the webhook and the node agent (no client-go): for images
# that only need `gofit run` or `gofit inspect`.
build-nokube:
	$(GO) build -tags nokube -trimpath -ldflags='$(LDFLAGS)' -o bin/gofit ./cmd/gofit

# The gofit image (webhook and node agent) without Docker: an OCI image
# index for linux/amd64 and linux/arm64, each a static binary at /gofit,
# nonroot (65532) by default, the host's CA bundle, with the OCI
# annotations (source, revision, version, created from SOURCE_DATE_EPOCH)
# and a CycloneDX SBOM per platform from the binary's build info, written
# as an OCI layout + docker-save tarball that `ctr images import` and
# `docker load` take (tools/ociimage). Same commit, same index digest.
# deploy/webhook/Dockerfile builds a one-platform image with Docker.
IMAGE_REPO ?= ghcr.io/gofit-dev/gofit
IMAGE ?= $(IMAGE_REPO):$(VERSION)
IMAGE_ARCHS ?= amd64 arm64
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
empty :=
comma := ,
image:
	for a in $(IMAGE_ARCHS); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags='$(LDFLAGS)' -o bin/linux-$$a/gofit ./cmd/gofit || exit 1; \
	done
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./tools/ociimage/mkimage -o bin/gofit-image.tar -ref $(IMAGE) \
	  -arch $(subst $(empty) $(empty),$(comma),$(strip $(IMAGE_ARCHS))) -source https://github.com/gofit-dev/gofit \
	  -revision $(COMMIT) -version $(VERSION) $(if $(SBOM_DIR),-sbom-dir $(SBOM_DIR)) -entrypoint /gofit '/gofit=bin/linux-{arch}/gofit'

# make release VERSION=vX.Y.Z KEY=cosign.key: binaries for linux/amd64 and
# arm64, the image index, the SBOMs, the packaged chart and deploy/ pinned
# to the version and the index digest, sha256sums, all signed (sha256sums
# signature, SLSA provenance, SBOM attestations), in dist/.
# REGISTRY=host:port/path also publishes: the image, the chart (OCI), their
# signatures and attestations. UNSIGNED=1 builds without a key.
# (tools/release.sh, tools/release; docs/install.md.)
KEY ?=
REGISTRY ?=
UNSIGNED ?=
.PHONY: release
release:
	VERSION=$(VERSION) GO=$(GO) KEY=$(KEY) REGISTRY=$(REGISTRY) UNSIGNED=$(UNSIGNED) bash tools/release.sh

# A release verified with the real cosign CLI, v2 and v3 (COSIGN_VERSIONS,
# each built from its module and cached by version), by docs/install.md's
# commands, against a local registry, and a tampered release re-signed
# with another key refused (tools/release/cosign-cli.sh): not in make
# test, as each cosign is a 10-16 minute build on 2 loaded cores.
COSIGN_VERSIONS ?= 2.6.5 3.1.3
.PHONY: release-verify-cli
release-verify-cli:
	GO=$(GO) COSIGN_VERSIONS="$(COSIGN_VERSIONS)" bash tools/release/cosign-cli.sh

# gofit on a real single-node Kubernetes (kube/e2e): a cgroup v2 kernel in
# a QEMU VM running etcd, kube-apiserver, controller-manager, scheduler,
# containerd + runc + CNI and the kubelet; deploy/ applied with kubectl;
# the webhook, the node agent and the library checked on what the kubelet
# made. Fails (never skips) when the node cannot start. See docs/e2e.md.
e2e:
	GOFIT_E2E=1 $(GO) test -count=1 -v -timeout 85m -run '^(TestNode|TestDeployTogether)$$' ./kube/e2e

# The workspace (go.work) holds the library (.), the command (cmd/gofit),
# the Kubernetes parts (kube) and the tools; "work" names every package in
# it. The packages in SERIAL run real processes under CPU quotas (the lab,
# the experiment, throttling, the VM boots): they run one at a time, after
# the rest, with nothing beside them. The rest (envtests, charts, pure
# packages) run two at a time, which also compiles the whole workspace in
# parallel: -p 1 serialises the compiler too, and a cold build was most of
# a fresh machine's make test (docs/results/test-timings.md).
MOD := github.com/gofit-dev/gofit
SERIAL := $(MOD) $(MOD)/auto $(MOD)/cgroup $(MOD)/cgroup/manage $(MOD)/metrics \
	$(MOD)/cmd/gofit $(MOD)/cmd/gofit/internal/experiment $(MOD)/cmd/gofit/internal/fleet $(MOD)/cmd/gofit/internal/lab \
	$(MOD)/cmd/gofit/internal/lab/sandbox $(MOD)/cmd/gofit/internal/load $(MOD)/cmd/gofit/internal/qoslab \
	$(MOD)/kube/monitoring $(MOD)/tools/vmtest $(MOD)/tools/shrink
TEST_P ?= 2
# Both passes run whatever the first gives; make test fails if either did.
test:
	$(GO) vet work
	rc=0; \
	$(GO) test -count=1 -p $(TEST_P) -timeout 40m $$($(GO) list work | grep -vxF $(foreach p,$(SERIAL),-e $(p))) || rc=1; \
	$(GO) test -count=1 -p 1 -timeout 40m $(SERIAL) || rc=1; \
	exit $$rc

# The real-cgroup tests on a cgroup v2 and a hybrid kernel in a QEMU VM
# (tools/vmtest; part of make test too). GOFIT_VM_PKGS=REGEXP narrows the
# packages, GOFIT_VM_KERNEL=6.1.0-N picks the Debian kernel.
test-v2:
	GOFIT_VM_LAYOUTS=v2,hybrid $(GO) test -count=1 -v -timeout 30m -run '^TestVM$$' ./tools/vmtest

# The node agent's memory-QoS experiment (gofit node experiment) on cgroup v2
# in the test VM, where memory.low/high exist: about 6 minutes. TCG slows
# everything alike, so compare its ratios only. QOS_ARGS replaces its
# TCG-sized settings, e.g. QOS_ARGS='--repeats 3 --duration 10s --rate 10'.
qos-v2:
	$(GO) run ./tools/vmtest/qosv2 $(if $(QOS_ARGS),-- $(QOS_ARGS))

# The library's unit tests on the oldest Go its go.mod allows (the toolchain
# comes from the module proxy), outside the workspace whose go line is newer:
# test binaries take their GODEBUG defaults from the go version in force.
GO_MIN_TOOLCHAIN ?= go1.24.10
# -short leaves out the VM boots, the lab's end-to-end runs and the
# statistical simulations (the A/A rates, the floor-repeat studies), which
# make test has just run: their timings mean nothing under the race
# detector, and the simulations, which share no memory between goroutines,
# took 9 of make check's 14 minutes under it (issue 44).
test-go-min:
	GOWORK=off GOTOOLCHAIN=$(GO_MIN_TOOLCHAIN) $(GO) test -count=1 -short ./...

test-race:
	$(GO) test -count=1 -race -short work

# What CI runs after make test.
check: test-race test-go-min tidy-check
	$(GO) vet -tags nokube ./cmd/gofit
	$(MAKE) fuzz FUZZTIME=30000x

# go.mod and go.sum of each module exactly as go mod tidy would write them.
tidy-check:
	GOWORK=off $(GO) mod tidy -diff
	cd cmd/gofit && GOWORK=off $(GO) mod tidy -diff
	cd kube && GOWORK=off $(GO) mod tidy -diff
	cd tools && GOWORK=off $(GO) mod tidy -diff
	cd tools/vpapeer && GOWORK=off $(GO) mod tidy -diff
	cd tools/fleetscale && GOWORK=off $(GO) mod tidy -diff

bench:
	$(GO) test -run '^$$' -bench . -skip 'FleetGroundTruth|FleetPrometheus' -benchmem work

# VPA's targets from VPA's own recommender code for gofit fleet's VPA
# scenarios (its own module, outside go.work: it needs k8s.io v0.37).
vpa-golden:
	cd cmd/gofit && GOFIT_WRITE_VPA_SCENARIOS=1 $(GO) test -count=1 -run TestVPAAgainstItsModule ./internal/fleet/ >/dev/null || true
	cd tools/vpapeer && GOWORK=off $(GO) run . -in ../../cmd/gofit/internal/fleet/testdata/vpa/scenarios.json -out ../../cmd/gofit/internal/fleet/testdata/vpa/golden.json

# gofit fleet against ground truth (docs/results/fleet.md): the lab's
# sample and go-httpbin, trained under a steady load, then unfitted and
# with gofit's, KRR's and VPA's figures under a bursty load none of them
# saw, with a real cAdvisor and Prometheus. About 90 minutes, as root.
groundtruth:
	cd tools && $(GO) test -count=1 -run '^$$' -bench FleetGroundTruth -benchtime 1x -timeout 150m -v ./groundtruth

# gofit fleet against a real Prometheus holding 5,000 Go containers over 7
# days (tools/fleetscale writes the TSDB once, ~1.5 GB under ~/.cache/gofit;
# docs/results/fleet.md). GOFIT_FLEETSCALE_CONTAINERS=N for another size.
fleet-scale:
	cd tools && $(GO) test -count=1 -run '^$$' -bench FleetPrometheus -benchtime 1x -timeout 90m -v ./groundtruth

# Run every fuzz target for FUZZTIME each (go test -fuzz takes one target at a time).
# check counts executions instead of seconds: Go 1.26's fuzz coordinator
# can fail a target with a bare "context deadline exceeded" when a timed
# run ends (golang/go#75804, fixed in Go 1.27); a count has no deadline.
fuzz:
	@for pkg in ./cgroup ./fit ./internal/procmem ./kube/admission ./kube/memqos ./cmd/gofit/internal/nongo ./cmd/gofit/internal/fleet; do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep ^Fuzz); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

lab: build
	./bin/gofit lab

# Real services no one here wrote, by version from the Go module proxy, for
# the lab (examples/labservices). Installed into bin/lab-services.
LABSVC := $(CURDIR)/bin/lab-services
lab-services:
	mkdir -p $(LABSVC)
	GOBIN=$(LABSVC) GOWORK=off $(GO) install github.com/mccutchen/go-httpbin/v2/cmd/go-httpbin@v2.26.0
	GOBIN=$(LABSVC) GOWORK=off $(GO) install github.com/prometheus/node_exporter@v1.12.1
	GOBIN=$(LABSVC) GOWORK=off $(GO) install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9

# gofit lab --quick on each real service; results in gofit-lab/<service>.
LABFLAGS ?= --quick
lab-real: build lab-services
	./bin/gofit lab $(LABFLAGS) --out gofit-lab/httpbin --cmd "$(LABSVC)/go-httpbin -host 127.0.0.1 -port {port}" --targets examples/labservices/httpbin.targets
	./bin/gofit lab $(LABFLAGS) --out gofit-lab/node_exporter --cmd "$(LABSVC)/node_exporter --web.listen-address=127.0.0.1:{port}" --url 'http://127.0.0.1:{port}/metrics'
	./bin/gofit lab $(LABFLAGS) --out gofit-lab/caddy --cmd "$(LABSVC)/caddy file-server --templates --listen 127.0.0.1:{port} --root examples/labservices/caddy-site" --targets examples/labservices/caddy.targets

# In-place memory limit decreases (256 -> 160 MiB, 20 per setting) on a real
# cgroup while the heap grows: gofit, the 0.9 ratio and nothing set. Needs
# root; about 30 minutes. Results: docs/results/shrink.md.
.PHONY: shrink
shrink:
	$(GO) run ./tools/shrink $(SHRINKFLAGS)

# The doc check alone (it runs in make test too): every sample in README.md
# and docs/ is checked against the code (cmd/gofit/docs_test.go), and the
# example tests the docs quote run.
.PHONY: docs docs-update
docs:
	$(GO) test -count=1 -run '^(TestDocs|Example.*)$$' . ./fit ./cmd/gofit

# Rewrite the docs' gofit output samples (<!-- output-of: ... -->) with what
# gofit prints now; review the diff. Every other doc check still applies.
docs-update:
	$(GO) test -count=1 -run '^TestDocs$$' ./cmd/gofit -args -update
