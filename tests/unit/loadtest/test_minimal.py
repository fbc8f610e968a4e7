"""The plain ensemble of `loadtest/minimal`, the yardstick's other half: its encoder batches requests of unequal
length, and the tuning knobs land in the configs Triton reads (parsed back as Triton's own protobuf)."""

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from loadtest.minimal import render
from loadtest.tune import SPACES


def config(repository, model) -> model_config_pb2.ModelConfig:
    text = (repository / model / "config.pbtxt").read_text()
    return text_format.Parse(text, model_config_pb2.ModelConfig())


@pytest.fixture
def model_dir(tmp_path):
    """The two files render copies (their content does not matter to the configs)."""
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "tokenizer.json").write_text("{}")
    (directory / "model.onnx").write_bytes(b"onnx")
    return directory


def test_the_encoder_batches_requests_of_any_length(model_dir, tmp_path):
    repository = render(model_dir, tmp_path / "repo")
    encoder = config(repository, "encoder")
    assert [i.allow_ragged_batch for i in encoder.input] == [True, True, True]
    assert encoder.dynamic_batching.max_queue_delay_microseconds == 2000
    assert (repository / "encoder" / "1" / "model.py").read_text().startswith('"""The minimal ensemble')


def test_the_tuning_knobs_reach_both_models(model_dir, tmp_path):
    tuning = {"max_queue_delay_us": 500, "preferred_batch_sizes": (8, 16), "tokenizer_instances": 2}
    repository = render(model_dir, tmp_path / "repo", tuning=tuning | {"encoder_instances": 3})
    tokenizer, encoder = config(repository, "tokenizer"), config(repository, "encoder")
    for model in (tokenizer, encoder):
        assert model.dynamic_batching.max_queue_delay_microseconds == 500
        assert list(model.dynamic_batching.preferred_batch_size) == [8, 16]
    assert (tokenizer.instance_group[0].count, encoder.instance_group[0].count) == (2, 3)
    assert all(i.allow_ragged_batch for i in encoder.input), "tuning keeps ragged batching"


def test_tune_searches_only_knobs_the_minimal_ensemble_has(model_dir, tmp_path):
    for knob, values in SPACES["minimal"].items():
        render(model_dir, tmp_path / "repo", tuning={knob: values[-1]})
    with pytest.raises(ValueError, match="no knob 'coalesce_depth'"):
        render(model_dir, tmp_path / "repo", tuning={"coalesce_depth": 2})
