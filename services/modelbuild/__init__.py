"""Export a Hugging Face checkpoint to ONNX + tokenizer + manifest (the tensor contract), checked against PyTorch
(`export.build`), and write a tiny random checkpoint for tests (`tiny`). The export needs the `export` extra (torch,
transformers, onnx); reading a checkpoint's configs (`checkpoint`), the fingerprint and the manifest (`fingerprint`,
`manifest`) do not, except `fingerprint.toolchain()`, which reads those libraries' versions."""
