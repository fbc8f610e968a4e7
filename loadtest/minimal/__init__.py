"""The plain Triton ensemble the benchmark races against (`stack = "minimal"` in a matrix file): two plain
Python-backend models (a tokenizer that calls `encode_batch` and pads to the longest text of the batch; an encoder
over ONNX Runtime with 2 intra-op threads, not spinning, that pads the requests of a batch to the longest and runs
them as one call), each `max_batch_size: 64` with `dynamic_batching { max_queue_delay_microseconds: 2000 }` and no
preferred sizes, one instance each, joined by an ensemble. The encoder's inputs allow ragged batches
(`allow_ragged_batch`): requests of unequal length batch together, as in the project's ensemble (without it Triton
batches only requests of one length: docs/decisions/bound-ranking.md).

No project code runs inside it: with the project's ensemble it is the yardstick (the faster of the two) that says
whether a stack is fast. `loadtest tune minimal` tunes it with the knobs the project's ensemble is tuned with
(`TUNING_KNOBS`). With the simulated device's parameters its encoder waits on the project's simulated accelerator
instead (`sim_encoder_model.py`), the device every stack of a `DEVICE=sim` benchmark runs its model on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).parent

TOKENIZER = """name: "tokenizer"
backend: "python"
max_batch_size: 64
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "token_type_ids" data_type: TYPE_INT64 dims: [ -1 ] }
]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ENCODER = """name: "encoder"
backend: "python"
max_batch_size: 64
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true },
  { name: "token_type_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true }
]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ENSEMBLE = """name: "ensemble"
platform: "ensemble"
max_batch_size: 64
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "tokenizer"
      model_version: -1
      input_map { key: "TEXT" value: "TEXT" }
      output_map { key: "input_ids" value: "ids" }
      output_map { key: "attention_mask" value: "mask" }
      output_map { key: "token_type_ids" value: "types" }
    },
    {
      model_name: "encoder"
      model_version: -1
      input_map { key: "input_ids" value: "ids" }
      input_map { key: "attention_mask" value: "mask" }
      input_map { key: "token_type_ids" value: "types" }
      output_map { key: "OUTPUT" value: "OUTPUT" }
    }
  ]
}
"""


TUNING_KNOBS = ("max_queue_delay_us", "preferred_batch_sizes", "tokenizer_instances", "encoder_instances")
"""The settings `loadtest tune minimal` searches, as the project's ensemble's (`services.stacks.Tuning`)."""


def render(model_dir: Path, dest: Path, sim: dict[str, str] | None = None, tuning: dict | None = None) -> Path:
    """The minimal repository for an exported model directory (model.onnx + tokenizer.json), at `dest`; with `sim`
    (the simulated device's config parameters: `sim_fixed_us`, `sim_per_token_us`, `sim_lock_file`), its encoder on
    that device; with `tuning`, the `TUNING_KNOBS` given (ValueError naming any other)."""
    if dest.exists():
        shutil.rmtree(dest)
    encoder, encoder_source = ENCODER, "encoder_model.py"
    if sim is not None:
        encoder, encoder_source = sim_encoder_config(sim), "sim_encoder_model.py"
    tokenizer, encoder = tuned(TOKENIZER, "tokenizer", tuning or {}), tuned(encoder, "encoder", tuning or {})
    for name, config, source in (
        ("tokenizer", tokenizer, "tokenizer_model.py"),
        ("encoder", encoder, encoder_source),
        ("ensemble", ENSEMBLE, None),
    ):
        version = dest / name / "1"
        version.mkdir(parents=True)
        (dest / name / "config.pbtxt").write_text(config)
        if source:
            shutil.copy(HERE / source, version / "model.py")
    shutil.copy(model_dir / "tokenizer.json", dest / "tokenizer" / "1" / "tokenizer.json")
    shutil.copy(model_dir / "model.onnx", dest / "encoder" / "1" / "model.onnx")
    if sim is not None:
        shutil.copy(model_dir / "manifest.json", dest / "encoder" / "1" / "manifest.json")
    return dest


def tuned(text: str, model: str, tuning: dict) -> str:
    """A model's config text with the tuning applied (the queue delay and preferred batch sizes to both models' dynamic
    batchers, each instance count to its model), written by protobuf's text format."""
    if unknown := sorted(set(tuning) - set(TUNING_KNOBS)):
        raise ValueError(f"the minimal ensemble has no knob {unknown[0]!r}; known: {', '.join(TUNING_KNOBS)}")
    if not tuning:
        return text
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    if tuning.get("max_queue_delay_us") is not None:
        config.dynamic_batching.max_queue_delay_microseconds = int(tuning["max_queue_delay_us"])
    if tuning.get("preferred_batch_sizes"):
        del config.dynamic_batching.preferred_batch_size[:]
        config.dynamic_batching.preferred_batch_size.extend(int(size) for size in tuning["preferred_batch_sizes"])
    if tuning.get(f"{model}_instances") is not None:
        config.instance_group[0].count = int(tuning[f"{model}_instances"])
    return text_format.MessageToString(config)


def sim_encoder_config(parameters: dict[str, str]) -> str:
    """ENCODER with the simulated device's parameters, written by protobuf's text format (every value escaped)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(ENCODER, model_config_pb2.ModelConfig())
    for key, value in ({"device": "sim"} | parameters).items():
        config.parameters[key].string_value = value
    return text_format.MessageToString(config)
