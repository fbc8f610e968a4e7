"""Every rendering of the model repository parses as a Triton ModelConfig and matches the tensor contract."""

import pytest
from tritonclient.grpc import model_config_pb2

from services.common.contract import Manifest
from services.common.errors import ConfigurationError
from services.triton.model_config import parse
from services.triton.repository import RenderOptions, check_repository, render, render_configs
from tests.support.models import unit_model_dir


@pytest.fixture(scope="module")
def embedding_dir(tmp_path_factory):
    """A model directory with a hand-written manifest: rendering needs the contract, not a runnable model."""
    return unit_model_dir(tmp_path_factory.mktemp("embedding"), "embedding")


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    return unit_model_dir(tmp_path_factory.mktemp("classifier"), "classification")


@pytest.mark.parametrize("target", ["local", "container"])
@pytest.mark.parametrize("batching", [True, False])
@pytest.mark.parametrize("fixture", ["embedding_dir", "classifier_dir"])
def test_renderings_match_the_contract(request, tmp_path, target, batching, fixture):
    model_dir = request.getfixturevalue(fixture)
    manifest = Manifest.load(model_dir)
    repository = render(model_dir, tmp_path / "repo", RenderOptions(target=target, batching=batching))
    configs = {name: parse(path.read_text()) for name, path in _written(repository).items()}
    check_repository(configs, manifest)
    encoder = configs["encoder"]
    assert [i.name for i in encoder.input] == manifest.input_names
    assert encoder.output[0].name == manifest.output.name
    for name in ("tokenizer", "encoder"):
        assert configs[name].HasField("dynamic_batching") == batching
        if batching:  # no queue policy by default: it costs a ~500 ms tail (RenderOptions.max_queue_size)
            assert not configs[name].dynamic_batching.HasField("default_queue_policy")
            bounded = render_configs(manifest, RenderOptions(target=target, max_queue_size=8))[name]
            assert bounded.dynamic_batching.default_queue_policy.max_queue_size == 8
            assert (
                bounded.dynamic_batching.default_queue_policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
            )
    if target == "local":
        assert encoder.backend == "python"
        assert all(i.allow_ragged_batch == batching for i in encoder.input)
        assert encoder.parameters["spin"].string_value == "false", "ONNX Runtime's threads sleep between runs"
        spinning = render_configs(manifest, RenderOptions(target=target, spin=True))["encoder"]
        assert spinning.parameters["spin"].string_value == "true"
    else:
        assert encoder.platform == "onnxruntime_onnx"
        assert not any(i.allow_ragged_batch for i in encoder.input)
        buckets = {p: v.string_value for p, v in configs["tokenizer"].parameters.items()}["buckets"]
        assert buckets.split(",")[-1] == str(manifest.max_seq_length)


def _written(repository):
    """Each model's config.pbtxt as `render` wrote it: what Triton reads is parsed back."""
    return {name: repository / name / "config.pbtxt" for name in ("tokenizer", "encoder", "ensemble")}


def test_container_gpu_rendering_uses_a_gpu_instance_group(embedding_dir):
    manifest = Manifest.load(embedding_dir)
    configs = render_configs(manifest, RenderOptions(target="container", gpu=True))
    assert configs["encoder"].instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU


def test_device_cuda_asks_the_python_backend_encoder_for_cuda_and_reads_back_as_gpu(embedding_dir):
    from services.triton.grpc_client import config_device

    manifest = Manifest.load(embedding_dir)
    encoder = render_configs(manifest, RenderOptions(target="local", device="cuda"))["encoder"]
    assert encoder.parameters["device"].string_value == "cuda"
    assert config_device(encoder) == "gpu"
    assert config_device(render_configs(manifest, RenderOptions(target="local"))["encoder"]) == "cpu"
    with pytest.raises(ConfigurationError, match="cuda and sim: local target only"):
        RenderOptions(target="container", device="cuda")


def test_check_catches_a_config_that_drifted_from_the_contract(embedding_dir):
    manifest = Manifest.load(embedding_dir)
    configs = render_configs(manifest, RenderOptions())
    configs["encoder"].input[0].data_type = model_config_pb2.TYPE_INT32
    with pytest.raises(ConfigurationError, match="encoder inputs"):
        check_repository(configs, manifest)
    configs = render_configs(manifest, RenderOptions())
    del configs["ensemble"].ensemble_scheduling.step[1].input_map["attention_mask"]
    with pytest.raises(ConfigurationError, match="does not produce|feeds"):
        check_repository(configs, manifest)


def test_render_writes_a_runnable_layout(embedding_dir, tmp_path):
    out = render(embedding_dir, tmp_path / "repo", RenderOptions(target="container"))
    assert (out / "encoder" / "1" / "model.onnx").is_file() and not (out / "encoder" / "1" / "model.onnx").is_symlink()
    assert not (out / "encoder" / "1" / "model.py").exists(), "the native backend needs no model.py"
    assert (out / "tokenizer" / "1" / "model.py").is_file()
    assert (out / "ensemble" / "1").is_dir()
    local = render(embedding_dir, tmp_path / "local", RenderOptions(target="local"))
    assert (local / "encoder" / "1" / "model.py").is_file()


def test_bad_options_are_refused():
    with pytest.raises(ConfigurationError, match="TARGET"):
        RenderOptions(target="cloud")


def test_explain_log_turns_triton_load_failures_into_one_message():
    from services.triton.server import explain_log

    log = (
        'I1129 17:35:00.1 1 model_lifecycle.cc:472] "loading: encoder:1"\n'
        "E1129 17:35:01.2 1 model_lifecycle.cc:654] \"failed to load 'encoder' version 1: Internal: "
        'onnxruntime could not load model.onnx"\n'
    )
    assert explain_log(log) == "model 'encoder' failed to load: Internal: onnxruntime could not load model.onnx"
    assert explain_log("I ... all good") is None
