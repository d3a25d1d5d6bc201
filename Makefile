# Two commands (README): `make app` sets up and starts the app; `make test` sets up and runs
# every test. Both create a local virtual environment in .venv once and reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8501
SHARED ?= ../shared

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
