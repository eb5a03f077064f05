# The two entry points in README.md: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO := demo-project
# Three pytest-xdist workers on two cores, whole files per worker, so a module's fixtures (the matrix's 17 projects)
# are made once; many tests mostly wait on copier's and git's children. Chosen when make test still held the
# generated project's suite (0.7.x, 2-core EPYC: 7 min 54 s against 8 min 17 s with two workers; four: 8 min 51 s).
# Since 0.12.0 that suite is make test-project (below), and make test took 3 min 46 s on the idle AVX512-BF16 EPYC
# (about 450 CPU-seconds; benchmarks/README.md, "For maintainers: test-suite timing", says where they go).
PYTEST_ARGS ?= -n 3 --dist loadfile

.PHONY: demo test test-project lint bench bench-env env clean tags test-bench test-answers gpu-test gpu-project gpu-bench gpu-wheels gpu-check slurm-test

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

# Generate demo-project/ as README's "Start a project" does for a user: from the newest release tag (tagged first by
# `make tags` where this clone has none), or from REF when given (`make demo REF=HEAD`: this checkout, uncommitted
# changes included), then make the sample data and train on it. The ref it generated from is printed at the end.
REF ?=

demo: $(STAMP)
	@test -n "$(REF)" || $(PYTHON) generator/releases.py
	rm -rf $(DEMO)
	$(BIN)/copier copy --trust --defaults --quiet $(if $(REF),--vcs-ref $(REF)) -d project_name="Demo Project" . $(DEMO)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e $(DEMO)
	cd $(DEMO) && ../$(BIN)/python -m demo_project sample-data data/sample
	cd $(DEMO) && ../$(BIN)/python -m demo_project train --config configs/default.yaml
	@echo
	@echo "Outputs: $(DEMO)/runs/default (last.pt, best.pt, metrics.jsonl, curves.png, train_batch.png)"
	@$(BIN)/python -c "import json; r = [json.loads(l) for l in open('$(DEMO)/runs/default/metrics.jsonl')]; \
		print(f'Final validation accuracy: {100 * r[-1][\"val_acc\"]:.1f}% (best {100 * max(x[\"val_acc\"] for x in r):.1f}%) after {r[-1][\"epoch\"]} epochs')"
	@$(BIN)/python -c "import yaml; ref = yaml.safe_load(open('$(DEMO)/.copier-answers.yml'))['_commit']; \
		print(f'Generated from {ref}: ' + ('$(REF), as asked' if '$(REF)' else \
		'the newest release, what copier copy gives a user (make demo REF=HEAD: this checkout)'))"

# Tag every release the CHANGELOG lists and this clone lacks (generator/releases.py): copier generates from tags.
tags:
	$(PYTHON) generator/releases.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# One intra-op thread a process: the xdist workers, the project suite's own workers and their trainings already
# keep both cores busy, and torch's default (a thread per core) made them spin against each other: measured on a
# 2-core EPYC with two workers, 8 min 17 s instead of 8 min 56 s, and 15 instead of 16.5 CPU-minutes.
test: lint
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest $(PYTEST_ARGS)

# The default generated project's whole suite by its README's command (tests/test_generate.py, marked
# project_suite), the same with every hook of models/extensions.py filled (tests/test_extension_hooks.py), and the
# lean answers (tests/test_optional_parts.py): a project with every optional part off, its whole suite, and the
# updates that add a part and that take a v0.14.0 project across the question. About 390 CPU-seconds a suite, which
# took make test past 10 minutes on an AVX2 EPYC with the template's own 450: .ci/run runs it after make test, the
# CI workflow in a job of its own.
test-project: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -m project_suite -p no:xdist tests/test_generate.py \
		tests/test_extension_hooks.py tests/test_optional_parts.py

# What the benchmarks compare the project with, beside the dev environment (the bench extra): fast.ai for
# finetune.py; cleanlab's Datalab, cleanvision and imagededup for data_audit.py.
BENCH_STAMP := $(VENV)/.bench-installed

bench-env: $(BENCH_STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,bench]'
	touch $@

