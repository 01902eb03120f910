# gofit: make build | test | bench | fuzz | lab
GO ?= go
FUZZTIME ?= 20s

.PHONY: build test bench fuzz lab vet

build:
	$(GO) build -o bin/gofit ./cmd/gofit

# The workspace (go.work) holds the library (.), the command (cmd/gofit) and
# the Kubernetes parts (kube); "work" names every package in it.
test:
	$(GO) vet work
	$(GO) test -count=1 work

bench:
	$(GO) test -run '^$$' -bench . -benchmem work

# Run every fuzz target for FUZZTIME each (go test -fuzz takes one target at a time).
fuzz:
	@for pkg in ./cgroup ./fit ./kube/admission; do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep ^Fuzz); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

lab: build
	./bin/gofit lab
