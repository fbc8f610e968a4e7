"""A tiny randomly initialised BERT checkpoint, written locally in about a second once torch is imported: for
tests and smoke runs.

It is a real Hugging Face checkpoint directory (config.json, safetensors weights, a WordPiece tokenizer.json), so
the same export and serving code paths run on it as on a downloaded model.
"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = [
    "the",
    "a",
    "an",
    "is",
    "are",
    "was",
    "be",
    "to",
    "of",
    "and",
    "in",
    "on",
    "for",
    "with",
    "as",
    "at",
    "by",
    "from",
    "this",
    "that",
    "it",
    "he",
    "she",
    "they",
    "we",
    "you",
    "i",
    "hello",
    "world",
    "man",
    "woman",
    "cat",
    "dog",
    "fox",
    "food",
    "eating",
    "eats",
    "quick",
    "brown",
    "lazy",
    "jumps",
    "over",
    "while",
    "watches",
    "window",
    "model",
    "server",
    "batch",
    "request",
    "requests",
    "triton",
    "text",
    "long",
    "short",
    "sentence",
    "inputs",
    "truncated",
    "maximum",
    "length",
    "token",
    "tokens",
    "test",
    "tests",
    "embedding",
    "vector",
    "fast",
    "slow",
    "good",
    "bad",
    "happy",
    "sad",
    "red",
    "blue",
    "green",
    "one",
    "two",
    "three",
]


def _vocab() -> list[str]:
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,;:!?'\"-()")
    tokens = special + chars + [f"##{c}" for c in chars] + sorted(WORDS)
    return list(dict.fromkeys(tokens))


def tiny_tokenizer():
    """The checkpoint's WordPiece tokenizer (BERT normalizer, [CLS] ... [SEP]); needs only `tokenizers`."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocab = {token: i for i, token in enumerate(_vocab())}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer


def write_tiny_checkpoint(
    path: Path,
    *,
    task: str = "embedding",
    labels: tuple[str, ...] = ("negative", "positive"),
    layers: int = 2,
    hidden: int = 32,
    max_length: int = 64,
    seed: int = 0,
    intermediate: int | None = None,
) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer()
    vocab = tokenizer.get_vocab()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_length,
    )
    fast.save_pretrained(str(path))

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=intermediate or hidden * 2,
        max_position_embeddings=max_length,
    )
    if task == "classification":
        config.id2label = dict(enumerate(labels))
        config.label2id = {label: i for i, label in enumerate(labels)}
        classifier = BertForSequenceClassification(config)
        classifier.eval().save_pretrained(str(path))
    else:
        BertModel(config, add_pooling_layer=False).eval().save_pretrained(str(path))
    if task == "embedding":
        (path / "modules.json").write_text(
            json.dumps(
                [
                    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
                ]
            )
        )
        (path / "1_Pooling").mkdir(exist_ok=True)
        (path / "1_Pooling" / "config.json").write_text(
            json.dumps({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True})
        )
    return path
