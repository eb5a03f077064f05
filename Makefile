# The two entry points in README.md: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO := demo-project
# Three pytest-xdist workers on two cores (one mostly waits for the project suite, which runs its own two);
# whole files per worker, so a module's fixtures (the matrix's 17 projects) are made once. With one thread a
# process (below), on a 2-core EPYC: 7 min 54 s of pytest, against 8 min 17 s with two workers. Since then the
# suite grew (server profile, shards, second start): 8 min 04 s and 9 min 04 s on two fresh clones of one commit on
# 2026-11-25 (the machine's speed varies), both cores busy throughout (16 to 18 CPU-minutes), so more workers would
# not help; the project suite is the long pole.
PYTEST_ARGS ?= -n 3 --dist loadfile

.PHONY: demo test lint bench env clean tags test-answers gpu-test gpu-project gpu-bench gpu-wheels gpu-check slurm-test

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

# The GPU suite: the template's gpu tests, then a generated project's (`-m gpu`; they skip without CUDA).
GPU_PROJECT := .gpu-project

gpu-project: $(STAMP)
	rm -rf $(GPU_PROJECT)
	$(BIN)/copier copy --trust --defaults --quiet --vcs-ref HEAD -d project_name="GPU Check" -d package_name=gpu_check . $(GPU_PROJECT)

gpu-test: gpu-project
	$(BIN)/python -m pytest -m gpu tests/test_gpu.py
	cd $(GPU_PROJECT) && ../$(BIN)/python -m pytest -m gpu

# Throughput on the GPU: the three columns for resnet18@224, resnet50@224, resnet18@64, simple_cnn@64 from JPEG
# files. It runs the project `make gpu-project` generated beforehand, so the GPU machine needs PyTorch, not copier.
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_PYTHON_IN_PROJECT = $(if $(findstring /,$(GPU_PYTHON)),$(abspath $(GPU_PYTHON)),$(GPU_PYTHON))

gpu-bench:
	@test -d $(GPU_PROJECT) || { echo "no $(GPU_PROJECT)/: run make gpu-project first (where copier is)"; exit 1; }
	$(GPU_PYTHON) benchmarks/throughput.py --project $(GPU_PROJECT) --out .bench/throughput-gpu.json

# TorchCodec (nvJPEG decoding) for a GPU machine without network: its wheel, at constraints.txt's version, in
# .wheels/ (ignored; carry it over with .gpu-project/). TorchCodec names no torch requirement: pip takes no torch.
WHEELS := .wheels

gpu-wheels: $(STAMP)
	$(BIN)/python -m pip download --quiet --disable-pip-version-check --no-deps -c constraints.txt -d $(WHEELS) torchcodec

# The GPU checks in one command, from a checkout holding .gpu-project/ (make gpu-project) and, for nvJPEG,
# .wheels/ (make gpu-wheels), both made where copier and the network are: TorchCodec installed from .wheels/,
# the template's GPU suite and the project's (-m gpu; nvJPEG tests fail instead of skipping), then gpu-bench's
# cases in --check sizes. Ends with one table: trainer and compute-bound images/s, their ratio, host syncs a
# step, per case; it fails when a suite failed. Sized for 10 minutes on one H100.
gpu-check:
	@test -d $(GPU_PROJECT) || { echo "no $(GPU_PROJECT)/: run make gpu-project first (where copier is)"; exit 1; }
	@if ls $(WHEELS)/torchcodec-*.whl >/dev/null 2>&1; then \
		PIP_BREAK_SYSTEM_PACKAGES=1 $(GPU_PYTHON) -m pip install --quiet --disable-pip-version-check --no-index --no-deps --find-links $(WHEELS) torchcodec; \
	else echo "no $(WHEELS)/torchcodec-*.whl (make gpu-wheels): the nvJPEG tests fail"; fi
	@mkdir -p .bench; start=$$(date +%s); \
	GPU_PROJECT=$(GPU_PROJECT) $(GPU_PYTHON) -m pytest -p no:cacheprovider -m gpu tests/test_gpu.py; template=$$?; \
	(cd $(GPU_PROJECT) && TORCH_SCAFFOLD_REQUIRE_NVJPEG=1 PYTHONPATH=src $(GPU_PYTHON_IN_PROJECT) -m pytest -p no:cacheprovider -m gpu); \
		project=$$?; \
	$(GPU_PYTHON) benchmarks/throughput.py --check --project $(GPU_PROJECT) --out .bench/gpu-check.json; bench=$$?; \
	echo; echo "gpu-check in $$(( $$(date +%s) - start )) s: template GPU suite rc=$$template, project GPU suite rc=$$project, bench rc=$$bench"; \
	test $$bench -ne 0 || $(GPU_PYTHON) benchmarks/throughput.py --table .bench/gpu-check.json; \
	test $$template -eq 0 -a $$project -eq 0 -a $$bench -eq 0
# A real one-node Slurm on localhost (as root: installs slurm-wlm and munge with apt-get when sbatch is missing),
# then a generated project's Slurm tests: jobs run straight, requeued after USR1, restarted after a kill
# (pytest -m slurm; a few minutes). The daemons stop afterwards, also when a test fails.
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
	rm -rf $(VENV) $(DEMO) $(GPU_PROJECT) $(WHEELS) $(SLURM_PROJECT) .pytest_cache .ruff_cache
