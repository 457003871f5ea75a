# clusterforge: `make help` lists the targets.
STACK ?= dev
# ROLE is the image `make image-local` bakes: worker or control-plane.
ROLE ?= worker
# SNAPSHOT reaches `rehearse etcd-restore` through the environment, never through the shell's parser.
SNAPSHOT ?=
export SNAPSHOT
# RENEW=1 makes `make roll` renew every leaf certificate, due or not; YES=1 (exactly) lets it roll
# an Azure cluster (without it, `forge roll` shows the stages and changes nothing).
RENEW ?=
YES ?=
GO    ?= go
# managedidentity/v2 v2.80.0 is served by the proxy but missing from the checksum database; go.sum
# pins it, so this matters only to `go get` and `go mod tidy`.
export GONOSUMDB = github.com/pulumi/pulumi-azure-native-sdk/managedidentity/v2

REHEARSE = build/bin/rehearse
# FORGE is the operator's CLI, stamped with the commit it was built from (`forge version`).
FORGE = build/bin/forge

.PHONY: forge check tools-check e2e disk-free freeze diff roll up preview tools-pulumi tools-stack bench-fleet bench-roll bench-scale bench-joins help setup tools tools-rehearsal tools-image plan boot boot-down bench-boot bench-dataplane test test-images image-validate image-local image-publish image-publish-args images-local image-check bench-pull bench-quickstart bench-etcd-backup generate bench golden rehearse rehearse-down rehearse-clean rehearse-check etcd-backup etcd-restore demo $(REHEARSE)

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

demo: plan rehearse ## For newcomers: plan the dev stack, rehearse it, leave it running with a kubeconfig (builds only what it runs)

setup: ## Install the pinned Debian packages (validators, debootstrap, systemd-nspawn, Node) and the Go modules (idempotent)
	@scripts/setup.sh

tools: ## Build every pinned binary (rehearsal, checks, node image, packer, the Pulumi engine, the upgrade drills' older releases) into .tools (cached)
	@scripts/toolchain.sh rehearsal checks node addons packer pulumi upgrades

tools-pulumi: ## Build the Pulumi engine: the CLI, its Go language host and the Kubernetes provider (cached)
	@scripts/toolchain.sh pulumi

tools-check: ## Build what the fast tier's tests run (scripts/toolchain.sh checks): no Kubernetes, etcd or Pulumi
	@scripts/toolchain.sh checks

tools-rehearsal: ## Build what the rehearsal runs (etcd, the control plane, KWOK, kube-bench, the CSR approver)
	@scripts/toolchain.sh rehearsal

tools-image: ## Build what an image bake needs (worker, add-on and control-plane binaries, packer and its Azure plugin)
	@scripts/toolchain.sh node addons control-plane packer

forge: ## Build the operator's CLI, build/bin/forge (its verbs act on a stack's Azure cluster; `forge version` names its commit)
	$(GO) build -buildvcs=auto -o $(FORGE) ./cmd/forge

plan: ## Show offline what `pulumi up --stack $(STACK)` would create (build/plan/$(STACK)/, with a real PKI and the admin kubeconfig); installs nothing
	@$(MAKE) --no-print-directory forge && $(FORGE) plan --stack $(STACK)

freeze: ## Write the sizes and addresses derived from targetNodes into stacks/Pulumi.$(STACK).yaml (once, before the first pulumi up)
	@$(MAKE) --no-print-directory forge && $(FORGE) freeze --stack $(STACK)

# diff and roll act on $(STACK)'s rehearsal when one runs here (the development CLI), else on its
# Azure cluster (the operator's CLI).
RUNNING = [ -S build/rehearse/$(STACK)/control.sock ]
# On Azure the stack is named on the command line: dev is only the rehearsal's default.
AZURE_STACK = { [ "$(origin STACK)" = "command line" ] || { echo "name the Azure cluster: make $@ STACK=<env>" >&2; exit 2; }; }

diff: $(REHEARSE) ## What the stack file changes against what $(STACK) last applied: each change in place, a roll or refused; what every machine runs
	@if $(RUNNING); then $(REHEARSE) diff --stack $(STACK); else $(AZURE_STACK) && $(MAKE) --no-print-directory forge && $(FORGE) diff --stack $(STACK); fi

