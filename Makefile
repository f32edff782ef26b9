# Two entry points for a fresh Debian machine with Python 3.11 (see README):
#   make demo   installs everything, then runs one closed-loop LIBERO episode (video + timing report)
#   make test   installs everything, then runs the test suite
# Both are idempotent: system packages and the virtual environment are only touched when missing or stale.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_PACKAGES := libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libopengl0 libosmesa6 libglib2.0-0
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl

.PHONY: demo test test-min install system-deps clean libero-spatial libero-spatial-memory libero-spatial-suite-data libero-spatial-suite-model libero-spatial-suite-dagger

demo: install
	$(BIN)/oxygen-gym demo

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

install: system-deps $(STAMP)

# Headless MuJoCo renders through EGL on Mesa's software renderer. apt waits up to 5 minutes for a lock another apt
# holds (an unattended upgrade) instead of failing at once.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		echo "installing system packages:$$missing"; \
		$$SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get \
			-o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $$missing; \
	fi

# torch 2.13 CPU is installed first by exact version so pip takes the CPU wheel where one is at hand.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0" || $(BIN)/python -m pip install -q "torch>=2.3"
	$(BIN)/python -m pip install -q -e ".[sim,eval,serve,test,train]"
	# openpi's own client (the serving tests talk to our server with it) pins numpy<2 in its metadata but runs on
	# numpy 2; installing it without its pins keeps the numpy the simulators were verified with.
	$(BIN)/python -m pip install -q --no-deps "openpi-client>=0.1.2"
	# lerobot 0.4.4's GR00T action head is the reference of the StarVLA groot head (tests/helpers/lerobot_groot.py): the wheel
	# without its dependency tree (datasets, every policy's stack), plus the few its action head imports.
	$(BIN)/python -m pip install -q --no-deps "lerobot==0.4.4" "diffusers==0.35.2" "draccus==0.11.6" "mergedeep==1.3.4" \
		"toml==0.10.2" "typing-inspect==0.9.0" "mypy-extensions>=1.0"
	# LeRobotDataset reading and writing (train/lerobot_io.py): what lerobot's dataset module imports, at lerobot's
	# pins (datasets < 5, av < 16); images go in parquet, so no video codec is used (av is imported all the same).
	$(BIN)/python -m pip install -q "datasets==4.8.5" "pandas==2.3.3" "pyarrow==26.0.1" "av==15.1.0"
	# ... and torchvision, which it imports too: PyPI's wheel is a CUDA build (its ops do not load on the CPU torch),
	# so it goes outside the environment, where only lerobot_io.py's child process puts it on the path (installed in
	# the environment, transformers would take torchvision for usable).
	$(BIN)/python -m pip install -q --no-deps --upgrade --target $(VENV)/lerobot-torchvision "torchvision==0.28.0"
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info

# The policy, serve and eval-smoke tests in a second environment at the declared minimum versions (pyproject.toml), as
# `pip install openpi-client oxygen-gym[serve]` resolves for a user: numpy 1.26 (openpi-client pins numpy<2) and
# openpi-client installed with its own pins; scipy and gymnasium for the eval CLI. torch is the same local CPU wheel as in $(VENV)
# (not its 2.3 floor).
# It lives inside $(VENV): ignored by git, removed by make clean.
VENV_MIN ?= $(VENV)/min
MIN_PINS := numpy==1.26.4 websockets==15.0 msgpack==1.0.5 transformers==4.57.0
MIN_TESTS := tests/policy/test_numpy_compat.py tests/policy/test_policy_*.py tests/serve/test_serve_*.py tests/eval/test_eval_cli.py
test-min: $(VENV_MIN)/.installed
	$(VENV_MIN)/bin/python -c "import numpy, websockets; assert numpy.__version__.startswith('1.26'), numpy.__version__"
	$(VENV_MIN)/bin/python -m pytest -q $(MIN_TESTS) $(PYTEST_ARGS)

