# clusterforge: `make help` lists the targets.
STACK ?= dev
GO    ?= go
# managedidentity/v2 v2.80.0 is served by the proxy but missing from the checksum database; go.sum pins it.
export GONOSUMDB = github.com/pulumi/pulumi-azure-native-sdk/managedidentity

REHEARSE = build/bin/rehearse

.PHONY: help setup tools plan test test-images image-validate image-local image-check bench-pull generate bench golden rehearse rehearse-down rehearse-check demo $(REHEARSE)

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

demo: plan rehearse ## For newcomers: plan the dev stack, rehearse it, leave it running with a kubeconfig

setup: ## Install the pinned validators and Go modules (idempotent)
	@scripts/setup.sh

tools: ## Build every pinned binary (rehearsal, node image, packer) into .tools (cached)
	@scripts/toolchain.sh rehearsal node packer

plan: setup ## Show offline what `pulumi up --stack $(STACK)` would create (build/plan/$(STACK)/)
	$(GO) run ./infra/cmd/plan --stack $(STACK)

test: setup tools test-images image-validate image-local ## Run every test: rehearsal, CIS, a local image bake, the baked-image and end-to-end checks (CI runs this)
	@test -z "$$(gofmt -l components infra images)" || { echo "gofmt needed:"; gofmt -l components infra images; exit 1; }
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./...

test-images: ## Test the Packer plugin (its own module) and fail if its generated HCL2 specs are stale
	@cd images && sha256sum $$(find . -name '*.hcl2spec.go') > /tmp/clusterforge-hcl2spec.sum && $(GO) generate ./... && \
	  sha256sum --quiet -c /tmp/clusterforge-hcl2spec.sum || { echo "generated HCL2 specs were stale: run make generate and commit"; exit 1; }
	cd images && $(GO) vet ./... && $(GO) test -count=1 ./...

image-validate: tools ## `packer validate` images/worker.pkr.hcl with packer v1.12.0, packer-plugin-azure v1.4.5 and ours
	@scripts/image.sh validate

image-local: setup tools ## Bake a real node image for $(STACK) on this machine (debootstrap, our plugin): build/images/node-$(STACK).tar
	@scripts/image.sh local $(STACK)

image-check: image-local ## Boot the baked image: its disk, containerd, preloaded digests, sysctls; then join it to a rehearsal and run a pod
	$(GO) test -count=1 -v -run 'TestBaked' ./components/rehearsal -args -stack=$(STACK)

generate: ## Regenerate the Packer plugin's *.hcl2spec.go (packer-sdc) and the PodGroup CRD copied from scheduler-plugins
	cd images && $(GO) generate ./...
	$(GO) generate ./components/addons

$(REHEARSE):
	@$(GO) build -o $@ ./components/rehearsal/cmd/rehearse

rehearse: setup tools $(REHEARSE) ## Start $(STACK)'s control plane for real on loopback and leave it running
	@$(REHEARSE) up --stack $(STACK)

rehearse-down: $(REHEARSE) ## Stop everything `make rehearse` started for $(STACK)
	@$(REHEARSE) down --stack $(STACK)

rehearse-check: setup tools ## Rehearse $(STACK), run every check and the CIS benchmark, stop it; fails on any failure
	$(GO) test -count=1 -v -timeout 30m ./components/rehearsal -args -stack=$(STACK)

bench-pull: ## Benchmark a 2 GiB image pulled with containerd defaults, with our settings, and preloaded (build/bench/pull.md)
	@scripts/bench-pull.sh

bench: ## Benchmark planning the 10,000-node stack
	$(GO) test -run '^$$' -bench PlanProd10k -benchtime 5x ./infra/plan

golden: ## Rewrite the golden user-data files after an intended change (review the diff)
	$(GO) test ./infra/plan -run Golden -update
