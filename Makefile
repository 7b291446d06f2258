# `make demo` runs the whole stack on this machine without a cluster or Docker.
# The kind path: a kind cluster, the images built and loaded, the chart
# installed, the frontend port-forwarded. `make help` lists the targets.
# Needs docker or podman, kind, kubectl and helm (3.17+ or 4). Tests: `make test`.

CLUSTER   ?= mining
NAMESPACE ?= mining
RELEASE   ?= mining
TAG       ?= dev
PORT      ?= 8080
HELM      ?= helm
KIND      ?= kind
# The image builder: docker when its engine answers, else podman.
ENGINE    ?= $(shell if docker info >/dev/null 2>&1; then echo docker; elif command -v podman >/dev/null 2>&1; then echo podman; else echo docker; fi)
# compiled: the Containerfile compiles every binary in one Rust stage, once for
# all images (needs the rust image from Docker Hub). prebuilt: cargo builds the
# static binaries here and the images copy them (no base image at all; what
# the tests run).
BINARIES  ?= compiled
# localhost: this machine's images, which no registry serves (the chart's
# default `imageRegistry`); `make release` pushes to REGISTRY/mining-operator.
IMAGE_REPOSITORY ?= localhost/mining-operator
# The one version of the workspace, the chart (version, appVersion) and the
# images (`make images` tags each with TAG and VERSION).
VERSION   := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1)
REVISION  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
MUSL      := $(shell uname -m)-unknown-linux-musl
# Extra `helm upgrade --install` arguments, e.g. HELM_ARGS='--set frontend.auth.mode=kubernetes'.
HELM_ARGS ?=

IMAGES = miner operator mcp-frontend sum-numbers deploy-gate report mcp-fixtures

.PHONY: help demo demo-down test kind-up images kind-load install port-forward kind-demo kind-down release

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

demo: ## the whole stack on this machine (no cluster, no Docker): local cluster, helm install, an MCP client mines a chain
	demo/run.sh

demo-down: ## stop the demo's local cluster
	tests/cluster/cluster.sh down

test: ## every test (fmt, clippy, build, unit and cluster tests): what CI runs
	tests/run.sh

kind-up: ## create the kind cluster $(CLUSTER) (no-op when it exists)
	$(KIND) get clusters | grep -qx '$(CLUSTER)' || $(KIND) create cluster --name '$(CLUSTER)'

images: ## build $(IMAGE_REPOSITORY)/{miner,operator,mcp-frontend,sum-numbers,deploy-gate,report,mcp-fixtures}:{$(TAG),$(VERSION)} with docker or podman (BINARIES=prebuilt: from host-built binaries)
ifeq ($(BINARIES),prebuilt)
	cargo build --locked --release --target $(MUSL) -p miner -p mining-operator -p mcp-frontend -p sum-numbers -p deploy-gate -p report -p mcp-fixtures
	@mkdir -p target/images
	@# Without their symbol tables (a fifth of each binary): an image's binary
	@# is for running; panics still say where (file and line are no symbols).
	@for image in $(IMAGES); do strip --strip-all -o "target/images/$$image" "$${CARGO_TARGET_DIR:-target}/$(MUSL)/release/$$image" || exit 1; done
endif
	@for image in $(IMAGES); do \
	  if [ '$(BINARIES)' = prebuilt ]; then context=target/images; else context=.; fi; \
	  echo "$(ENGINE) build -f Containerfile --target $$image --build-arg BINARIES=$(BINARIES) -t $(IMAGE_REPOSITORY)/$$image:$(TAG) -t $(IMAGE_REPOSITORY)/$$image:$(VERSION) $$context"; \
	  $(ENGINE) build -q -f Containerfile --target $$image --build-arg BINARIES=$(BINARIES) \
	    --label org.opencontainers.image.title=$$image --label org.opencontainers.image.version=$(VERSION) \
	    --label org.opencontainers.image.revision=$(REVISION) --label org.opencontainers.image.licenses=Apache-2.0 \
	    -t $(IMAGE_REPOSITORY)/$$image:$(TAG) -t $(IMAGE_REPOSITORY)/$$image:$(VERSION) $$context || exit 1; \
	done

kind-load: images ## load the images into the kind cluster as image archives (tags, not :latest, so IfNotPresent uses them)
	@mkdir -p target/images
	@for image in $(IMAGES); do for tag in $(sort $(TAG) $(VERSION)); do \
	  $(ENGINE) save -o target/images/$$image-$$tag.tar $(IMAGE_REPOSITORY)/$$image:$$tag || exit 1; \
	  $(KIND) load image-archive --name '$(CLUSTER)' target/images/$$image-$$tag.tar || exit 1; \
	done; done

install: ## helm upgrade --install the chart into $(NAMESPACE) and wait for it
	$(HELM) upgrade --install '$(RELEASE)' charts/mining-operator --namespace '$(NAMESPACE)' --create-namespace \
	  --set operator.image.tag=$(TAG) --set operator.minerImage.tag=$(TAG) --set frontend.image.tag=$(TAG) \
	  --wait --timeout 5m $(HELM_ARGS)
	$(HELM) test '$(RELEASE)' --namespace '$(NAMESPACE)'

port-forward: ## serve the frontend at http://127.0.0.1:$(PORT)/mcp
	kubectl --namespace '$(NAMESPACE)' port-forward 'service/$(RELEASE)-mining-operator-frontend' '$(PORT):80'

kind-demo: kind-up kind-load install ## all of the above but the port-forward
	@echo "now: make port-forward, and point an MCP client at http://127.0.0.1:$(PORT)/mcp"

kind-down: ## delete the kind cluster
	$(KIND) delete cluster --name '$(CLUSTER)'

release: ## build and push the images and the chart (an OCI artifact) of VERSION to REGISTRY (e.g. REGISTRY=ghcr.io/acme); prints the install line
	@test -n '$(REGISTRY)' || { echo 'set REGISTRY, e.g. make release REGISTRY=registry.example.com/team'; exit 2; }
	@tests/release/check-version.sh '$(VERSION)'
	$(MAKE) images IMAGE_REPOSITORY='$(REGISTRY)/mining-operator' TAG='$(VERSION)'
	@for image in $(IMAGES); do \
	  echo "$(ENGINE) push $(REGISTRY)/mining-operator/$$image:$(VERSION)"; \
	  $(ENGINE) push $(PUSH_ARGS) '$(REGISTRY)/mining-operator/'$$image':$(VERSION)' || exit 1; \
	done
	@rm -rf target/release && mkdir -p target/release && cp -R charts/mining-operator target/release/
	@# The released chart pulls from where its images were pushed.
	@sed -i 's|^imageRegistry: localhost$$|imageRegistry: $(REGISTRY)|' target/release/mining-operator/values.yaml
	@grep -qx 'imageRegistry: $(REGISTRY)' target/release/mining-operator/values.yaml
	$(HELM) package target/release/mining-operator --destination target/release
	$(HELM) push target/release/mining-operator-$(VERSION).tgz 'oci://$(REGISTRY)/charts' $(HELM_PUSH_ARGS)
	@echo
	@echo "released $(VERSION). Install it with:"
	@echo "  helm install mining oci://$(REGISTRY)/charts/mining-operator --version $(VERSION) --namespace mining --create-namespace"
