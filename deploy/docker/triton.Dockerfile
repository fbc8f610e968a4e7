# Triton with the native onnxruntime/TensorRT backends (NGC image, same Triton release as the nvidia-pytriton wheel
# used locally) plus this project for the ensemble's Python-backend tokenizer.
FROM nvcr.io/nvidia/tritonserver:24.10-py3
WORKDIR /opt/transformer-serving
COPY pyproject.toml README.md ./
COPY services services
COPY observability observability
COPY loadtest loadtest
COPY model_repository model_repository
RUN pip install --no-cache-dir "numpy<2" .
COPY build/model_repository/container /models
EXPOSE 8000 8001 8002
CMD ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit", "--load-model=encoder", \
     "--strict-readiness=true", "--allow-metrics=true"]