roll: $(REHEARSE) ## Roll $(STACK)'s machines onto the stack file, one stage at a time behind the gates; resumes an interrupted roll (RENEW=1 renews certificates)
	@if $(RUNNING); then $(MAKE) --no-print-directory tools-stack && $(REHEARSE) roll --stack $(STACK) $(if $(RENEW),--renew-certificates); \
	else $(AZURE_STACK) && $(MAKE) --no-print-directory forge && $(FORGE) roll --stack $(STACK) $(if $(RENEW),--renew-certificates) $(if $(filter 1,$(YES)),--yes); fi

# The images `make boot` boots, baked when missing (`make image-local` rebakes one).
build/images/node-%.tar: | setup tools-image
	@ROLE=worker scripts/image.sh local $*
build/images/control-plane-%.tar: | setup tools-image
	@ROLE=control-plane scripts/image.sh local $*

boot: setup tools-rehearsal tools-pulumi $(REHEARSE) build/images/node-$(STACK).tar build/images/control-plane-$(STACK).tar plan ## Boot every machine of $(STACK) from its image (systemd-nspawn, real systemd and cloud-init) and leave it running (root); HOLD=1 stays until Ctrl-C, so a scale set's growth boots workers that join
	@$(REHEARSE) boot --stack $(STACK) $(if $(filter 1,$(HOLD)),--serve-machines)

boot-down: $(REHEARSE) ## Remove every machine, mount, loop device and namespace `make boot` made for $(STACK), and its local Pulumi state
	@$(REHEARSE) boot-down --stack $(STACK)

# up and preview run the engine on the booted $(STACK)'s cluster services stack (build/boot/<env>/pulumi),
# with stacks/Pulumi.$(STACK).yaml as it is now.
up: tools-pulumi $(REHEARSE) ## `pulumi up` of the cluster services (the add-ons) on the booted $(STACK), after showing the changes (root)
	@$(REHEARSE) services --stack $(STACK) up --yes

preview: tools-pulumi $(REHEARSE) ## `pulumi preview --diff --expect-no-changes` of the cluster services on the booted $(STACK): what `make up` would change; fails if anything (root)
	@$(REHEARSE) services --stack $(STACK) preview --diff --expect-no-changes

bench-boot: setup tools-rehearsal tools-pulumi $(REHEARSE) build/images/node-$(STACK).tar build/images/control-plane-$(STACK).tar plan ## Time `make boot` per phase and memory per machine, several runs (build/bench/boot.md)
	@scripts/bench-boot.sh $(STACK)

bench-dataplane: setup tools build/images/node-$(STACK).tar build/images/control-plane-$(STACK).tar ## Pod start-up and DNS latency on booted workers, several runs (build/bench/dataplane.md; root)
	@scripts/bench-dataplane.sh $(STACK)

# The two tiers. The end-to-end packages run one at a time (-p 1): each brings up a cluster of
# its own, and two of them on two cores starve each other's API availability and SLO checks.
E2E_PACKAGES = ./test/e2e/...

test: check e2e ## Every test, both tiers (CI runs this)

# The tests the fast tier leaves to the end-to-end tier, chosen by name (test/tier): those that
# need root and those that run the pinned etcd.
E2E_TIER_TESTS = ^(TestAsRoot|TestRealEtcd)

check: setup tools-check test-images image-validate ## Fast tier, no root needed: gofmt, vet, every unit, table and golden test, hostile stack files, promtool, systemd and cloud-init validators, the import rules
	@test -z "$$(gofmt -l cmd components infra images test)" || { echo "gofmt needed:"; gofmt -l cmd components infra images test; exit 1; }
	$(GO) vet ./...
	$(GO) test -count=1 -short -timeout 15m -skip '$(E2E_TIER_TESTS)' $$($(GO) list ./... | grep -v /test/e2e/)

# A clean clone's e2e run writes about 10 GiB under build/ (images, machine roots, logs); a full disk
# otherwise shows up late, as a truncated image archive.
E2E_FREE_GIB = 12

