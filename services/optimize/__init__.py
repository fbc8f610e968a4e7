"""Cheaper variants of a built model (`serving model optimize`): ONNX Runtime's own graph optimizations and int8
quantization (fp16 on a GPU), each measured against its source on a shipped held-out set and gated on that quality."""
