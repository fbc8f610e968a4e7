"""Export a Hugging Face checkpoint to ONNX + tokenizer + manifest (the tensor contract). Needs the `export` extra."""
