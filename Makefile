# Turna: build, test and run. `make test` is what CI runs.
CARGO ?= cargo

.PHONY: all build test fmt-check clippy unit golden-bless bench bench-translator

all: build

build:
	$(CARGO) build --workspace

## test: formatting, lints and every test of the workspace.
test: fmt-check clippy unit

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

## golden-bless: rewrite the translator's golden expectations (review the diff!).
golden-bless:
	TURNA_BLESS=1 $(CARGO) test -p turna-translator --test golden

## bench-translator: translation time for 1k/5k/10k HTTPRoutes.
bench-translator:
	$(CARGO) bench -p turna-translator --bench translate

bench: bench-translator
