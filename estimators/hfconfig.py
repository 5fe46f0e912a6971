"""Model dimensions from a Hugging Face ``config.json`` (a local file or a model directory;
nothing is downloaded).

Fields read (``transformers``' names): ``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``, ``num_key_value_heads`` (default: ``num_attention_heads``, i.e. MHA),
``intermediate_size``, ``vocab_size``, ``head_dim`` (default ``hidden_size /
num_attention_heads``), ``tie_word_embeddings`` and the q/k/v bias. Defaults that are not in the
file follow the model class: ``tie_word_embeddings`` is false for the Llama / Qwen2 / Qwen3 /
Mistral families (their config classes say so) and true otherwise (``PretrainedConfig``); the
q/k/v bias is ``attention_bias`` where given, else true for ``qwen2`` (its attention always has
it) and false otherwise. A multimodal config's ``text_config`` is read for the language model.
Mixture-of-experts configs (``num_experts`` / ``num_local_experts`` / ``n_routed_experts``) are
refused: the estimators model dense decoders.

Parameters, layers, heads, KV bytes per token and memory then follow from :class:`ModelDims`
exactly as for a preset (``estimators.memory``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Union

from estimators.models import ModelDims, preset

UNTIED_BY_DEFAULT = {"llama", "qwen2", "qwen3", "mistral"}
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


class HFConfigError(ValueError):
    """A config.json that cannot give model dimensions; the message names the file and field."""


def config_path(path: Union[str, Path]) -> Path:
    p = Path(path).expanduser()
    try:
        return p / "config.json" if p.is_dir() else p
    except (OSError, ValueError):  # (a segment over the file system's limit: the read below names the error)
        return p


#: a config.json is a few KB (those with large label maps under 1 MB); more is not one
MAX_CONFIG_BYTES = 4 << 20
#: no dimension of a real model comes near this (a hidden size of 1e30 overflowed the estimates)
MAX_DIM = 1 << 31


def _read_bounded(p: Path) -> str:
    """The text of the regular file ``p``, at most :data:`MAX_CONFIG_BYTES` of it: a device or FIFO
    named as the model (``/dev/zero``) is refused, not read until memory runs out."""
    import os
    import stat

    fix = "give a local config.json or a model directory holding one (nothing is downloaded)"
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise HFConfigError(f"{p}: cannot read it ({exc.strerror or exc}); {fix}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HFConfigError(f"{p}: not a regular file (a device, FIFO or socket); {fix}")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise HFConfigError(f"{p}: cannot read it ({exc.strerror or exc}); {fix}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise HFConfigError(f"{p}: over {MAX_CONFIG_BYTES:,} bytes, too large for a config.json; {fix}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise HFConfigError(f"{p}: not UTF-8 text; {fix}") from None


def looks_like_path(name: str) -> bool:
    """A model given as a local config.json or model directory (rather than a preset or a hub id)."""
    if name.endswith(".json") or name.startswith(("./", "../", "/", "~")):
        return True
    try:
        p = Path(name).expanduser()
        return p.is_dir() and (p / "config.json").is_file()
    except (OSError, ValueError, RuntimeError):  # a name no file system holds (a 300-character segment, a NUL): not a path here
        return False


def _int(cfg: dict, key: str, where: str, default: Any = None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise HFConfigError(f"{where}: no '{key}' (a Hugging Face config.json of a decoder-only model has it)")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > MAX_DIM:
        raise HFConfigError(f"{where}: '{key}' is {str(v)[:40]!r}, not a positive integer up to {MAX_DIM:,}; "
                            f"fix the config.json (give the model's own)")
    return v


def dims_from_config(cfg: dict, name: str = "custom", where: str = "config.json") -> ModelDims:
    """:class:`ModelDims` from a parsed config.json."""
    if not isinstance(cfg, dict):
        raise HFConfigError(f"{where}: not a JSON object")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "tie_word_embeddings"}}
    moe = [k for k in MOE_KEYS if cfg.get(k)]
    if moe:
        raise HFConfigError(f"{where}: a mixture-of-experts model ('{moe[0]}': {cfg[moe[0]]}); the estimators model dense "
                            f"decoders: give dense dimensions under model: instead")
    mtype = str(cfg.get("model_type", ""))
    heads = _int(cfg, "num_attention_heads", where)
    hidden = _int(cfg, "hidden_size", where)
    kv = _int(cfg, "num_key_value_heads", where, heads)
    head_dim = cfg.get("head_dim")
    if head_dim is not None:
        head_dim = _int(cfg, "head_dim", where)
    elif hidden % heads:
        raise HFConfigError(f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads} and no head_dim")
    if heads % kv:
        raise HFConfigError(f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    tie = cfg.get("tie_word_embeddings", mtype not in UNTIED_BY_DEFAULT)
    bias = cfg.get("attention_bias", mtype == "qwen2")
    return ModelDims(name=name, hidden_size=hidden, num_layers=_int(cfg, "num_hidden_layers", where), num_heads=heads,
                     num_kv_heads=kv, intermediate_size=_int(cfg, "intermediate_size", where),
                     vocab_size=_int(cfg, "vocab_size", where), head_dim=head_dim or 0, tie_embeddings=bool(tie),
                     qkv_bias=bool(bias))


def load(path: Union[str, Path]) -> ModelDims:
    """:class:`ModelDims` from a local config.json (or a directory holding one)."""
    p = config_path(path)
    text = _read_bounded(p)
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HFConfigError(f"{p}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise HFConfigError(f"{p}: nested too deeply to be a config.json; give the model's own config.json") from None
    name = str(cfg.get("_name_or_path") or p.parent.name or "custom") if isinstance(cfg, dict) else "custom"
    return dims_from_config(cfg, name=name, where=str(p))


def resolve(name: str) -> ModelDims:
    """A preset (by name or Hugging Face hub id) or, for a local path, the dimensions in its Hugging Face
    ``config.json`` (HFConfigError, a ValueError, if it cannot be read). KeyError if it is neither.
    Lives here, not in :mod:`estimators.models`, so that the presets never import this reader."""
    if looks_like_path(name):
        return load(name)
    return preset(name)
