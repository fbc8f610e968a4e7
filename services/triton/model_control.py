"""Registry versions as versions of a Triton model: placed into the repository Triton was started with
(`--model-control-mode=explicit`) and (re)loaded through Triton's model-control API. Reloading a model whose
configuration is unchanged loads the new version directories and unloads the removed ones while the others keep
serving (checked on the wheel's Triton 2.51: no request to a kept version failed).

Model and version names come from the deployment state: every path built from them is joined by `within`, so a name
that would leave the repository (`..`, a separator, a link out of it) is refused (`OutsideBase`) before anything is
written or deleted."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import numpy as np

from services.common.confined import OutsideBase, within
from services.common.contract import MANIFEST_FILE, MODEL_FILE, TOKENIZER_FILE, Manifest
from services.common.errors import ConfigurationError, Unavailable
from services.common.names import check_name
from services.common.tokenization import TextTokenizer
from services.triton import model_config
from services.triton.control_key import HEADER
from services.triton.repository import MODELS, SOURCE, RenderOptions, render_configs


def version_config(name: str, manifest: Manifest, options: RenderOptions) -> str:
    """The encoder's config for `manifest`, named after the endpoint (a checked name), serving every version
    directory present."""
    config = render_configs(manifest, options, encoder_name=check_name(name))["encoder"]
    config.version_policy.all.SetInParent()
    return model_config.to_text(config)


class TritonModels:
    def __init__(
        self,
        repository: Path,
        http_url: str,
        options: RenderOptions | None = None,
        timeout: float = 120,
        *,
        control_key: str | None,
    ):
        """`control_key`: the key Triton's model-repository API was restricted to (`services.triton.control_key`);
        None: no key (Triton refuses model control then)."""
        self.repository = Path(repository)
        self.url = http_url.rstrip("/")
        self.options = options or RenderOptions(target="local")
        self.timeout = timeout
        self.headers = {HEADER: control_key} if control_key else {}

    def _deployed(self, model: str) -> Path:
        """A deployed model's directory in the repository; the stack's own models (`MODELS`) are never placed,
        removed, loaded or unloaded by name from the state."""
        if model in MODELS:
            raise OutsideBase(f"'{model}' is one of the stack's own Triton models {list(MODELS)}, not a deployed one")
        return within(self.repository, model)

    def placed(self, model: str, version: str) -> bool:
        return within(self.repository, model, version).is_dir()

    def placed_versions(self) -> dict[str, list[str]]:
        """Every deployed model in the repository and its version directories (the built-in models left out)."""
        if not self.repository.is_dir():
            return {}
        return {
            root.name: sorted((p.name for p in root.iterdir() if p.name.isdigit()), key=int)
            for root in self.repository.iterdir()
            if root.is_dir() and root.name not in MODELS
        }

    def forget(self, model: str) -> None:
        """Remove a model's directory (its config included) from the repository: it has no version left."""
        shutil.rmtree(self._deployed(model), ignore_errors=True)

    def place(self, model: str, version: str, model_dir: Path) -> None:
        """`model_dir` (the caller's own fetched copy, `services.lifecycle.model_dirs`) as version `version` of
        `model`: linked (local) or copied (container) into the repository."""
        root = self._deployed(model)
        target = within(root, version)
        manifest = Manifest.load(model_dir)
        root.mkdir(parents=True, exist_ok=True)
        config = root / "config.pbtxt"
        if not config.is_file():
            config.write_text(version_config(model, manifest, self.options))
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        if self.options.target == "local":  # the Python-backend encoder, reading the files where they were fetched
            shutil.copyfile(SOURCE / "encoder" / "model.py", target / "model.py")  # the process's umask, not 0644
            for name in (MODEL_FILE, MANIFEST_FILE):
                (target / name).symlink_to((model_dir / name).resolve())
        else:  # Triton's native onnxruntime backend in its own container: real files in the shared repository
            shutil.copy2(model_dir / MODEL_FILE, target / MODEL_FILE)

    def remove(self, model: str, version: str) -> None:
        shutil.rmtree(within(self._deployed(model), version), ignore_errors=True)

    def load(self, model: str) -> None:
        """Load (or reload) `model` with the versions now in its directory; a model left with no version is
        unloaded instead."""
        root = self._deployed(model)
        has_versions = root.is_dir() and any(p.name.isdigit() for p in root.iterdir())
        action = "load" if has_versions else "unload"
        try:
            response = httpx.post(
                f"{self.url}/v2/repository/models/{model}/{action}", headers=self.headers, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            raise Unavailable(f"Triton at {self.url} did not answer the {action} of '{model}': {exc}") from None
        if response.status_code != 200:
            raise ConfigurationError(f"Triton refused to {action} '{model}': {response.text[:500]}")

    def ready(self, model: str, version: str) -> bool:
        try:
            return httpx.get(f"{self.url}/v2/models/{model}/versions/{version}/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def server_live(self) -> bool:
        """Triton answers its API (its readiness would also say no while one model is unloading or failed)."""
        try:
            return httpx.get(f"{self.url}/v2/health/live", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def ready_versions(self) -> dict[str, list[str]]:
        """Every model version Triton serves now (its repository index, one call), by model."""
        try:
            response = httpx.post(
                f"{self.url}/v2/repository/index", json={"ready": True}, headers=self.headers, timeout=10
            )
        except httpx.HTTPError as exc:
            raise Unavailable(f"Triton at {self.url} did not answer its repository index: {exc}") from None
        if response.status_code != 200:
            raise ConfigurationError(
                f"Triton at {self.url} refused its repository index ({response.status_code}: {response.text[:200]}): "
                "is this the control key it was started with?"
            )
        ready: dict[str, list[str]] = {}
        for entry in response.json():
            if entry.get("state") == "READY" and entry.get("version"):
                ready.setdefault(entry["name"], []).append(entry["version"])
        return {model: sorted(versions, key=int) for model, versions in ready.items()}

    def wait_ready(self, model: str, version: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready(model, version):
            if time.monotonic() > deadline:
                raise Unavailable(f"version {version} of '{model}' was not ready in Triton after {timeout:.0f}s")
            time.sleep(0.2)

    def infer(self, model: str, version: str, model_dir: Path, texts: list[str]) -> np.ndarray:
        """Run `texts` through the version with its own tokenizer, over Triton's HTTP API."""
        manifest = Manifest.load(model_dir)
        encoded = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length).encode(texts)
        inputs = [
            {"name": name, "datatype": "INT64", "shape": list(array.shape), "data": array.ravel().tolist()}
            for name, array in encoded.tensors(manifest.input_names).items()
        ]
        response = httpx.post(
            f"{self.url}/v2/models/{model}/versions/{version}/infer", json={"inputs": inputs}, timeout=self.timeout
        )
        if response.status_code != 200:
            raise ConfigurationError(f"version {version} of '{model}' failed to infer: {response.text[:300]}")
        output = response.json()["outputs"][0]
        return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
