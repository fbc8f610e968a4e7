"""A registered version's artifact, fetched as untrusted input: only the files the artifact itself lists, each a
relative path inside it, each a regular file (no link, no device), within a size limit per file and per version that
stops the copy at the limit. A refused or failed fetch leaves nothing behind.

Two sources: a directory on this host (an MLflow `file:` artifact root, the embedded store's) and MLflow's artifact
proxy over HTTP (a tracking server started with `--serve-artifacts`). Only `httpx` is used, so serving processes
fetch without importing MLflow."""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

import httpx
from pydantic import BaseModel, Field

from services.common.errors import ConfigurationError, NotFound, Unavailable
from services.common.names import ARTIFACT_FILE_PATTERN
from services.common.urls import shown_url

CHUNK = 1 << 20
PROXIED = "mlflow-artifacts:"
_FILE = re.compile(ARTIFACT_FILE_PATTERN)


class ArtifactLimits(BaseModel):
    """How much of a registered version is fetched at most."""

    max_file_bytes: int = Field(4 << 30, ge=1)
    """One file of a version (the ONNX file is the largest: ~90 MB for all-MiniLM-L6-v2, ~1.3 GB for a BERT-large)."""
    max_version_bytes: int = Field(8 << 30, ge=1)
    """Every file of one version together."""
    max_files: int = Field(64, ge=1)
    """Files in one version's artifact (an export writes four)."""


class ArtifactRefused(ConfigurationError):
    """The artifact breaks a rule: the version is at fault, not the registry."""


@dataclass(frozen=True)
class ArtifactFile:
    path: str
    """Relative to the artifact's root, with '/' between folders."""
    size: int | None
    """As the listing says (None where it does not)."""


class ArtifactSource(Protocol):
    def listing(self) -> list[ArtifactFile]:
        """Every file of the artifact, recursively."""
        ...

    def chunks(self, path: str) -> Iterator[bytes]:
        """The bytes of one listed file."""
        ...


def download(source: ArtifactSource, dest: Path, limits: ArtifactLimits, only: list[str] | None = None) -> Path:
    """Copy the artifact's files (or the `only` ones, each of which must be listed) into `dest`, replacing it;
    ArtifactRefused when a rule is broken, with nothing left at `dest`."""
    files = {item.path: item for item in source.listing()}
    check_listing(list(files.values()), limits)
    wanted = list(files) if only is None else only
    if missing := [path for path in wanted if path not in files]:
        raise ArtifactRefused(f"the artifact has no {missing}")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    total = 0
    try:
        for path in wanted:
            total += _copy(source.chunks(path), dest / path, path, limits, limits.max_version_bytes - total)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def check_listing(files: list[ArtifactFile], limits: ArtifactLimits) -> None:
    if len(files) > limits.max_files:
        raise ArtifactRefused(f"the artifact has {len(files)} files, over the limit of {limits.max_files}")
    for item in files:
        if not _FILE.fullmatch(item.path):
            raise ArtifactRefused(
                f"the artifact holds a file named outside its rules ({ARTIFACT_FILE_PATTERN}): relative paths only"
            )
        if item.size is not None and item.size > limits.max_file_bytes:
            raise ArtifactRefused(f"artifact file {item.path} is over the limit of {limits.max_file_bytes} bytes")
    declared = sum(item.size or 0 for item in files)
    if declared > limits.max_version_bytes:
        raise ArtifactRefused(f"the artifact's files are over the limit of {limits.max_version_bytes} bytes")


