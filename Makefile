# Both targets set up .venv themselves (scripts/bootstrap.sh is a no-op when nothing changed).
VENV := .venv
PY := $(VENV)/bin/python
# The warm-start recipe (SFT on minimax's every position, then 15 min of PPO); the cold one,
# PPO alone: make demo CONFIG=configs/tictactoe_selfplay.yaml
CONFIG ?= configs/tictactoe_warm.yaml
# make test's pytest-xdist workers. A stack test spends much of its time waiting on its servers,
# so two workers on 2 cores overlap that waiting: 20.5-24 min of tests against 30 on one (2026-12-05).
# A test file stays on one worker (loadfile); files go out in collection order (e2e first, the
# short unit files last to fill the gaps), not largest-first, which left the stack tests for last.
TEST_WORKERS ?= 2

.PHONY: setup demo test test-fast test-containers lint bench bench-gpu results lock clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	$(PY) -m agora.cli demo $(CONFIG)

test: setup
	$(VENV)/bin/ruff check agora services tests bench
	bash scripts/ensure_prometheus.sh
	bash scripts/ensure_deploy_tools.sh
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=25 tests

# tests/unit only: nothing started (tests/unit/conftest.py refuses processes), ~1 min on 2 cores (500 tests).
test-fast: setup
	$(PY) -m pytest -q tests/unit

# Real containers (issue 19): podman (installed if missing), agora's images built without a
# registry (scripts/local_base_images.sh: minutes the first time), tests/e2e/test_containers.py.
test-containers: setup
	bash scripts/local_base_images.sh
	$(PY) -m pytest -q tests/e2e/test_containers.py

# Every learning experiment of configs/results.yaml (docs/results.md): hours on 2 cores.
# Writes results/results.md (the README's figures) and results/curves.png; done experiments
# are kept, so running it again continues an interrupted plan.
results: setup
	$(PY) -m agora.cli results configs/results.yaml --out results

# Pin every installed package's exact version for the next fresh install (scripts/bootstrap.sh).
lock: setup
	{ sed -n '1,3p' requirements/lock.txt; \
	  $(PY) -m pip freeze --exclude-editable --disable-pip-version-check | grep -v '^#'; } \
	  > requirements/lock.txt.new && mv requirements/lock.txt.new requirements/lock.txt

lint: setup
	$(VENV)/bin/ruff check agora services tests bench

bench: setup
	$(PY) bench/machine_speed.py
	$(PY) bench/throughput.py
	$(PY) bench/hotswap.py
	$(PY) bench/ppo_update.py
	$(PY) bench/shared_base.py
	$(PY) bench/gateway_load.py
	$(PY) bench/trl_ppo.py
	$(PY) bench/negotiation_demonstrators.py

# On a machine with a CUDA GPU: the gpu tests, then issue 14's GPU figures (135M and 0.5B
# shapes, Tic-Tac-Toe and ~270-token turns, ours vs TRL; learners on one base and the
# mixed-adapter batch), appended to bench/results.md.
# Not through .venv (bootstrap installs the CPU torch): GPU_PY is a Python with a CUDA torch
# and agora's dependencies (transformers, peft, trl, pydantic, ...).
GPU_PY ?= python3
bench-gpu:
	PYTHONPATH=. $(GPU_PY) -m pytest -q -m gpu tests/integration/test_gpu.py
	PYTHONPATH=. $(GPU_PY) bench/ppo_update.py --device cuda --model-shape 135m --set ttt32
	PYTHONPATH=. $(GPU_PY) bench/ppo_update.py --device cuda --model-shape 0.5b --set ttt64
	PYTHONPATH=. $(GPU_PY) bench/ppo_update.py --device cuda --model-shape 0.5b --set long64
	PYTHONPATH=. $(GPU_PY) bench/ppo_update.py --device cuda --model-shape 0.5b --set long64 \
		--compile
	PYTHONPATH=. $(GPU_PY) bench/trl_ppo.py --device cuda --model-shape 0.5b --turns 32
	PYTHONPATH=. $(GPU_PY) bench/shared_base.py --device cuda --model-shape 0.5b

clean:
	rm -rf runs .pytest_cache
