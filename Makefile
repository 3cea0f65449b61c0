# The two set-up commands are `make demo` and `make test`; both install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export PATH := $(abspath $(VENV)/bin):$(PATH)

.PHONY: install system-deps test e2e demo lint bench bench-quick chaos clean

install: $(STAMP) system-deps

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all]'
	touch $(STAMP)

system-deps:
	bash scripts/system-deps.sh

# two workers: most of the suite waits on subprocesses (Spark JVMs, Airflow, servers), so two
# fill a 2-core CI machine; TEST_WORKERS=0 runs everything in one process
TEST_WORKERS ?= 2
# ARGS naming test paths (tests/...) runs only those, else the whole of tests/
test: install
	$(PY) -m pytest $(if $(filter tests%,$(ARGS)),,tests) -n $(TEST_WORKERS) --dist worksteal $(ARGS)

# the production topology (tests/e2e): PostgreSQL, S3, Redis, Airflow with Celery workers
# and a Spark standalone cluster, each its own process; pipelines and faults end to end.
# `make test` runs it too.
e2e: install
	$(PY) -m pytest tests/e2e -s --durations=5 $(ARGS)

demo: install
	$(PY) -m txn_broker.demo
	@if [ -f scripts/airflow_demo.py ]; then $(PY) scripts/airflow_demo.py; fi

lint: install
	$(VENV)/bin/ruff check txn_broker plugins dags spark_apps tests bench
	$(VENV)/bin/mypy txn_broker

bench: install
	$(PY) -m bench $(ARGS)

# `make bench --quick` cannot reach the program (make takes --options itself)
bench-quick: install
	$(PY) -m bench --quick $(ARGS)

# make chaos SEEDS=100 DURATION=20: that many seeded runs, each with DURATION seconds of faults
chaos: install
	$(if $(SEEDS),CHAOS_SEEDS=$(SEEDS)) $(if $(DURATION),CHAOS_DURATION=$(DURATION)) \
	$(PY) -m pytest tests/chaos -m chaos $(ARGS)

clean:
	rm -rf $(VENV) .venv-provider-test .txn_broker .pytest_cache .mypy_cache .ruff_cache