$(VENV_MIN)/.installed: pyproject.toml Makefile
	test -x $(VENV_MIN)/bin/python || $(PYTHON) -m venv $(VENV_MIN)
	printf '%s\n' $(MIN_PINS) > $(VENV_MIN)/constraints.txt
	$(VENV_MIN)/bin/python -m pip install -q --upgrade pip
	$(VENV_MIN)/bin/python -m pip install -q "torch==2.13.0" || $(VENV_MIN)/bin/python -m pip install -q "torch>=2.3"
	$(VENV_MIN)/bin/python -m pip install -q -c $(VENV_MIN)/constraints.txt -e ".[serve,test]" "openpi-client>=0.1.2" "scipy>=1.10" "gymnasium>=1.0"
	touch $@

# The shipped `libero-spatial` model from scratch (docs/libero-spatial.md, "How it was made"): perturbed demonstrations
# of libero_spatial task 0 on fresh scenes 0-89 (scenes whose draw threw an object > 5 cm dropped; every official init
# state held out), then the `compact` config for 5,000 steps (its last checkpoint has the lowest validation error,
# train/checkpoint_monitor.py best_step), exported declaring replan_steps 3 (experiments/libero-spatial-log.md, "A
# shorter execution horizon") and a deterministic arm with a sampled gripper, noise_scale [0,0,0,0,0,0,1] ("A
# deterministic arm"). No DAgger fine-tune: on the same fresh scenes one made the model worse.
# Every step resumes when rerun; the result replaces oxygen_gym/assets/libero-spatial/ (keeping its memory adapter
# folder, retrained by the next recipe).
DATA ?= data/libero-spatial
RUN ?= runs/train-libero-spatial
TRAIN_FLAGS := --batch-size 32 --ema-decay 0.999 --color-jitter 0.1 --shift 4 --val-scenes 0-3 --checkpoint-every 500 --threads 2 --replan-steps 3 --noise-scale 0,0,0,0,0,0,1
libero-spatial: install
	$(BIN)/oxygen-gym collect libero --suite libero_spatial --tasks 0 --fresh-scenes 0-89 --variants 2 --perturb 0.15 --max-settle-cm 5 --no-fast-render --workers 2 --out $(DATA)
	OMP_WAIT_POLICY=PASSIVE $(BIN)/oxygen-gym train --data $(DATA) --config compact --steps 5000 $(TRAIN_FLAGS) --out $(RUN)
	mkdir -p oxygen_gym/assets/libero-spatial && find oxygen_gym/assets/libero-spatial -maxdepth 1 -type f -delete && cp $(RUN)/model/* oxygen_gym/assets/libero-spatial/

# The shipped memory adapter of libero-spatial (docs/libero-spatial.md, "The memory adapter"): the base recipe's
# fresh-scene demonstrations (every frame labelled with what the robot did last, envs/scene_memory.py), then a rank-8
# LoRA trained on the frozen shipped model's language path. Resumes when rerun; the result replaces
# oxygen_gym/assets/libero-spatial/adapters/memory/ (only valid for the base it was trained on).
MEMORY_DATA ?= $(DATA)
MEMORY_RUN ?= runs/train-memory
MEMORY_PROMPT ?= What did the robot do last?
libero-spatial-memory: install
	OMP_WAIT_POLICY=PASSIVE $(BIN)/oxygen-gym train --adapter memory --label memory --prompt "$(MEMORY_PROMPT)" --rank 8 --data $(MEMORY_DATA) --steps 450 --batch-size 32 --balance-labels --threads 2 --out $(MEMORY_RUN)
	rm -rf oxygen_gym/assets/libero-spatial/adapters/memory && mkdir -p oxygen_gym/assets/libero-spatial/adapters && cp -r $(MEMORY_RUN)/adapter oxygen_gym/assets/libero-spatial/adapters/memory

# Demonstrations of all ten libero_spatial tasks for the suite model (issue 59; docs/libero-suite.md): perturbed
# state-expert demos on fresh scenes (every official init state of every task held out), the cameras rendered every
# second step without antialiasing (half a render's cost; 0.6 grey levels from eval's antialiased images at 96 px,
# docs/benchmarks.md, well inside the colour jitter the model trains with) and stored at the compact model's 96 px
# (collect --image-every, --image-size). Scenes go in blocks of 5
# over all ten tasks, so a collection stopped anywhere covers every task; rerun to resume (attempts.jsonl). Keep
# SUITE_DATA outside the work tree where the work tree is laid anew between sittings.
SUITE_DATA ?= data/libero-spatial-suite
SUITE_SCENES ?= 50
SUITE_EXPERT := --release-xy-cm 2.5 --lift-speed 0.5 --image-size 96 --workers 2
SUITE_COLLECT := --suite libero_spatial --tasks 0-9 --variants 2 --perturb 0.15 --max-settle-cm 5 --image-every 2 \
	$(SUITE_EXPERT)
libero-spatial-suite-data: install
	for a in $$(seq 0 5 $$(($(SUITE_SCENES) - 1))); do \
		$(BIN)/oxygen-gym collect libero $(SUITE_COLLECT) --fresh-scenes $$a-$$(($$a + 4)) --out $(SUITE_DATA) || exit 1; \
	done

# The suite model from that data (issue 59, not yet shipped): the task-0 recipe's training (TRAIN_FLAGS) with fresh
# scenes 0-1 of every task held out for checkpoint choice; resumes when rerun. The model lands in $(SUITE_RUN)/model.
SUITE_RUN ?= runs/train-libero-spatial-suite
SUITE_STEPS ?= 10000
SUITE_TRAIN := --config compact $(filter-out --val-scenes 0-3,$(TRAIN_FLAGS)) --val-scenes 0-1
libero-spatial-suite-model: install
	OMP_WAIT_POLICY=PASSIVE $(BIN)/oxygen-gym train --data $(SUITE_DATA) --steps $(SUITE_STEPS) $(SUITE_TRAIN) \
		--out $(SUITE_RUN)

# One DAgger round on the suite model (docs/libero-suite.md): the model drives on fresh scenes SUITE_DAGGER_SCENES of
# each task in SUITE_DAGGER_TASKS (the weak ones first; rollouts are kept whether or not they succeed), the state expert labels every
# visited state and executes a chunk with probability 0.3; then a fine-tune from the model on the expert demos and the
# rollouts mixed 0.6 / 0.4. Each task's collection and the fine-tune resume when rerun.
SUITE_MODEL ?= $(SUITE_RUN)/model
SUITE_DAGGER ?= data/libero-spatial-suite-dagger1
SUITE_DAGGER_TASKS ?= 5 6 2 8 0 7
SUITE_DAGGER_SCENES ?= 100-139
SUITE_FINETUNE_RUN ?= runs/train-libero-spatial-suite-dagger1
SUITE_FINETUNE_STEPS ?= 3000
libero-spatial-suite-dagger: install
	for t in $(SUITE_DAGGER_TASKS); do \
		$(BIN)/oxygen-gym collect libero --suite libero_spatial --tasks $$t --fresh-scenes $(SUITE_DAGGER_SCENES) --variants 1 \
			$(SUITE_EXPERT) --dagger $(SUITE_MODEL) --dagger-beta 0.3 --out $(SUITE_DAGGER) || exit 1; \
	done
	OMP_WAIT_POLICY=PASSIVE $(BIN)/oxygen-gym train --data $(SUITE_DATA),$(SUITE_DAGGER) --data-mix 0.6,0.4 \
		--init $(SUITE_MODEL) --steps $(SUITE_FINETUNE_STEPS) --lr 3e-4 --warmup 100 $(SUITE_TRAIN) --out $(SUITE_FINETUNE_RUN)
