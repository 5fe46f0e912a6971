"""Model architectures: named presets and derived sizes.

Preset dimensions are copied from each model's published Hugging Face ``config.json``
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``). All are dense decoder-only
transformers with SwiGLU MLPs (three ``h x I`` matrices), RMSNorm and, for Qwen2.5, a bias on the
q/k/v projections. Qwen3 (dense) has no q/k/v bias and a ``head_dim`` of 128 that is not
``hidden_size / num_attention_heads``; its per-head q/k RMSNorm weights (2 x 128 a layer) are not
counted. DeepSeek-R1-Distill-Qwen-1.5B (the DynaRL 1.5B math model) has the
Qwen2.5-Math-1.5B architecture, i.e. the Qwen2.5-1.5B dimensions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelDims:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    tie_embeddings: bool = False
    qkv_bias: bool = True

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.hd

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.hd

    def layer_params(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        attn = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.qkv_bias:
            attn += self.q_dim + 2 * self.kv_dim
        mlp = 3 * h * i
        norms = 2 * h
        return attn + mlp + norms

    def embedding_params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        return emb if self.tie_embeddings else 2 * emb

    @property
    def num_params(self) -> int:
        """Total parameter count (embeddings, layers, final norm)."""
        return self.embedding_params() + self.num_layers * self.layer_params() + self.hidden_size

    def flops_per_token_forward(self) -> float:
        """Dense forward FLOPs per token: 2 x (parameters touched by a matmul), attention scores excluded."""
        h = self.hidden_size
        per_layer = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + 3 * h * self.intermediate_size
        lm_head = self.vocab_size * h  # the input embedding is a lookup, not a matmul
        return 2.0 * (self.num_layers * per_layer + lm_head)

    def attention_flops_per_token(self, context_tokens: float) -> float:
        """Forward FLOPs of QK^T and AV for one token attending to ``context_tokens`` tokens."""
        return 4.0 * self.num_layers * self.q_dim * context_tokens


PRESETS: dict[str, ModelDims] = {
    "qwen2.5-0.5b": ModelDims("qwen2.5-0.5b", 896, 24, 14, 2, 4864, 151936, tie_embeddings=True),
    "qwen2.5-1.5b": ModelDims("qwen2.5-1.5b", 1536, 28, 12, 2, 8960, 151936, tie_embeddings=True),
    "qwen2.5-3b": ModelDims("qwen2.5-3b", 2048, 36, 16, 2, 11008, 151936, tie_embeddings=True),
    "qwen2.5-7b": ModelDims("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064),
    "qwen2.5-14b": ModelDims("qwen2.5-14b", 5120, 48, 40, 8, 13824, 152064),
    "qwen2.5-32b": ModelDims("qwen2.5-32b", 5120, 64, 40, 8, 27648, 152064),
    "qwen2.5-72b": ModelDims("qwen2.5-72b", 8192, 80, 64, 8, 29568, 152064),
    "qwen3-0.6b": ModelDims("qwen3-0.6b", 1024, 28, 16, 8, 3072, 151936, head_dim=128, tie_embeddings=True, qkv_bias=False),
    "qwen3-1.7b": ModelDims("qwen3-1.7b", 2048, 28, 16, 8, 6144, 151936, head_dim=128, tie_embeddings=True, qkv_bias=False),
    "qwen3-4b": ModelDims("qwen3-4b", 2560, 36, 32, 8, 9728, 151936, head_dim=128, tie_embeddings=True, qkv_bias=False),
    "qwen3-8b": ModelDims("qwen3-8b", 4096, 36, 32, 8, 12288, 151936, head_dim=128, qkv_bias=False),
    "qwen3-14b": ModelDims("qwen3-14b", 5120, 40, 40, 8, 17408, 151936, head_dim=128, qkv_bias=False),
    "qwen3-32b": ModelDims("qwen3-32b", 5120, 64, 64, 8, 25600, 151936, head_dim=128, qkv_bias=False),
    "llama3.1-8b": ModelDims("llama3.1-8b", 4096, 32, 32, 8, 14336, 128256, qkv_bias=False),
    "llama3.1-70b": ModelDims("llama3.1-70b", 8192, 80, 64, 8, 28672, 128256, qkv_bias=False),
}
ALIASES = {
    "deepseek-r1-distill-qwen-1.5b": "qwen2.5-1.5b",
    "deepseek-r1-distill-qwen-7b": "qwen2.5-7b",
    "deepseek-r1-distill-qwen-14b": "qwen2.5-14b",
    "deepseek-r1-distill-qwen-32b": "qwen2.5-32b",
    "qwen2.5-math-1.5b": "qwen2.5-1.5b",
    "qwen2.5-math-7b": "qwen2.5-7b",
}


def preset_names() -> list[str]:
    return sorted(PRESETS) + sorted(ALIASES)


def preset_key(name: str) -> str:
    """A preset name from a preset name or a Hugging Face hub id: ``Qwen/Qwen2.5-3B-Instruct`` ->
    ``qwen2.5-3b``, ``meta-llama/Llama-3.1-8B-Instruct`` -> ``llama3.1-8b`` (organisation,
    ``-Instruct`` / ``-Chat`` / ``-Base`` / ``-Thinking-2507`` suffixes dropped: the same dimensions)."""
    key = name.strip().lower()
    if key in PRESETS or key in ALIASES:
        return ALIASES.get(key, key)
    key = key.rsplit("/", 1)[-1]
    key = re.sub(r"-(instruct|thinking)-2507$", "", key)  # (Qwen3's July 2025 releases: the same dimensions)
    key = re.sub(r"-(instruct|chat|base|it)$", "", key)
    key = re.sub(r"^meta-", "", key)
    key = re.sub(r"^llama-(\d)", r"llama\1", key)
    return ALIASES.get(key, key)


def preset(name: str) -> ModelDims:
    """A preset by name or Hugging Face hub id (KeyError if none matches)."""
    return PRESETS[preset_key(name)]
