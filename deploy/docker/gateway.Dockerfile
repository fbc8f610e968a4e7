# The gateway (STACK=clearml front end): gunicorn + uvicorn workers that tokenize and call Triton over gRPC.
# Installs only the `serve` role (no load generator, plotting, export toolchain, registry or local Triton wheel).
# Build from the repository root after `make model`:  docker build -f deploy/docker/gateway.Dockerfile -t ...:gateway .
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services services
COPY observability observability
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir ".[serve]"

FROM python:3.11.11-slim-bookworm
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin serving
COPY --from=build /opt/venv /opt/venv
# The built-in model (manifest, tokenizer, ONNX file): the gateway reads the manifest and the tokenizer.
COPY build/model /models/model
ENV PATH=/opt/venv/bin:$PATH \
    SERVING_MODEL_DIR=/models/model \
    GATEWAY_TRITON_GRPC_URL=triton:8001 \
    SERVING_WORKERS=2 \
    SERVING_OBSERVABILITY__LOG_JSON=true \
    PROMETHEUS_MULTIPROC_DIR=/dev/shm/prometheus
USER 10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health/live', timeout=2).status != 200)"]
# The workers memory-map their metrics files: in memory (/dev/shm), a full /tmp cannot kill them with SIGBUS.
CMD ["sh", "-c", "rm -rf \"$PROMETHEUS_MULTIPROC_DIR\" && mkdir -p \"$PROMETHEUS_MULTIPROC_DIR\" && exec gunicorn -c python:services.api.gunicorn_conf --bind 0.0.0.0:8080 --workers $SERVING_WORKERS 'services.gateway.app:create_app()'"]
