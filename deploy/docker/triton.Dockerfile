# Triton with the native onnxruntime/TensorRT backends (NGC image, same Triton release as the nvidia-pytriton wheel
# used locally) plus what the ensemble's Python-backend tokenizer imports: services.common and services.triton, with
# the `triton-models` role (tokenizers, numpy, pydantic) and nothing else of the project.
FROM nvcr.io/nvidia/tritonserver:24.10-py3
WORKDIR /opt/transformer-serving
COPY pyproject.toml README.md ./
COPY services/__init__.py services/__init__.py
COPY services/common services/common
COPY services/triton services/triton
RUN pip install --no-cache-dir ".[triton-models]"
COPY build/model_repository/container /models
EXPOSE 8000 8001 8002
CMD ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit", "--load-model=encoder", \
     "--strict-readiness=true", "--allow-metrics=true"]
