# clusterforge: `make help` lists the targets.
STACK ?= dev
GO    ?= go
# managedidentity/v2 v2.80.0 is served by the proxy but missing from the checksum database; go.sum pins it.
export GONOSUMDB = github.com/pulumi/pulumi-azure-native-sdk/managedidentity

.PHONY: help setup plan test bench fmt golden

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

setup: ## Install the pinned validators and Go modules (idempotent)
	@scripts/setup.sh

plan: ## Show offline what `pulumi up --stack $(STACK)` would create (build/plan/$(STACK)/)
	$(GO) run ./infra/cmd/plan --stack $(STACK)

test: setup ## Run every test, offline (CI runs this)
	@test -z "$$(gofmt -l components infra)" || { echo "gofmt needed:"; gofmt -l components infra; exit 1; }
	$(GO) vet ./...
	$(GO) test -count=1 ./...

bench: ## Benchmark planning the 10,000-node stack
	$(GO) test -run '^$$' -bench PlanProd10k -benchtime 5x ./infra/plan

golden: ## Rewrite the golden user-data files after an intended change (review the diff)
	$(GO) test ./infra/plan -run Golden -update