def _copy(chunks: Iterator[bytes], target: Path, path: str, limits: ArtifactLimits, budget: int) -> int:
    """Stream `chunks` into `target`, stopping as soon as a limit is passed; returns the bytes written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(target, "xb") as out:
        for chunk in chunks:
            written += len(chunk)
            if written > limits.max_file_bytes:
                raise ArtifactRefused(f"artifact file {path} is over the limit of {limits.max_file_bytes} bytes")
            if written > budget:
                raise ArtifactRefused(f"the artifact's files are over the limit of {limits.max_version_bytes} bytes")
            out.write(chunk)
    return written


class LocalArtifacts:
    """An artifact in a directory of this host; links and special files are refused, never followed."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def listing(self) -> list[ArtifactFile]:
        if not self.root.is_dir() or self.root.is_symlink():
            raise NotFound("the version's artifact is not in the registry's artifact store")
        found: list[ArtifactFile] = []
        for folder, dirs, names in os.walk(self.root):
            for name in dirs + names:
                full = Path(folder) / name
                mode = full.lstat().st_mode
                relative = full.relative_to(self.root).as_posix()
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                    raise ArtifactRefused(f"artifact entry {relative} is a link or a special file, not a file")
                if stat.S_ISREG(mode):
                    found.append(ArtifactFile(relative, full.lstat().st_size))
        return found

    def chunks(self, path: str) -> Iterator[bytes]:
        descriptor = os.open(self.root / path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ArtifactRefused(f"artifact entry {path} is not a regular file")
            while chunk := handle.read(CHUNK):
                yield chunk


class ProxiedArtifacts:
    """An artifact behind MLflow's artifact proxy (`mlflow server --serve-artifacts`)."""

    def __init__(self, tracking_uri: str, root: str, timeout: float = 30.0):
        self.api = tracking_uri.rstrip("/") + "/api/2.0/mlflow-artifacts/artifacts"
        self.root = root.strip("/")
        self.timeout = timeout

    def listing(self) -> list[ArtifactFile]:
        found: list[ArtifactFile] = []
        folders = [""]
        while folders:
            folder = folders.pop()
            where = f"{self.root}/{folder}".rstrip("/")
            try:
                answer = httpx.get(self.api, params={"path": where}, timeout=self.timeout)
            except httpx.HTTPError as exc:
                raise Unavailable(
                    f"the registry at {shown_url(self.api)} does not answer: {exc}", retry_after=5
                ) from None
            _checked(answer, self.api)
            for entry in answer.json().get("files", []):
                relative = f"{folder}/{entry['path'].rsplit('/', 1)[-1]}".lstrip("/")
                if entry.get("is_dir"):
                    folders.append(relative)
                else:
                    found.append(ArtifactFile(relative, entry.get("file_size")))
                if len(found) + len(folders) > 1000:
                    raise ArtifactRefused("the artifact lists over 1000 entries")
        return found

    def chunks(self, path: str) -> Iterator[bytes]:
        url = f"{self.api}/{self.root}/{path}"
        try:
            with httpx.stream("GET", url, timeout=self.timeout) as response:
                _checked(response, url)
                yield from response.iter_bytes(CHUNK)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the registry's artifact proxy did not answer: {exc}", retry_after=5) from None


def _checked(response: httpx.Response, url: str) -> httpx.Response:
    if response.status_code == 404:
        raise NotFound("the version's artifact is not in the registry's artifact store")
    if not response.is_success:
        raise Unavailable(f"the registry answered {response.status_code} at {url}", retry_after=5)
    return response


def source_for(artifact_uri: str, tracking_uri: str | None, subpath: str) -> ArtifactSource:
    """Where a run's artifact `subpath` (`model`) is read from, given the run's artifact URI."""
    if artifact_uri.startswith(PROXIED):
        if not tracking_uri or not tracking_uri.startswith(("http://", "https://")):
            raise ConfigurationError("proxied artifacts need an HTTP tracking server (MLFLOW_TRACKING_URI)")
        root = urlparse(artifact_uri).path
        return ProxiedArtifacts(tracking_uri, f"{root.strip('/')}/{subpath}")
    parsed = urlparse(artifact_uri)
    if parsed.scheme in ("", "file"):
        return LocalArtifacts(Path(unquote(parsed.path)) / subpath)
    raise ConfigurationError(
        f"artifacts stored at a {parsed.scheme}: URI cannot be fetched with limits here: run the tracking server with "
        "--serve-artifacts, so that artifacts come through its proxy"
    )