# Each test's time goes to build/e2e-times.json and .md, failed run or not.
e2e: disk-free setup tools images-local $(REHEARSE) ## End-to-end tier (root): the fast tier's root and etcd tests, the rehearsal and its drills, the CIS benchmark, both images booted, the scale smoke run
	@mkdir -p build && packages=$$($(GO) list ./... | grep -v /test/e2e/ | tr '\n' ' ') && bash -o pipefail -c '{ status=0; \
	  $(GO) test -count=1 -timeout 20m -v -run "$(E2E_TIER_TESTS)" '"$$packages"' || status=1; \
	  (cd images && $(GO) test -count=1 -timeout 20m -v -run "$(E2E_TIER_TESTS)" ./...) || status=1; \
	  $(GO) test -count=1 -p 1 -timeout 60m -v $(E2E_PACKAGES) || status=1; exit $$status; } 2>&1 | tee build/e2e.log' || \
	  { $(REHEARSE) e2e-times >/dev/null || true; \
	    echo "make e2e failed; the lines before each failure, then the failures (build/e2e.log):"; \
	    awk -f scripts/e2e-failures.awk build/e2e.log | tail -60; exit 1; }
	@$(REHEARSE) e2e-times
	@! grep -E -- '^\s*--- SKIP' build/e2e.log || { echo "make e2e: the scenarios above skipped; outside -short every one must run (build/e2e.log)"; exit 1; }

disk-free:
	@mkdir -p build && free=$$(df -P -k build | awk 'NR==2 {print int($$4 / 1048576)}') && \
	  [ "$$free" -ge $(E2E_FREE_GIB) ] || { echo "make e2e: $$free GiB free under build/, needs $(E2E_FREE_GIB): remove old runs' build/ directories (make boot-down and make rehearse-clean first)"; exit 1; }

test-images: ## Test the Packer plugin (its own module) and fail if its generated HCL2 specs are stale
	@cd images && sha256sum $$(find . -name '*.hcl2spec.go') > /tmp/clusterforge-hcl2spec.sum && $(GO) generate ./... && \
	  sha256sum --quiet -c /tmp/clusterforge-hcl2spec.sum || { echo "generated HCL2 specs were stale: run make generate and commit"; exit 1; }
	cd images && $(GO) vet ./... && $(GO) test -count=1 -skip '$(E2E_TIER_TESTS)' ./...

image-validate: tools-check ## `packer validate` images/worker.pkr.hcl and control-plane.pkr.hcl with the pinned packer, packer-plugin-azure and ours
	@scripts/image.sh validate

image-local: setup tools-image ## Bake a real $(ROLE) image for $(STACK) on this machine (debootstrap, our plugin): build/images/{node,control-plane}-$(STACK).tar
	@ROLE=$(ROLE) scripts/image.sh local $(STACK)

image-publish: image-publish-args setup tools-image ## Publish $(ROLE)'s image for STACK= into an Azure Compute Gallery: the real `packer build` (azure-arm, `az login`), version IMAGE_VERSION=, into GALLERY= (a gallery id; default: the stack's); prints the stack lines to set. DRY_RUN=1 stops after `packer validate`
	@ROLE="$$PUBLISH_ROLE" scripts/image.sh publish "$$PUBLISH_STACK"

# A publish's arguments, checked before the toolchain builds; they reach the script through the
# environment, never through the shell's parser.
image-publish-args:
	@[ "$(origin STACK)" = "command line" ] || { echo "name the stack to publish for: make image-publish STACK=<env>" >&2; exit 2; }
	@ROLE="$$PUBLISH_ROLE" scripts/image.sh publish-args "$$PUBLISH_STACK"
image-publish image-publish-args: export PUBLISH_STACK := $(STACK)
image-publish image-publish-args: export PUBLISH_ROLE := $(ROLE)

images-local: setup tools-image ## Bake both images (worker and control-plane) for $(STACK) on this machine
	@ROLE=worker scripts/image.sh local $(STACK)
	@ROLE=control-plane scripts/image.sh local $(STACK)

image-check: tools-rehearsal images-local ## Boot the stack from its baked images and check them: every machine's boot, the worker's disk unit, containerd, preloaded digests, sysctls (root)
	$(GO) test -count=1 -v -run 'TestEveryMachineBootedCleanly|TestWorkerImage|TestPreloadedPod' ./test/e2e/booted -args -stack=$(STACK)

generate: ## Regenerate the Packer plugin's *.hcl2spec.go (packer-sdc)
	cd images && $(GO) generate ./...

$(REHEARSE):
	@$(GO) build -o $@ ./test/cmd/rehearse

rehearse: setup tools-rehearsal tools-stack ## Start $(STACK)'s control plane for real on loopback and leave it running; over an existing one, refuses what needs a roll
	@$(REHEARSE) up --stack $(STACK)