# Every benchmark script's --quick run (tests/test_benchmarks.py, marked bench): that each still runs against this
# checkout, in about 2 minutes on 2 cores. Not in make test, which it would lengthen by half (113 CPU-seconds of
# some 40 Python processes); .ci/run runs it after make test, and the template's CI workflow in a job of its own.
test-bench: $(BENCH_STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -m bench -n 2 tests/test_benchmarks.py

# Before each release: a project whose every answer differs from the default (tests/test_other_answers.py), then
# every row of the answer matrix (tests/test_matrix.py), each with its generated project's whole suite and under
# 1 GB of temporary files (4 to 5.5 min and 160 MB a project on a 2-core EPYC; 18 projects: 78 min on 2026-11-25).
# tests/answer_rows.py lists them, as for the CI workflow's jobs (.github/workflows/ci.yml: one job a project).
test-answers: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -m slow -rP -n 1 \
		$$($(BIN)/python tests/answer_rows.py --tests)

# Throughput (compute bound, generated trainer, naive loop) and checkpoint cost, printed and in .bench/.
bench: $(STAMP)
	$(BIN)/python benchmarks/throughput.py
	$(BIN)/python benchmarks/checkpoint_cost.py

# The GPU suites in this .venv: the template's gpu tests, then a generated project's (`-m gpu`; they skip without
# CUDA). make gpu-check runs them from a bare GPU machine, where a skip fails.
GPU_PROJECT := .gpu-project

gpu-project: $(STAMP)
	rm -rf $(GPU_PROJECT)
	$(BIN)/copier copy --trust --defaults --quiet --vcs-ref HEAD -d project_name="GPU Check" -d package_name=gpu_check . $(GPU_PROJECT)

gpu-test: gpu-project
	$(BIN)/python -m pytest -m gpu tests/test_gpu.py
	cd $(GPU_PROJECT) && ../$(BIN)/python -m pytest -m gpu

# Throughput on the GPU: the three columns for resnet18@224, resnet50@224, resnet18@64, simple_cnn@64 from JPEG
# files, on the project `make gpu-project` generated beforehand (the GPU machine needs PyTorch, not copier), with
# the environment make gpu-check built where there is one, else GPU_PYTHON.
GPU_PYTHON ?= python3
GPU_VENV := .gpu-venv
GPU_BENCH_PYTHON = $(if $(wildcard $(GPU_VENV)/bin/python),$(GPU_VENV)/bin/python,$(GPU_PYTHON))

gpu-bench:
	@test -d $(GPU_PROJECT) || { echo "no $(GPU_PROJECT)/: run make gpu-project first (where copier is)"; exit 1; }
	$(GPU_BENCH_PYTHON) benchmarks/throughput.py --project $(GPU_PROJECT) --out .bench/throughput-gpu.json

# TorchCodec (nvJPEG decoding) for a GPU machine whose registry lacks it: its wheel, at constraints.txt's version,
# in .wheels/ (ignored; make gpu-check installs it from there when present, where it goes with that machine's torch:
# 2.11 or later, TorchCodec being built on torch's stable ABI). It names no torch requirement. TORCHCODEC_INDEX=URL:
# from another index, such as PyTorch's for the CUDA version of the GPU machine's torch.
WHEELS := .wheels

gpu-wheels: $(STAMP)
	$(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps -c constraints.txt -d $(WHEELS) \
		$(if $(TORCHCODEC_INDEX),--index-url $(TORCHCODEC_INDEX)) torchcodec

# Every GPU check in one command, from a clone, on a machine with a GPU, Python and a package registry
# (tests/gpu/check.py says each step): red in its first second where no GPU is usable (one line saying why);
# otherwise builds .gpu-venv over GPU_PYTHON's CUDA torch (never replaced), makes .gpu-project/ unless carried
# from this checkout's HEAD (copier only there), runs the template's and the project's GPU suites (a skip fails),
# a torchrun DDP job on every GPU (2 to 8), the benchmark's check cases (red where one did not run on the path it
# names), and ends with one table, each step timed.
# GPU_CHECK_ARGS="--dry-run 2" prints the commands for 2 GPUs and runs none; "--workers 1": a serial project suite.
gpu-check:
	@$(GPU_PYTHON) tests/gpu/check.py $(GPU_CHECK_ARGS)

# A real one-node Slurm on localhost (as root: installs slurm-wlm and munge with apt-get when sbatch is missing),
# then a generated project's Slurm tests: jobs run straight, requeued after USR1, a real time limit, scontrol
# requeue and a preemption (each requeue one line in the job's log), restarted after a kill, failed by a bug
# (pytest -m slurm; about 3 minutes on a 2-core EPYC). The daemons stop afterwards, also when a test fails.
SLURM_PROJECT := .slurm-project
SLURM_TEST_DIR ?= /tmp/torch-scaffold-slurm

slurm-test: $(STAMP)
	bash tests/slurm/install.sh
	rm -rf $(SLURM_PROJECT)
	$(BIN)/copier copy --trust --defaults --quiet --vcs-ref HEAD -d project_name="Slurm Check" -d package_name=slurm_check . $(SLURM_PROJECT)
	SLURM_TEST_DIR=$(SLURM_TEST_DIR) bash tests/slurm/start.sh
	cd $(SLURM_PROJECT) && SLURM_CONF=$(SLURM_TEST_DIR)/slurm.conf $(abspath $(BIN))/python -m pytest -m slurm tests/test_slurm.py; \
		status=$$?; cd .. && SLURM_TEST_DIR=$(SLURM_TEST_DIR) bash tests/slurm/stop.sh; exit $$status

clean:
	rm -rf $(VENV) $(DEMO) $(GPU_PROJECT) .gpu-venv $(WHEELS) $(SLURM_PROJECT) .pytest_cache .ruff_cache
