# cidrshift: one command runs every test, unit and e2e.
#   make test   - everything CI runs (unit tests, example tests, e2e on a real control plane)
#   make unit   - the root module only (seconds)
#   make e2e    - the e2e module: builds kube-apiserver, kube-controller-manager, kube-scheduler,
#                 kube-proxy, etcd, kwok, flanneld and the CNI plugins from Go modules into
#                 e2e/.cache the first time, then runs the scenarios (the data plane as root, in
#                 network namespaces the tests make and remove)
#   make fuzz   - a short fuzzing pass over every parser
#   make bench  - benchmarks (not part of CI)
#   make deps   - the Debian packages the data-plane tests need (iptables, conntrack, iproute2),
#                 installed with apt-get when missing; part of make test
#   make lint   - go vet and staticcheck over both modules; part of make test

GO ?= go
FUZZTIME ?= 10s

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test unit e2e fuzz bench deps lint

test: deps lint unit e2e

deps:
	@missing=""; for c in iptables conntrack ip; do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing iptables conntrack iproute2 (missing:$$missing)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables conntrack iproute2 >/dev/null; \
	fi

lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd e2e && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

unit:
	$(GO) test -count=1 ./...

# CIDRSHIFT_REQUIRE_DATAPLANE=1: a data-plane test that cannot run (not root, no network
# namespaces) fails instead of skipping.
e2e:
	cd e2e && $(GO) vet ./... && $(GO) run ./cmd/e2e-build -dataplane && \
	  CIDRSHIFT_REQUIRE_DATAPLANE=1 $(GO) test -count=1 -timeout 45m ./...

fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# bench: the allocator against kcm's cidrset, allocator growth, and the package
# benchmarks; the real-control-plane measurements of BENCHMARKS.md run with
# CIDRSHIFT_PERF=1 (see there: they take tens of minutes).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd e2e/peerbench && $(GO) test -bench . -benchmem -count 6 .
	cd e2e && CIDRSHIFT_PERF=1 $(GO) test -count=1 -timeout 90m -v -run 'TestNodeRewrite|TestScaleOffline' ./perf
