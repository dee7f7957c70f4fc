# rlplat: every target sets up its own virtualenv on first use.
PYTHON ?= python3
VENV ?= .venv
# torch is installed first, pinned, so that pip never pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
# what training needs; then the extras the tests, linters and sweeps on Slurm or Ray need
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
DEV_EXTRAS := test,lint,docs,video,slurm,ray,tensorboard,envpool,atari,postgres,minigrid,mujoco,pixels
# the peers of make bench-peers, in a virtualenv of their own, pinned
PEERS_VENV ?= .venv-peers
PEERS ?= stable-baselines3==2.9.2 rl_zoo3==2.9.2 torchrl==0.14.1
# test processes (pytest-xdist); most tests start rlplat-train, one process each: one per core;
# --dist worksteal lets a worker that runs out of tests take some of the other's
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
# make test-compat: the oldest and the newest torch that pyproject.toml allows (the newest
# installable here), each in a virtualenv of its own (.venv-compat-<version>)
COMPAT_TORCH ?= 2.11.0 2.14.1

.PHONY: install install-dev train test test-all test-compat lint docs docs-serve ui bench bench-replay bench-learning bench-sweeps bench-peers bench-peers-cuda docs-images clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[$(DEV_EXTRAS)]'
	touch $(DEV_STAMP)

$(VENV)/.installed-envpool: $(STAMP)
	$(BIN)/pip install --quiet -e '.[envpool]'
	touch $@

install: $(STAMP)  ## create the virtualenv and install rlplat (editable): what training needs

$(PEERS_VENV)/.installed:
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet "$(TORCH)"
	$(PEERS_VENV)/bin/pip install --quiet $(PEERS)
	touch $@

install-dev: $(DEV_STAMP)  ## also the test, lint, video, Slurm, Ray, TensorBoard, EnvPool and Atari extras

train: $(STAMP)  ## train PPO on Pendulum-v1 with the tuned preset, recorded in outputs/mlflow.db
	$(BIN)/rlplat-train algo=ppo env=pendulum

test: $(DEV_STAMP)  ## the default test suite (slow learning checks skipped)
	$(BIN)/pytest -m "not slow" -n $(TEST_WORKERS) --dist worksteal

lint: $(DEV_STAMP)  ## ruff (lint and format), mypy on rlplat/, import-layer contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# the site: Markdown pages in docs/, the reference generated from the code (docs/_ext/rlplat_docs.py);
# -W --keep-going -n: every warning, broken link or reference to a missing object fails the build
DOCS_OUT ?= docs/_build/html
docs: $(DEV_STAMP)  ## build the documentation site strictly into docs/_build/html
	$(BIN)/sphinx-build -W --keep-going -n -q -j auto -b html docs $(DOCS_OUT)

docs-serve: $(DEV_STAMP)  ## preview the site at http://127.0.0.1:8000, rebuilt on every change
	$(BIN)/sphinx-autobuild -n -b html --port 8000 --ignore "*/reference/*" --watch rlplat --watch conf docs $(DOCS_OUT)

test-all: $(DEV_STAMP)  ## every test, slow learning checks included
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal

test-compat:  ## the unit tests and one training run with the oldest and the newest torch pyproject.toml allows
	@for version in $(COMPAT_TORCH); do \
	  venv=.venv-compat-$$version; \
	  echo "== torch $$version ($$venv)"; \
	  (test -x $$venv/bin/python || $(PYTHON) -m venv $$venv) && \
	  $$venv/bin/pip install --quiet "torch==$$version" && \
	  $$venv/bin/pip install --quiet -e '.[$(DEV_EXTRAS)]' && \
	  $$venv/bin/python -c "import tensordict, torch; print('torch', torch.__version__, 'tensordict', tensordict.__version__)" && \
	  $$venv/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) tests/unit && \
	  $$venv/bin/rlplat-train algo=ppo env=cartpole trainer.total_frames=20000 tracking.enabled=false \
	    hydra.run.dir=$$venv/run | grep -E "^accel:|eval @" || exit 1; \
	done

ui: $(STAMP)  ## serve the MLflow UI on the default store at http://127.0.0.1:5000
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/outputs/mlflow.db --host 127.0.0.1 --port 5000

bench: $(STAMP)  ## speed of the hot loop: collection, updates, whole loop; seconds to report each bad input; seconds an absent or hung tracking server holds a run up; replay sampling at 1M; frames/s per collector (medians)
	$(BIN)/python benchmarks/speed.py
	$(BIN)/python benchmarks/bad_input.py
	$(BIN)/python benchmarks/tracking_timeouts.py
	$(BIN)/python benchmarks/replay_speed.py
	$(BIN)/python benchmarks/collectors.py

bench-replay: $(DEV_STAMP)  ## resident memory of DQN's replay of 100k Pong transitions (each frame stored once); 10k frames of DQN on a memory-mapped replay of 1M
	$(BIN)/python benchmarks/replay_memory.py
	$(BIN)/python benchmarks/replay_memory.py --train-frames 10000

bench-learning: $(STAMP)  ## rerun the results table (README, docs/benchmarks/results.md: 5 seeds per pair) and its plots
	$(BIN)/python benchmarks/learning.py --plots benchmarks/report --json benchmarks/results.json

bench-sweeps: $(DEV_STAMP)  ## start-up cost per run, and a 4-job sweep serial vs on the parallel launcher
	$(BIN)/python benchmarks/sweeps.py

bench-peers: $(VENV)/.installed-envpool $(PEERS_VENV)/.installed  ## rlplat vs Stable-Baselines3 + RL-Zoo, TorchRL, CleanRL-style: writes benchmarks/peers.json, docs/benchmarks/speed.md, README
	$(BIN)/python benchmarks/peers.py --peers-python $(PEERS_VENV)/bin/python

bench-peers-cuda: $(DEV_STAMP) $(PEERS_VENV)/.installed  ## the GPU rows (a CUDA build of torch: TORCH=...): writes benchmarks/peers_cuda.json, docs/benchmarks/speed.md
	$(PEERS_VENV)/bin/pip install --quiet ale-py opencv-python-headless
	$(BIN)/python benchmarks/peers_cuda.py --peers-python $(PEERS_VENV)/bin/python

docs-images: $(DEV_STAMP)  ## the comparing guide's screenshot of a sweep's parent run in the MLflow UI (needs Chromium)
	RLPLAT_SCREENSHOT=$(CURDIR)/docs/images/mlflow_parent_run.png $(BIN)/pytest -q -rs tests/integration/test_mlflow_ui.py

clean:  ## remove the virtualenv and build leftovers (outputs/ is kept)
	rm -rf $(VENV) $(PEERS_VENV) .venv-compat-* build *.egg-info