tools-stack: $(REHEARSE) ## Build the releases $(STACK)'s versions name beyond the pinned ones (the upgrade drills' older releases)
	@groups="$$($(REHEARSE) releases --stack $(STACK))"; [ -z "$$groups" ] || scripts/toolchain.sh $$groups

rehearse-down: $(REHEARSE) ## Stop everything `make rehearse` started for $(STACK); keeps its disks, PKI and backups
	@$(REHEARSE) down --stack $(STACK)

rehearse-clean: $(REHEARSE) ## Stop the rehearsal of $(STACK) and delete it, its PKI and its backup store
	@$(REHEARSE) clean --stack $(STACK)

etcd-backup: $(REHEARSE) ## Snapshot $(STACK)'s main etcd to its backup store now (the running rehearsal)
	@$(REHEARSE) etcd-backup --stack $(STACK)

etcd-restore: $(REHEARSE) ## Restore $(STACK)'s main etcd from SNAPSHOT=<name> or the latest verified snapshot (docs/runbooks/etcd.md)
	@$(REHEARSE) etcd-restore --stack $(STACK)

rehearse-check: setup tools-rehearsal ## Rehearse $(STACK), run every check, the CIS benchmark and the roll drills, stop it; fails on any failure
	@scripts/toolchain.sh upgrades
	$(GO) test -count=1 -v -p 1 -timeout 45m ./test/e2e/rehearsal ./test/e2e/backups ./test/e2e/rolls -args -stack=$(STACK)

bench-pull: ## Benchmark a 2 GiB image pulled with containerd defaults, with our settings, and preloaded (build/bench/pull.md)
	@scripts/bench-pull.sh

bench-quickstart: ## Time `make check` and `make test` cold (fresh clone, empty caches) and warm, as CI runs them (build/bench/quickstart.md and the README's times block; hours)
	@scripts/bench-quickstart.sh

bench-roll: setup tools-rehearsal ## The roll drills three times: time per etcd member, apiserver and worker, API availability, lost writes (build/bench/roll.md; about half an hour)
	@scripts/toolchain.sh upgrades
	@scripts/bench-roll.sh $(STACK)

SCALE_STACK ?= prod-10k
bench-scale: setup tools-rehearsal $(REHEARSE) ## One machine of each of $(SCALE_STACK)'s control-plane roles, capped: lease-only costs, then how many KWOK nodes it holds within the API SLOs, the event storm split vs unsplit, the apiserver restart storm (root; build/bench/scale; 10-minute holds, 3 to 4 hours; ARGS=--long for 20-minute holds, ARGS=--topology=ha for the stack's own machines)
	@ARGS="$(ARGS)" PUBLISH="$(PUBLISH)" scripts/bench-scale.sh $(SCALE_STACK)

bench-joins: setup tools-rehearsal $(REHEARSE) ## 1,000 KWOK nodes joining $(STACK)'s control plane all at once vs in its join steps, 3 rounds each: mutating p99 (build/bench/joins; about 40 minutes)
	@ARGS="$(ARGS)" PUBLISH="$(PUBLISH)" scripts/bench-joins.sh $(STACK)

FLEET_STACK ?= prod-10k
bench-fleet: $(REHEARSE) ## The fleet benchmark: worker roll, GPU growth and remediation at $(FLEET_STACK)'s full size against Resource Manager's stand-in, several runs (build/bench/fleet; no root)
	@$(REHEARSE) bench-fleet --stack $(FLEET_STACK) --commit "$$(git rev-parse --short HEAD)$$(git diff --quiet HEAD || echo ' with uncommitted changes')"

bench-etcd-backup: setup ## Benchmark etcd snapshot, upload and restore times and sizes, the delta stream's RPO and cost at 1,000 writes/s on 2 and 7 GiB databases, and a total loss's recovery time to every apiserver ready at 2 GiB on one machine of each role (root; build/bench/etcd-backup.md; about an hour, RPO_SIZES=2GiB saves a quarter of it)
	@scripts/bench-etcd-backup.sh

bench: ## Benchmark planning the 10,000-node stack
	$(GO) test -run '^$$' -bench PlanProd10k -benchtime 5x -count 5 ./infra/offline

golden: ## Rewrite the golden user-data files and headroom tables after an intended change (review the diff)
	$(GO) test ./infra/offline -run Golden -update
