"""Render the Triton model repository from its source (`model_repository/`) and the model manifest.

Two renderings from one source:
- `local`: for the tritonserver inside the nvidia-pytriton wheel (Python backend only); the encoder is a
  Python-backend model over ONNX Runtime, with ragged batching (requests of any length batch together).
- `container`: for the NGC tritonserver image; the encoder uses the native `onnxruntime_onnx` platform (GPU instance
  group when asked), so requests batch only at equal shapes: the tokenizer pads to length buckets.
Every configuration is a `ModelConfig` message (`services.triton.model_config`), checked against the manifest
(`check_repository`) before it is written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import DataType as ModelDataType
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput, ModelOutput

from services.common.contract import MANIFEST_FILE, MODEL_FILE, TOKENIZER_FILE, Manifest, TensorSpec
from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US, DEVICES
from services.common.errors import ConfigurationError
from services.common.onnx_runner import default_threads
from services.common.tokenization import default_buckets
from services.triton import model_config

SOURCE = Path(__file__).resolve().parents[2] / "model_repository"
MODELS = ("tokenizer", "encoder", "ensemble")


@dataclass(frozen=True)
class RenderOptions:
    target: str = "local"
    """local (nvidia-pytriton's tritonserver, Python backend) or container (NGC image, native onnxruntime)."""
    batching: bool = True
    """Dynamic batching on the tokenizer and the encoder."""
    padding: str = "ragged"
    """ragged: the encoder batches any lengths (local only); bucket: the tokenizer pads to length buckets."""
    max_batch_size: int = 64
    max_queue_delay_us: int = 2000
    """How long the batcher may hold a request waiting for others."""
    preferred_batch_sizes: tuple[int, ...] = ()
    """Sizes the batcher aims for. Empty by default: the batcher sends what is queued whenever the instance is free
    rather than hold requests for a preferred size (docs/decisions/triton-defaults.md)."""
    max_queue_size: int = 0
    """Requests queued per model beyond which Triton rejects with UNAVAILABLE (503); 0: no queue policy. Off by
    default (a queue policy makes the batcher hold whole batches: docs/decisions/triton-defaults.md); the fronted
    stacks bound what they send instead (the in-flight bound per worker, coalescing)."""
    tokenizer_instances: int = 1
    encoder_instances: int = 1
    intra_op_threads: int = 0
    """ONNX Runtime threads in the local encoder; 0 = all cores."""
    spin: bool = False
    """ONNX Runtime's threads in the local encoder busy-wait between runs instead of sleeping: lower latency at low
    load, less throughput where the cores are shared with the gateway (docs/decisions/triton-defaults.md). Off by
    default; on for latency at low load when the cores are the encoder's own."""
    gpu: bool = False
    """container target: run the encoder on the GPU (KIND_GPU)."""
    device: str = "cpu"
    """local target: the encoder runs the model on ONNX Runtime (cpu), on its CUDA provider (cuda: the Python
    backend's encoder refuses to start where there is none), or on the simulated accelerator (sim,
    `services.common.sim_device`), whose settings below reach it as config parameters."""
    sim_fixed_us: float = DEFAULT_FIXED_US
    sim_per_token_us: float = DEFAULT_PER_TOKEN_US
    sim_lock_file: str = ""
    """The simulated device's lock file, shared by the encoder's instances (one device); empty: one per instance."""

    def __post_init__(self):
        if self.target not in ("local", "container"):
            raise ConfigurationError(f"TARGET must be local or container, not '{self.target}'")
        if self.padding not in ("ragged", "bucket"):
            raise ConfigurationError(f"padding must be ragged or bucket, not '{self.padding}'")
        if self.device not in DEVICES or (self.device != "cpu" and self.target != "local"):
            raise ConfigurationError(
                f"DEVICE must be one of {', '.join(DEVICES)} (cuda and sim: local target only; the container's GPU "
                "is --gpu)"
            )
        if self.target == "container" and self.padding == "ragged":
            object.__setattr__(self, "padding", "bucket")  # native onnxruntime batches equal shapes only

    @property
    def ragged(self) -> bool:
        return self.padding == "ragged"


def render_configs(
    manifest: Manifest, options: RenderOptions, *, encoder_name: str = "encoder"
) -> dict[str, ModelConfig]:
    """The configuration of each model, built from the checked manifest and `options` alone."""
    buckets = default_buckets(manifest.max_seq_length) if options.padding == "bucket" else []
    native = options.target == "container"
    parameters = {}
    if not native:
        threads = options.intra_op_threads or default_threads()
        parameters = {"intra_op_threads": str(threads), "spin": "true" if options.spin else "false"}
        if options.device == "cuda":
            parameters["device"] = "cuda"
        if options.device == "sim":
            parameters |= {
                "device": "sim",
                "sim_fixed_us": repr(float(options.sim_fixed_us)),
                "sim_per_token_us": repr(float(options.sim_per_token_us)),
                "sim_lock_file": options.sim_lock_file,
            }
    configs = {
        "tokenizer": model_config.tokenizer(
            max_batch_size=options.max_batch_size,
            outputs=manifest.inputs,
            instances=options.tokenizer_instances,
            max_length=manifest.max_seq_length,
            buckets=buckets,
        ),
        "encoder": model_config.encoder(
            name=encoder_name,
            native=native,
            max_batch_size=options.max_batch_size,
            inputs=manifest.inputs,
            outputs=manifest.outputs,
            ragged=options.ragged and options.batching,
            instances=options.encoder_instances,
            gpu=native and options.gpu,
            parameters=parameters,
        ),
        "ensemble": model_config.ensemble(
            max_batch_size=options.max_batch_size, outputs=manifest.outputs, token_names=manifest.input_names
        ),
    }
    preferred = [size for size in options.preferred_batch_sizes if size <= options.max_batch_size]
    for name in ("tokenizer", "encoder") if options.batching else ():
        model_config.set_dynamic_batching(
            configs[name],
            max_queue_delay_us=options.max_queue_delay_us,
            preferred=preferred,
            max_queue_size=options.max_queue_size,
        )
    return configs


def check_repository(configs: dict[str, ModelConfig], manifest: Manifest) -> None:
    """Raise ConfigurationError where a config disagrees with the tensor contract or with another config."""

    def same(config_tensors: Iterable[ModelInput] | Iterable[ModelOutput], specs: list[TensorSpec], where: str) -> None:
        got = [(t.name, ModelDataType.Name(t.data_type), list(t.dims)) for t in config_tensors]
        want = [(s.name, ModelDataType.Name(model_config.data_type(s)), s.dims) for s in specs]
        if got != want:
            raise ConfigurationError(f"{where} are {got}, the manifest says {want}")

    tokenizer, encoder, ensemble = configs["tokenizer"], configs["encoder"], configs["ensemble"]
    same(encoder.input, manifest.inputs, "encoder inputs")
    same(encoder.output, manifest.outputs, "encoder outputs")
    same(tokenizer.output, manifest.inputs, "tokenizer outputs")
    same(ensemble.output, manifest.outputs, "ensemble outputs")
    if ensemble.max_batch_size > min(tokenizer.max_batch_size, encoder.max_batch_size):
        raise ConfigurationError("the ensemble's max_batch_size exceeds a composing model's")
    steps = {step.model_name: step for step in ensemble.ensemble_scheduling.step}
    if set(steps) != {"tokenizer", "encoder"}:
        raise ConfigurationError(f"ensemble steps are {sorted(steps)}, expected tokenizer and encoder")
    produced = set(steps["tokenizer"].output_map.values())
    consumed = set(steps["encoder"].input_map.values())
    if consumed - produced or set(steps["encoder"].input_map) != set(manifest.input_names):
        raise ConfigurationError("the ensemble feeds the encoder tensors the tokenizer does not produce")
    if dict(steps["encoder"].output_map) != {manifest.output.name: manifest.output.name}:
        raise ConfigurationError("the ensemble does not return the encoder's contract output")


def _place(src: Path, dst: Path, link: bool) -> None:
    dst.unlink(missing_ok=True)
    if link:
        os.symlink(src.resolve(), dst)
    else:
        shutil.copy2(src, dst)


def repository_dir(target: str, *, gpu: bool = False, batching: bool = True) -> Path:
    """Where `serving model-repo` (`make model-repo`) writes a rendering, and so where the Triton image build reads
    it: build/model_repository/container-gpu for the GPU image, .../container for the CPU one, .../local."""
    name = target + ("-gpu" if gpu else "") + ("" if batching else "-batching-off")
    return Path("build/model_repository") / name


def render(model_dir: Path, out_dir: Path, options: RenderOptions) -> Path:
    """Write a runnable model repository to `out_dir` (replacing it)."""
    manifest = Manifest.load(model_dir)
    configs = render_configs(manifest, options)
    check_repository(configs, manifest)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    link = options.target == "local"  # a container build must carry real files
    for name in MODELS:
        version = out_dir / name / "1"
        version.mkdir(parents=True)
        (out_dir / name / "config.pbtxt").write_text(model_config.to_text(configs[name]))
        source_py = SOURCE / name / "model.py"
        if source_py.exists() and not (name == "encoder" and options.target == "container"):
            shutil.copy2(source_py, version / "model.py")
    _place(model_dir / TOKENIZER_FILE, out_dir / "tokenizer" / "1" / TOKENIZER_FILE, link)
    _place(model_dir / MODEL_FILE, out_dir / "encoder" / "1" / MODEL_FILE, link)
    _place(model_dir / MANIFEST_FILE, out_dir / "encoder" / "1" / MANIFEST_FILE, link)
    return out_dir
