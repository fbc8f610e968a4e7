"""The minimal Triton ensemble the benchmark races against (`stack = "minimal"` in a matrix file): two plain
Python-backend models (a tokenizer that calls `encode_batch` and pads to the longest text of the batch; an encoder
over ONNX Runtime with 2 intra-op threads), each `max_batch_size: 64` with `dynamic_batching
{ max_queue_delay_microseconds: 2000 }` and no preferred sizes, one instance each, joined by an ensemble. No
project code runs inside it: it is the yardstick that says whether the project's own ensemble is a strong one.
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
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "token_type_ids" data_type: TYPE_INT64 dims: [ -1 ] }
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


def render(model_dir: Path, dest: Path) -> Path:
    """The minimal repository for an exported model directory (model.onnx + tokenizer.json), at `dest`."""
    if dest.exists():
        shutil.rmtree(dest)
    for name, config, source in (
        ("tokenizer", TOKENIZER, "tokenizer_model.py"),
        ("encoder", ENCODER, "encoder_model.py"),
        ("ensemble", ENSEMBLE, None),
    ):
        version = dest / name / "1"
        version.mkdir(parents=True)
        (dest / name / "config.pbtxt").write_text(config)
        if source:
            shutil.copy(HERE / source, version / "model.py")
    shutil.copy(model_dir / "tokenizer.json", dest / "tokenizer" / "1" / "tokenizer.json")
    shutil.copy(model_dir / "model.onnx", dest / "encoder" / "1" / "model.onnx")
    return dest
