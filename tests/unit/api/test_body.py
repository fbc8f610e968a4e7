import pytest

from services.api.body import validate
from services.common.errors import InvalidInput
from services.common.schemas import EmbeddingsRequest, ServeRequest


def test_serve_request_takes_text_or_texts():
    assert validate(ServeRequest, {"text": "a"}).batch == ["a"]
    assert validate(ServeRequest, {"texts": ["a", "b"]}).batch == ["a", "b"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, None),
        ({"text": "a", "texts": ["b"]}, None),
        ({"text": 3}, "text"),
        ({"texts": []}, "texts"),
        ({"texts": ["a", 1]}, "texts.1"),
        ({"text": "a", "truncate": "yes"}, "truncate"),
    ],
)
def test_serve_request_errors_name_the_field(body, field):
    with pytest.raises(InvalidInput) as info:
        validate(ServeRequest, body)
    assert info.value.param == field
    assert info.value.status_code == 422
    if field is None:
        assert '"text"' in info.value.message and '"texts"' in info.value.message


def test_body_must_be_an_object():
    with pytest.raises(InvalidInput, match="must be an object"):
        validate(ServeRequest, ["a"])


def test_openai_request():
    assert validate(EmbeddingsRequest, {"input": "a", "model": "m"}).batch == ["a"]
    with pytest.raises(InvalidInput) as info:
        validate(EmbeddingsRequest, {"input": []})
    assert "non-empty" in info.value.message
    with pytest.raises(InvalidInput) as info:
        validate(EmbeddingsRequest, {"input": [[1, 2, 3]]})
    assert info.value.param.startswith("input")


def test_gzip_bodies_are_decompressed_within_the_limit():
    import asyncio
    import gzip

    from services.api.body import read_body
    from services.common.errors import BadRequest, PayloadTooLarge

    async def chunks(data: bytes):
        yield data

    def read(data: bytes, encoding: str, limit: int = 1000) -> bytes:
        return asyncio.run(read_body(chunks(data), {"content-encoding": encoding}, limit))

    assert read(gzip.compress(b'{"text": "hi"}'), "gzip") == b'{"text": "hi"}'
    bomb = gzip.compress(b"0" * 1_000_000)  # ~1 KB on the wire, a megabyte inside
    assert len(bomb) < 1100
    with pytest.raises(PayloadTooLarge, match="decompresses to more than"):
        read(bomb, "gzip", limit=10_000)
    with pytest.raises(BadRequest, match="cannot be decompressed"):
        read(b"not gzip", "gzip")
    with pytest.raises(BadRequest, match="'br' is not supported"):
        read(b"x", "br")


def gz_read(data: bytes, limit: int = 1000) -> bytes:
    import asyncio

    from services.api.body import read_body

    async def chunks():
        yield data

    return asyncio.run(read_body(chunks(), {"content-encoding": "gzip"}, limit))


def test_only_a_complete_gzip_stream_is_accepted():
    import gzip

    from services.common.errors import BadRequest

    whole = gzip.compress(b'{"text": "hi"}')
    for cut in (len(whole) - 8, len(whole) - 1):  # no CRC trailer, a trailer short of one byte
        with pytest.raises(BadRequest, match="cut short") as info:
            gz_read(whole[:cut])
        assert info.value.status_code == 400
    with pytest.raises(BadRequest, match="3 bytes after its end that are not gzip"):
        gz_read(whole + b"junk"[:3])
    corrupt = whole[:-8] + bytes([whole[-8] ^ 1]) + whole[-7:]  # a wrong CRC
    with pytest.raises(BadRequest, match="cannot be decompressed"):
        gz_read(corrupt)
    assert gz_read(whole + gzip.compress(b" ")) == b'{"text": "hi"} ', "members one after another are one stream"


def test_a_body_of_more_gzip_members_than_the_bound_is_refused():
    import gzip

    from services.api.body import MAX_GZIP_MEMBERS
    from services.common.errors import BadRequest

    member = gzip.compress(b" ")
    assert gz_read(gzip.compress(b"[1]") + member * (MAX_GZIP_MEMBERS - 1)) == b"[1]" + b" " * (MAX_GZIP_MEMBERS - 1)
    with pytest.raises(BadRequest, match=f"more than {MAX_GZIP_MEMBERS} members") as info:
        gz_read(
            member * 50_000, limit=10_000_000
        )  # 1 MB of tiny members: refused after the bound, not decompressed one by one
    assert info.value.status_code == 400


def test_a_body_shorter_than_its_content_length_is_refused():
    import asyncio

    from services.api.body import read_body
    from services.common.errors import BadRequest

    async def chunks():
        yield b'{"text": "a"}'

    with pytest.raises(BadRequest, match="ended after 13 of its 1000 bytes"):
        asyncio.run(read_body(chunks(), {"content-length": "1000"}, 10_000))


@pytest.mark.parametrize(
    "body, headers",
    [
        (b'{"text": "a"}', {}),
        (b'{"text": "a"}', {"content-length": "13"}),
        (b'{"text": "a"}', {"content-length": "14"}),
        (b'{"text": "a"}', {"content-length": "2000"}),
        (b"x" * 1001, {}),
        (b"", {}),
        (b'{"text": "a"}', {"content-encoding": "br"}),
        (__import__("gzip").compress(b'{"text": "a"}', mtime=0), {"content-encoding": " GZIP "}),
        (__import__("gzip").compress(b"x" * 5000, mtime=0), {"content-encoding": "gzip"}),
    ],
)
def test_a_body_in_one_piece_is_read_as_one_in_chunks(body, headers):
    """`whole_body` (the /serve door's path for a body that came in one message) answers as `read_body` does."""
    import asyncio

    from services.api.body import read_body, whole_body

    async def chunks():
        for start in range(0, len(body), 5):
            yield body[start : start + 5]

    def outcome(read):
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
            return type(exc), str(exc)

    chunked = outcome(lambda: asyncio.run(read_body(chunks(), headers, 1000)))
    assert outcome(lambda: whole_body(body, headers, 1000)) == chunked
