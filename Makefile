# Two commands (README): `make app` sets up and starts the app; `make test` sets up and runs
# every test. Both create a local virtual environment in .venv once and reuse it. `make test-fast`
# runs the fast tier while working on the core (README; CI runs `make test`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8501
SHARED ?= ../shared

.PHONY: app test test-fast bench cases venv clean

# The fast tier: the analytic core, the serving plan, the store and the command line; no app page
# (AppTest), browser, torch benchmark, torchrun or install test. About a minute on 2 cores.
FAST_TESTS := tests/test_kv.py tests/test_capacity.py tests/test_roofline.py tests/test_params.py \
	tests/test_units.py tests/test_config.py tests/test_layers.py tests/test_whatif.py tests/test_sweeps.py \
	tests/test_claims.py tests/test_properties.py tests/test_serving.py tests/test_cases.py tests/test_cli.py \
	tests/test_store.py tests/test_bench_history.py tests/test_engines.py

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

test-fast: $(VENV)/.test-installed
	$(PY) -m pytest -q $(FAST_TESTS)

# The project's acceptance cases (tests/fixtures/cases, also run by `make test`); and, where a team
# folder ../shared sits beside the clone, its cases too. A plain clone says so and passes.
cases: $(VENV)/.app-installed
	$(PY) tests/cases_check.py
	@if [ -f $(SHARED)/tools/check_cases.py ]; then \
		echo "$(SHARED) found: running its cases too"; $(PY) $(SHARED)/tools/check_cases.py; \
	else echo "no $(SHARED) beside this clone: ran the project's own cases (tests/fixtures/cases) only"; fi

bench: $(VENV)/.test-installed
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
