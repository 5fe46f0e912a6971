"""Megatron-core GPTModel weights <-> Hugging Face names (Llama / Qwen2 family), for weight sync
from a ``megatron`` trainer to SGLang engines, which load Hugging Face names.

Megatron's fused ``linear_qkv`` (weight ``[(heads + 2 kv_heads) * head_dim, hidden]``, bias
likewise) is laid out per query group ``g``: its ``heads / kv_heads`` query heads, then its key
head, then its value head; Hugging Face keeps ``q_proj`` (query heads in order, head ``i`` in group
``i // (heads / kv_heads)``), ``k_proj`` and ``v_proj``. The gated ``linear_fc1`` is ``[gate; up]``.
Rotary embeddings need no permutation (Megatron's default ``rotary_interleaved=False`` rotates
halves, as Hugging Face's ``rotate_half``).

==========================================================  =====================================
Megatron (stacked: ``decoder.layers.<name>``, layer axis 0)  Hugging Face (``model.layers.<l>.``)
==========================================================  =====================================
``embedding.word_embeddings.weight``                       ``model.embed_tokens.weight``
``self_attention.linear_qkv.layer_norm_weight``            ``input_layernorm.weight``
``self_attention.linear_qkv.weight`` / ``.bias``           ``self_attn.{q,k,v}_proj.weight`` / ``.bias``
``self_attention.linear_proj.weight``                      ``self_attn.o_proj.weight``
``mlp.linear_fc1.layer_norm_weight``                       ``post_attention_layernorm.weight``
``mlp.linear_fc1.weight``                                  ``mlp.gate_proj.weight``, ``mlp.up_proj.weight``
``mlp.linear_fc2.weight``                                  ``mlp.down_proj.weight``
``decoder.final_layernorm.weight``                         ``model.norm.weight``
``output_layer.weight``                                    ``lm_head.weight``
==========================================================  =====================================
"""

from __future__ import annotations

import torch

LAYERS = "decoder.layers."
_SIMPLE = {"embedding.word_embeddings.weight": "model.embed_tokens.weight", "decoder.final_layernorm.weight": "model.norm.weight",
           "output_layer.weight": "lm_head.weight"}
_LAYER = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
          "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
          "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight", "mlp.linear_fc2.weight": "mlp.down_proj.weight"}


def split_qkv(t: torch.Tensor, heads: int, kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Megatron's fused QKV (weight or bias of one layer) -> Hugging Face's q, k, v."""
    r = heads // kv_heads
    g = t.reshape(kv_heads, (r + 2) * head_dim, *t.shape[1:])
    rest = t.shape[1:]
    return (g[:, : r * head_dim].reshape(heads * head_dim, *rest), g[:, r * head_dim: (r + 1) * head_dim].reshape(kv_heads * head_dim, *rest),
            g[:, (r + 1) * head_dim:].reshape(kv_heads * head_dim, *rest))


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, kv_heads: int, head_dim: int) -> torch.Tensor:
    """The inverse of :func:`split_qkv`."""
    r = heads // kv_heads
    rest = q.shape[1:]
    return torch.cat([q.reshape(kv_heads, r * head_dim, *rest), k.reshape(kv_heads, head_dim, *rest),
                      v.reshape(kv_heads, head_dim, *rest)], dim=1).reshape((heads + 2 * kv_heads) * head_dim, *rest)


def megatron_to_hf(named: dict[str, torch.Tensor], heads: int, kv_heads: int, head_dim: int) -> dict[str, torch.Tensor]:
    """Full Megatron parameters (stacked layers) -> Hugging Face names, one tensor per layer."""
    out: dict[str, torch.Tensor] = {}
    for key, t in named.items():
        if key in _SIMPLE:
            out[_SIMPLE[key]] = t
            continue
        if not key.startswith(LAYERS):
            raise KeyError(f"no Hugging Face name for Megatron parameter {key!r}")
        name = key[len(LAYERS):]
        for layer in range(t.shape[0]):
            pre, x = f"model.layers.{layer}.", t[layer]
            if name in _LAYER:
                out[pre + _LAYER[name]] = x
            elif name in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
                kind = name.rsplit(".", 1)[1]
                for proj, part in zip("qkv", split_qkv(x, heads, kv_heads, head_dim)):
                    out[f"{pre}self_attn.{proj}_proj.{kind}"] = part
            elif name == "mlp.linear_fc1.weight":
                gate, up = x.chunk(2, dim=0)
                out[pre + "mlp.gate_proj.weight"], out[pre + "mlp.up_proj.weight"] = gate, up
            else:
                raise KeyError(f"no Hugging Face name for Megatron parameter {key!r}")
    return {k: v.contiguous() for k, v in out.items()}
