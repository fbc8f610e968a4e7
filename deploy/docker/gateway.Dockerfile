# The gateway (STACK=clearml front end): gunicorn + uvicorn workers that tokenize and call Triton over gRPC.
# Installs only the `serve` role: no load generator, plotting, export toolchain or local Triton wheel.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY services services
COPY observability observability
RUN pip install --no-cache-dir ".[serve]"
# The exported model (manifest, tokenizer, ONNX file): the gateway reads the manifest and tokenizer from it.
COPY build/model /models/model
ENV GATEWAY_MODEL_DIR=/models/model \
    GATEWAY_TRITON_GRPC_URL=triton:8001 \
    GATEWAY_WORKERS=2 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus
EXPOSE 8080
CMD ["sh", "-c", "mkdir -p $PROMETHEUS_MULTIPROC_DIR && exec gunicorn -c python:services.api.gunicorn_conf --bind 0.0.0.0:8080 --workers $GATEWAY_WORKERS 'services.gateway.app:create_app()'"]
