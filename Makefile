# chatgraph: see README.md.
GO ?= go
STATICCHECK_VERSION ?= 2025.1.1

.PHONY: run build test test-go bench lint fuzz tools

run: build
	./bin/chatgraph server

build:
	$(GO) build -o bin/chatgraph ./cmd/server

test: test-go

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./runtime/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeValidate -fuzztime 60s ./runtime

tools:
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: tools
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$$($(GO) env GOPATH)/bin/staticcheck ./...
