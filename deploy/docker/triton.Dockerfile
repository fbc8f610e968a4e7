# Triton with the native onnxruntime/TensorRT backends (NGC image, the Triton release of the nvidia-pytriton wheel
# used locally) plus what the ensemble's Python-backend tokenizer imports: services/common and services/triton with
# the `triton-models` role (tokenizers, numpy, pydantic) and nothing else of the project.
# REPOSITORY is the rendering this image serves: the GPU one by default (`make model-repo TARGET=container GPU=1`);
# the CPU image is built from its own (`--build-arg REPOSITORY=build/model_repository/container`).
ARG REPOSITORY=build/model_repository/container-gpu

FROM nvcr.io/nvidia/tritonserver:24.10-py3 AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services/__init__.py services/__init__.py
COPY services/common services/common
COPY services/triton services/triton
# The image's Python is 3.10; the modules the tokenizer imports run on it (the project's own floor is 3.11 for the
# parts that never run inside Triton).
RUN python3 -m venv --system-site-packages /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --ignore-requires-python ".[triton-models]"

FROM nvcr.io/nvidia/tritonserver:24.10-py3
ARG REPOSITORY
COPY --from=build /opt/venv /opt/venv
COPY ${REPOSITORY} /models
ENV PATH=/opt/venv/bin:$PATH
# 1000: triton-server, the non-root user of the NGC image
USER 1000
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["curl", "-sf", "http://127.0.0.1:8000/v2/health/ready"]
CMD ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit", "--load-model=encoder", \
     "--strict-readiness=true", "--allow-metrics=true"]
