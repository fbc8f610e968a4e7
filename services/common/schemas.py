"""Request and response schemas of the serving API shared by every HTTP stack."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator


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


class ModelCard(BaseModel):
    """One entry of `GET /v1/models`, OpenAI's `Model` object."""

    id: str = Field(description="A name `POST /v1/embeddings` accepts as `model`")
    object: Literal["model"] = "model"
    created: int = Field(description="When the newest of its live versions was built (Unix seconds; 0 if unknown)")
    owned_by: str


class ModelList(BaseModel):
    """`GET /v1/models`, OpenAI-compatible."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


# The Open Inference Protocol (KServe v2 / Triton) request, as the v2 edge reads it (`services.api.v2_request`) and
# the OpenAPI document declares it. Every model of this API takes one input, TEXT: BYTES, shape [N, 1] (or [N]).
V2_INPUT = "TEXT"  # the Literal types below spell the same names (a Literal takes no variable)
V2_DATATYPE = "BYTES"
BatchDim = Annotated[StrictInt, Field(ge=1)]


class V2TensorParameters(BaseModel):
    model_config = ConfigDict(extra="allow")  # Triton defines more; this edge reads only these

    binary_data_size: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="Bytes of this tensor in the binary tail (`Inference-Header-Content-Length`)"
    )


class V2InputTensor(BaseModel):
    name: Literal["TEXT"]
    shape: list[BatchDim] = Field(min_length=1, max_length=2, description="[N, 1] or [N]: N texts, one per row")
    datatype: Literal["BYTES"]
    data: list | None = Field(None, description="N strings, flat or nested as the shape says")
    parameters: V2TensorParameters | None = None

    @field_validator("shape")
    @classmethod
    def _one_text_per_row(cls, shape: list[int]) -> list[int]:
        if len(shape) == 2 and shape[1] != 1:
            raise ValueError(f"must be [N, 1] or [N] (N texts, one per row), not {shape}")
        return shape


class V2OutputParameters(BaseModel):
    model_config = ConfigDict(extra="allow")

    binary_data: StrictBool | None = None


class V2RequestedOutput(BaseModel):
    name: StrictStr
    parameters: V2OutputParameters | None = None


class V2RequestParameters(BaseModel):
    model_config = ConfigDict(extra="allow")

    binary_data_output: StrictBool | None = None


class V2InferenceRequest(BaseModel):
    """An Open Inference Protocol request (JSON; the binary extension appends raw tensors after it)."""

    id: StrictStr | None = None
    inputs: list[V2InputTensor] = Field(min_length=1, max_length=1, description="One tensor: TEXT")
    outputs: list[V2RequestedOutput] | None = None
    parameters: V2RequestParameters | None = None

    def wants_binary(self, output: str) -> bool:
        """Whether `output` goes back in the binary tail: its own `binary_data`, else the request's
        `binary_data_output` (Triton's precedence)."""
        for requested in self.outputs or ():
            if requested.name == output and requested.parameters and requested.parameters.binary_data is not None:
                return requested.parameters.binary_data
        return bool(self.parameters and self.parameters.binary_data_output)
