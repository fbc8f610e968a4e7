"""What the export reads from a checkpoint's own configs: task, labels, pooling, normalisation, maximum length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.common.errors import ConfigurationError
from services.modelbuild.checkpoint import inspect_checkpoint


def write(path: Path, files: dict[str, object]) -> Path:
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(json.dumps(content))
    return path


BERT = {"architectures": ["BertModel"], "max_position_embeddings": 512}
SBERT_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]
NORMALIZE = {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}


def test_a_classifier_has_its_labels_in_id_order_and_no_pooling(tmp_path):
    config = {"architectures": ["BertForSequenceClassification"], "id2label": {"1": "positive", "0": "negative"}}
    checkpoint = inspect_checkpoint(write(tmp_path, {"config.json": config}))
    assert (checkpoint.task, checkpoint.labels, checkpoint.pooling, checkpoint.normalize) == (
        "classification",
        ["negative", "positive"],
        None,
        False,
    )


@pytest.mark.parametrize(
    ("pooling_config", "pooling"),
    [
        ({"pooling_mode_cls_token": True}, "cls"),
        ({"pooling_mode_max_tokens": True}, "max"),
        ({"pooling_mode_mean_tokens": True}, "mean"),
        ({}, "mean"),
    ],
)
def test_sentence_transformers_pooling_is_read_from_its_module_config(tmp_path, pooling_config, pooling):
    files = {"config.json": BERT, "modules.json": SBERT_MODULES, "1_Pooling/config.json": pooling_config}
    checkpoint = inspect_checkpoint(write(tmp_path, files))
    assert (checkpoint.task, checkpoint.pooling) == ("embedding", pooling)
    assert checkpoint.normalize is False, "no Normalize module: the checkpoint does not normalise"


def test_a_normalize_module_asks_for_unit_vectors(tmp_path):
    files = {"config.json": BERT, "modules.json": [*SBERT_MODULES, NORMALIZE], "1_Pooling/config.json": {}}
    assert inspect_checkpoint(write(tmp_path, files)).normalize is True


def test_a_bare_encoder_gets_mean_pooled_unit_vectors(tmp_path):
    checkpoint = inspect_checkpoint(write(tmp_path, {"config.json": BERT}))
    assert (checkpoint.pooling, checkpoint.normalize, checkpoint.name) == ("mean", True, tmp_path.name)


@pytest.mark.parametrize(
    ("files", "max_seq_length"),
    [
        ({}, 512),  # the position embeddings
        ({"tokenizer_config.json": {"model_max_length": 128}}, 128),  # the tokenizer's limit is lower
        ({"tokenizer_config.json": {"model_max_length": 10**30}}, 512),  # HF's "no limit" placeholder is ignored
        (
            {"tokenizer_config.json": {"model_max_length": 128}, "sentence_bert_config.json": {"max_seq_length": 256}},
            256,
        ),
    ],
)
def test_the_maximum_length_comes_from_the_configs(tmp_path, files, max_seq_length):
    checkpoint = inspect_checkpoint(write(tmp_path, {"config.json": BERT, **files}), name="named")
    assert (checkpoint.max_seq_length, checkpoint.name) == (max_seq_length, "named")


def test_a_directory_without_config_is_not_a_checkpoint(tmp_path):
    with pytest.raises(ConfigurationError, match="is not a Hugging Face checkpoint"):
        inspect_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({"config.json": ["BertModel"]}, "config.json holds a JSON list, not the dict expected"),
        ({"config.json": BERT, "modules.json": {"0": "Pooling"}}, "modules.json holds a JSON dict, not the list"),
        ({"config.json": BERT, "sentence_bert_config.json": 256}, "sentence_bert_config.json holds a JSON int"),
    ],
)
def test_a_config_of_the_wrong_shape_is_refused_naming_its_file(tmp_path, files, said):
    write(tmp_path, files)
    with pytest.raises(ConfigurationError, match=said):
        inspect_checkpoint(tmp_path)


def test_a_config_that_is_not_json_is_refused_naming_its_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="config.json is not JSON"):
        inspect_checkpoint(tmp_path)


def test_weight_files_are_every_file_but_hidden_ones(tmp_path):
    write(tmp_path, {"config.json": BERT, "1_Pooling/config.json": {}})
    (tmp_path / ".gitattributes").write_text("")
    checkpoint = inspect_checkpoint(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in checkpoint.weight_files()] == [
        "1_Pooling/config.json",
        "config.json",
    ]
