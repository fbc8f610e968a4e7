"""Request and response schemas of the serving API shared by every HTTP stack."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator


class ServeRequest(BaseModel):
    """`POST /serve/{endpoint}[/{version}]`: one text or a list of texts."""

    model_config = ConfigDict(extra="allow")  # extra fields reach custom preprocess code untouched

    text: StrictStr | None = None
    texts: list[StrictStr] | None = Field(None, min_length=1)
    truncate: StrictBool | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ServeRequest:
        if (self.text is None) == (self.texts is None):
            raise ValueError('send exactly one of "text" (a string) or "texts" (a non-empty list of strings)')
        return self

    @property
    def batch(self) -> list[str]:
        return [self.text] if self.text is not None else list(self.texts or [])


class EmbeddingsRequest(BaseModel):
    """`POST /v1/embeddings`, OpenAI-compatible."""

    input: StrictStr | list[StrictStr] = Field(description="a string or a non-empty list of strings")
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: StrictStr | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> EmbeddingsRequest:
        if isinstance(self.input, list) and not self.input:
            raise ValueError("input must be a string or a non-empty list of strings")
        return self

    @property
    def batch(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)
