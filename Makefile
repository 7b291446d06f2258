# `make demo` runs the whole stack on this machine without a cluster or Docker.
# The kind path: a kind cluster, the three images built and loaded, the chart
# installed, the frontend port-forwarded. `make help` lists the targets.
# Needs docker, kind, kubectl and helm (3.14+ or 4). Tests: `make test`.

CLUSTER   ?= mining
NAMESPACE ?= mining
RELEASE   ?= mining
TAG       ?= dev
PORT      ?= 8080
HELM      ?= helm
KIND      ?= kind
DOCKER    ?= docker
# Extra `helm upgrade --install` arguments, e.g. HELM_ARGS='--set frontend.auth.mode=kubernetes'.
HELM_ARGS ?=

IMAGES = miner operator mcp-frontend

.PHONY: help demo demo-down test kind-up images kind-load install port-forward kind-demo kind-down

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

images: ## build mining-operator/{miner,operator,mcp-frontend}:$(TAG)
	@for image in $(IMAGES); do \
	  echo "docker build -f $$image/Dockerfile -t mining-operator/$$image:$(TAG) ."; \
	  $(DOCKER) build -f $$image/Dockerfile -t mining-operator/$$image:$(TAG) . || exit 1; \
	done

kind-load: images ## load the images into the kind cluster (tags, not :latest, so IfNotPresent uses them)
	@for image in $(IMAGES); do \
	  $(KIND) load docker-image --name '$(CLUSTER)' mining-operator/$$image:$(TAG) || exit 1; \
	done

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
