"""Triton Inference Server: the model repository renderer, the launcher of the binary from the nvidia-pytriton
wheel, and the logic behind the Python-backend models (importable and unit-tested without a server)."""
