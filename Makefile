# Each target sets up what it needs: a virtual environment in .venv with the package installed
# in editable mode and its test extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-all docs bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cuda,opencl]'
	@# Debian's packages, when root and missing, in one apt-get call: clang checks the Metal
	@# text (backends/metal/check.py); lavapipe (mesa-vulkan-drivers, a CPU Vulkan 1.3 device
	@# without cooperative matrices) and the Vulkan loader (libvulkan1) run the SPIR-V tests
	@if [ "$$(id -u)" = 0 ]; then \
		missing=""; \
		command -v clang >/dev/null 2>&1 || missing="clang"; \
		for p in mesa-vulkan-drivers libvulkan1; do \
			dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" \
				|| missing="$$missing $$p"; \
		done; \
		if [ -n "$$missing" ]; then apt-get update -q && apt-get install -y -q $$missing; fi; \
	fi
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sarek demo

test: $(STAMP)
	@# pytest-xdist: one worker process per core; the long matrices are marked slow
	$(PY) -m pytest -n auto -m "not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -n auto -m slow

test-all: $(STAMP)
	$(PY) -m pytest -n auto

DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	@# warnings are errors: a broken reference or a missing page fails the build
	@# the theme announces its successor on every build; the notice is not a warning of this site
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) -m bench.sim_speed
	$(PY) -m bench.recognize_speed

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
