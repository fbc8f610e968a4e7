import json

import numpy as np
import pytest

from services.common.contract import MANIFEST_FILE, MODEL_FILE, REFERENCE_FILE, TOKENIZER_FILE, Manifest, Reference
from services.common.errors import ModelBuildError
from services.common.onnx_runner import OnnxModel
from services.common.outputs import classify
from services.common.tokenization import TextTokenizer
from services.modelbuild import export, validation
from services.modelbuild.checkpoint import inspect_checkpoint


def test_inspect_reads_task_pooling_and_lengths_from_configs(tiny_model, tiny_classifier):
    embedding = inspect_checkpoint(tiny_model.parent / "checkpoint")
    assert (embedding.task, embedding.pooling, embedding.normalize, embedding.max_seq_length) == (
        "embedding",
        "mean",
        True,
        64,
    )
    classifier = inspect_checkpoint(tiny_classifier.parent / "checkpoint")
    assert classifier.task == "classification"
    assert classifier.labels == ["negative", "positive"]


def test_sentence_bert_max_length_wins_over_the_tokenizer_file(tmp_path, tiny_model):
    checkpoint = tiny_model.parent / "checkpoint"
    copy = tmp_path / "ck"
    copy.mkdir()
    for path in checkpoint.rglob("*"):
        if path.is_file():
            target = copy / path.relative_to(checkpoint)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (copy / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32}))
    assert inspect_checkpoint(copy).max_seq_length == 32


def test_exported_embeddings_are_unit_norm_and_padding_invariant(tiny_model):
    manifest = Manifest.load(tiny_model)
    model = OnnxModel(tiny_model, manifest)
    tokenizer = TextTokenizer(tiny_model / TOKENIZER_FILE, manifest.max_seq_length)
    texts = ["hello", "the quick brown fox jumps over the lazy dog"]
    batched = model.run(tokenizer.encode(texts).tensors(manifest.input_names))
    assert batched.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    alone = model.run(tokenizer.encode(texts[:1]).tensors(manifest.input_names))
    np.testing.assert_allclose(alone[0], batched[0], atol=1e-5)
    bucketed = TextTokenizer(tiny_model / TOKENIZER_FILE, manifest.max_seq_length, buckets=[64])
    padded = model.run(bucketed.encode(texts).tensors(manifest.input_names))
    np.testing.assert_allclose(padded, batched, atol=1e-5)


def test_classifier_export_gives_labelled_scores(tiny_classifier):
    manifest = Manifest.load(tiny_classifier)
    assert manifest.output.name == "logits" and manifest.labels == ["negative", "positive"]
    model = OnnxModel(tiny_classifier, manifest)
    tokenizer = TextTokenizer(tiny_classifier / TOKENIZER_FILE, manifest.max_seq_length)
    results = classify(manifest, model.run(tokenizer.encode(["good", "bad"]).tensors(manifest.input_names)))
    assert [set(r["scores"]) for r in results] == [{"negative", "positive"}] * 2
    assert all(abs(sum(r["scores"].values()) - 1) < 1e-6 for r in results)
    assert all(r["label"] == max(r["scores"], key=r["scores"].get) for r in results)


def test_build_is_skipped_when_up_to_date_and_redone_when_forced(tiny_model):
    checkpoint = tiny_model.parent / "checkpoint"
    before = (tiny_model / MANIFEST_FILE).stat().st_mtime_ns
    again = export.build(tiny_model, checkpoint, name="tiny-bert")
    assert (tiny_model / MANIFEST_FILE).stat().st_mtime_ns == before
    forced = export.build(tiny_model, checkpoint, name="tiny-bert", force=True)
    assert forced.files == again.files  # deterministic export
    assert (tiny_model / MANIFEST_FILE).stat().st_mtime_ns != before


def test_build_fails_loudly_when_onnx_disagrees_with_pytorch(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(validation, "TOLERANCE", -1.0)  # any difference, even 0, is now too large
    with pytest.raises(ModelBuildError, match="does not match PyTorch"):
        export.build(tmp_path / "out", tiny_model.parent / "checkpoint")
    assert not (tmp_path / "out").exists(), "a failed export leaves no half-written model behind"


def test_manifest_describes_the_exported_model(tiny_model):
    manifest = Manifest.load(tiny_model)
    assert manifest.task == "embedding"
    assert manifest.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(spec.dtype == "INT64" and spec.shape == [-1, -1] for spec in manifest.inputs)
    assert manifest.output.name == "embedding" and manifest.output.shape == [-1, 32]
    assert set(manifest.files) == {MODEL_FILE, TOKENIZER_FILE, REFERENCE_FILE}
    assert manifest.source.files, "the checkpoint's files are recorded for lineage"
    manifest.verify_files(tiny_model)


def test_reference_records_what_pytorch_answered(tiny_model):
    """The recorded outputs are PyTorch's, computed here again from the checkpoint without the exporter's code."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    reference = Reference.load(tiny_model)
    assert reference.texts == export.VALIDATION_TEXTS
    checkpoint = tiny_model.parent / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    encoded = tokenizer(reference.texts[:3], padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1).numpy()
    np.testing.assert_allclose(np.array(reference.outputs[:3]), expected, atol=1e-5)


def test_the_saved_tokenizer_leaves_padding_and_truncation_to_the_servers(tiny_model):
    """Servers pad and truncate from the manifest (`max_seq_length`, their buckets), not from tokenizer.json."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model / TOKENIZER_FILE))
    assert tokenizer.padding is None and tokenizer.truncation is None
    assert Manifest.load(tiny_model).max_seq_length == 64, "the checkpoint's limit, read from its configs"
