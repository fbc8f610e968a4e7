"""Pieces every service shares: settings, errors, schemas, the tensor contract, tokenization, ONNX Runtime."""
