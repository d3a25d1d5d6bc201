# Two commands (README): `make app` sets up and starts the app; `make test` sets up and runs
# every test. Both create a local virtual environment in .venv once and reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8501

.PHONY: app test bench cases venv clean

$(VENV)/.app-installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.test-installed: $(VENV)/.app-installed requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

venv: $(VENV)/.test-installed

app: $(VENV)/.app-installed
	$(PY) -m ui.serve --server.address $(HOST) --server.port $(PORT)

test: $(VENV)/.test-installed
	$(PY) -m pytest

cases: $(VENV)/.app-installed
	$(PY) ../shared/tools/check_cases.py

bench: $(VENV)/.test-installed
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
