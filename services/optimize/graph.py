"""The graph steps of a variant, all ONNX Runtime's own tools: its transformer optimizer (BERT fusions: GELU with its
bias, skip + layer normalisation), then dynamic int8 quantization or, with a GPU, fp16 conversion.

int8 quantizes weights per output channel, MatMul only. The MatMuls a GELU feeds (each layer's feed-forward
down-projection, whose input has the widest range) are where quantization costs the most quality: `after_gelu` lists
them in graph order, and the variant's build keeps the fewest of them in fp32, first ones first, that its quality gate
needs (the measurements: docs/decisions/int8-variant.md).

"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from services.common.devices import cuda_missing, gpu_present
from services.common.errors import ConfigurationError

log = logging.getLogger(__name__)
VARIANTS = ("int8", "fp16")
"""int8: dynamic int8 quantization for the CPU; fp16: half precision for a GPU (ONNX Runtime's CUDA provider)."""
GELU_OPS = {"Gelu", "BiasGelu", "FastGelu"}


@dataclass(frozen=True)
class Recipe:
    """What a variant is made with; recorded in its manifest."""

    variant: str
    op_types: tuple[str, ...] = ("MatMul",)
    per_channel: bool = True

    def describe(self, kept_fp32: list[str]) -> dict[str, str]:
        """The recipe and the nodes left in fp32, as the manifest and the registry record them."""
        if self.variant != "int8":
            return {"variant": self.variant}
        return {
            "variant": self.variant,
            "op_types": ",".join(self.op_types),
            "per_channel": str(self.per_channel).lower(),
            "kept_fp32": str(len(kept_fp32)),
            "kept_fp32_nodes": ",".join(kept_fp32)[:500],
        }


def gpu_missing() -> str | None:
    """Why a GPU variant cannot be built or measured here (None when ONNX Runtime has its CUDA provider)."""
    import onnxruntime as ort

    if (missing := cuda_missing(ort.get_available_providers(), gpu_present())) is None:
        return None
    return f"the fp16 variant is built and measured on a GPU, which needs {missing}; build --variant int8 for the CPU"


def check_variant(variant: str) -> None:
    """ConfigurationError unless `variant` is known and can be built on this machine."""
    if variant not in VARIANTS:
        raise ConfigurationError(f"--variant must be one of {', '.join(VARIANTS)}, not '{variant}'")
    if variant == "fp16" and (missing := gpu_missing()):
        raise ConfigurationError(missing)


def optimize_graph(source: Path, out: Path, *, gpu: bool = False, fp16: bool = False) -> dict[str, int]:
    """ONNX Runtime's BERT optimizer on `source` (heads and width detected from the graph), written to `out`;
    `fp16`: weights and compute in half precision, inputs and outputs kept as they are. Returns the fused operators
    it counted."""
    from onnxruntime.transformers import optimizer

    model = optimizer.optimize_model(str(source), model_type="bert", num_heads=0, hidden_size=0, use_gpu=gpu)
    if fp16:
        model.convert_float_to_float16(keep_io_types=True)
    model.save_model_to_file(str(out))
    return {name: count for name, count in model.get_fused_operator_statistics().items() if count}


def after_gelu(model_path: Path) -> list[str]:
    """Names of the MatMul nodes whose input a GELU computes (the feed-forward down-projections)."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    gelu_outputs = {name for node in graph.node if node.op_type in GELU_OPS for name in node.output}
    return [node.name for node in graph.node if node.op_type == "MatMul" and node.input[0] in gelu_outputs]


def quantize_int8(source: Path, out: Path, recipe: Recipe, keep: list[str]) -> None:
    """Dynamic int8 quantization of `source` into `out` as `recipe` says, the nodes in `keep` left in fp32."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs every tensor, and advises a pre-processing step it does not need
    try:
        quantize_dynamic(
            source,
            out,
            weight_type=QuantType.QInt8,
            per_channel=recipe.per_channel,
            op_types_to_quantize=list(recipe.op_types),
            nodes_to_exclude=keep,
            # The optimizer's fused operators (com.microsoft) have no ONNX shape inference: their outputs are fp32.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        root.setLevel(level)
