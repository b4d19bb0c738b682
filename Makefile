# Both targets set up .venv themselves (scripts/bootstrap.sh is a no-op when nothing changed).
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/tictactoe_selfplay.yaml

.PHONY: setup demo test test-fast lint bench clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	$(PY) -m agora.cli demo $(CONFIG)

test: setup
	$(VENV)/bin/ruff check agora services tests bench
	bash scripts/ensure_prometheus.sh
	bash scripts/ensure_deploy_tools.sh
	$(PY) -m pytest -q --durations=25 tests

test-fast: setup
	bash scripts/ensure_prometheus.sh
	bash scripts/ensure_deploy_tools.sh
	$(PY) -m pytest -q -m "not slow" tests

lint: setup
	$(VENV)/bin/ruff check agora services tests bench

bench: setup
	$(PY) bench/throughput.py
	$(PY) bench/hotswap.py
	$(PY) bench/ppo_update.py
	$(PY) bench/gateway_load.py
	$(PY) bench/trl_ppo.py

clean:
	rm -rf runs .pytest_cache
