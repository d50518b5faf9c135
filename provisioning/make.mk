# provisioning/: Ansible for the Basalt fleet (see provisioning/README.md).

PROVISIONING_PYTHON ?= /usr/bin/python3
PROVISIONING_VENV := provisioning/.venv
PROVISIONING_BIN := $(abspath $(PROVISIONING_VENV))/bin
PROVISIONING_PLAYBOOKS := site.yml verify.yml bench.yml health.yml upgrade.yml tests/cluster/refuse-format.yml tests/cluster/uring-preflight.yml

.PHONY: provisioning-venv provisioning-lint provisioning-unit test-provisioning provisioning-cluster-test

## provisioning-venv: controller venv (pinned ansible-core, ansible-lint, collections from PyPI)
provisioning-venv: $(PROVISIONING_VENV)/.stamp

$(PROVISIONING_VENV)/.stamp: provisioning/requirements.txt
	rm -rf $(PROVISIONING_VENV)
	$(PROVISIONING_PYTHON) -m venv $(PROVISIONING_VENV)
	$(PROVISIONING_BIN)/pip install -q --disable-pip-version-check -r provisioning/requirements.txt
	touch $@

## provisioning-lint: syntax-check of every playbook and ansible-lint at the production profile
provisioning-lint: provisioning-venv
	cd provisioning && for p in $(PROVISIONING_PLAYBOOKS); do \
	  PATH=$(PROVISIONING_BIN):$$PATH ansible-playbook -i inventory/example.yml --syntax-check $$p || exit 1; done
	cd provisioning && PATH=$(PROVISIONING_BIN):$$PATH ansible-lint --profile production --strict

## provisioning-unit: pytest for the live-state parsers and the fleet report builders
provisioning-unit: provisioning-venv
	cd provisioning && PATH=$(PROVISIONING_BIN):$$PATH python -m pytest -q tests/unit

## provisioning-cluster-test: real three-node nspawn cluster (root); with the appliance steps
## when make deb / make test-appliance left a package in target/debian (never built here)
provisioning-cluster-test: provisioning-venv
	@deb="$$(ls -t target/debian/basalt_*_amd64.deb 2>/dev/null | head -1)"; \
	if [ -z "$$deb" ]; then echo "provisioning-cluster-test: no target/debian/basalt_*_amd64.deb (run make deb): appliance steps will be skipped"; fi; \
	PATH=$(PROVISIONING_BIN):$$PATH provisioning/tests/run-cluster-test $${deb:+--deb "$$deb"}

## test-provisioning: lint, unit tests, then the real cluster test
test-provisioning: provisioning-lint provisioning-unit provisioning-cluster-test

TEST_TARGETS += test-provisioning
