"""Triton model configurations as data: each `config.pbtxt` is a `ModelConfig` protobuf message built here and
written with protobuf's `text_format`, so a name from a manifest is always a quoted, escaped string and never
configuration. Every file name, backend and platform is a constant of this project."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from services.common.contract import MODEL_FILE, TOKENIZER_FILE, TensorSpec

TEXT_INPUT = "TEXT"
"""The string input of the tokenizer and the ensemble."""


def data_type(spec: TensorSpec) -> int:
    """The Triton data type of a contract tensor (BYTES is TYPE_STRING in a model configuration)."""
    return pb.DataType.Value("TYPE_STRING" if spec.dtype == "BYTES" else f"TYPE_{spec.dtype}")


def add_inputs(config: pb.ModelConfig, specs: list[TensorSpec], *, ragged: bool = False) -> None:
    for spec in specs:
        config.input.add(name=spec.name, data_type=data_type(spec), dims=spec.dims, allow_ragged_batch=ragged)


def add_outputs(config: pb.ModelConfig, specs: list[TensorSpec]) -> None:
    for spec in specs:
        config.output.add(name=spec.name, data_type=data_type(spec), dims=spec.dims)


def set_dynamic_batching(
    config: pb.ModelConfig, *, max_queue_delay_us: int, preferred: list[int], max_queue_size: int
) -> None:
    batching = config.dynamic_batching
    batching.SetInParent()
    batching.preferred_batch_size.extend(preferred)
    batching.max_queue_delay_microseconds = max_queue_delay_us
    if max_queue_size > 0:
        batching.default_queue_policy.timeout_action = pb.ModelQueuePolicy.REJECT
        batching.default_queue_policy.max_queue_size = max_queue_size


def set_parameters(config: pb.ModelConfig, parameters: dict[str, str]) -> None:
    for key, value in parameters.items():
        config.parameters[key].string_value = value


def tokenizer(
    *, max_batch_size: int, outputs: list[TensorSpec], instances: int, max_length: int, buckets: list[int]
) -> pb.ModelConfig:
    """Python backend: TEXT -> token tensors."""
    config = pb.ModelConfig(name="tokenizer", backend="python", max_batch_size=max_batch_size)
    config.input.add(name=TEXT_INPUT, data_type=pb.TYPE_STRING, dims=[1])
    add_outputs(config, outputs)
    config.instance_group.add(count=instances, kind=pb.ModelInstanceGroup.KIND_CPU)
    set_parameters(
        config,
        {
            "tokenizer_file": TOKENIZER_FILE,
            "max_length": str(max_length),
            "buckets": ",".join(map(str, buckets)),
            "truncate": "true",
        },
    )
    return config


def encoder(
    *,
    name: str,
    native: bool,
    max_batch_size: int,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    ragged: bool,
    instances: int,
    gpu: bool,
    parameters: dict[str, str],
) -> pb.ModelConfig:
    """The exported transformer: Triton's native onnxruntime backend (`native`, the container image) or the
    Python-backend model over ONNX Runtime (the wheel's Triton)."""
    config = pb.ModelConfig(name=name, max_batch_size=max_batch_size)
    if native:
        config.platform = "onnxruntime_onnx"
        config.default_model_filename = MODEL_FILE
    else:
        config.backend = "python"
    add_inputs(config, inputs, ragged=ragged)
    add_outputs(config, outputs)
    kind = pb.ModelInstanceGroup.KIND_GPU if gpu else pb.ModelInstanceGroup.KIND_CPU
    config.instance_group.add(count=instances, kind=kind)
    set_parameters(config, parameters)
    return config


def ensemble(*, max_batch_size: int, outputs: list[TensorSpec], token_names: list[str]) -> pb.ModelConfig:
    """TEXT -> tokenizer -> encoder -> the contract's output, inside Triton."""
    config = pb.ModelConfig(name="ensemble", platform="ensemble", max_batch_size=max_batch_size)
    config.input.add(name=TEXT_INPUT, data_type=pb.TYPE_STRING, dims=[1])
    add_outputs(config, outputs)
    steps = config.ensemble_scheduling.step
    tokenize = steps.add(model_name="tokenizer", model_version=-1)
    tokenize.input_map[TEXT_INPUT] = TEXT_INPUT
    encode = steps.add(model_name="encoder", model_version=-1)
    for token in token_names:
        tokenize.output_map[token] = token
        encode.input_map[token] = token
    encode.output_map[outputs[0].name] = outputs[0].name
    return config


def to_text(config: pb.ModelConfig) -> str:
    """`config.pbtxt` text of `config`: every string quoted and escaped by protobuf."""
    return text_format.MessageToString(config)


def parse(text: str) -> pb.ModelConfig:
    return text_format.Parse(text, pb.ModelConfig())
