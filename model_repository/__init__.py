"""Triton model repository, as source: config templates and thin Python-backend model.py files.

`serving model-repo` (or `make model-repo`) fills the templates from the model manifest (the tensor contract) and
writes a runnable repository under build/model_repository/.
"""
