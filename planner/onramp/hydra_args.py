"""A verl launch script (``python3 -m verl.trainer.main_ppo key=value ...``) as the nested mapping its
Hydra overrides give, for :func:`planner.onramp.verl.read`.

verl's own examples (``examples/*/run_*.sh``) configure a job this way rather than with a YAML file.
Tokens are split as a shell would (``#`` comments, ``\\`` continuations, quotes); a token
``a.b.c=value`` (also ``+a.b=value`` / ``++a.b=value``) is an override, read as a YAML scalar
(``1024``, ``True``, ``null``, ``'name'``); tokens without a dotted key (``export X=1``,
``train_path=$HOME/x``, ``--config-path=config``) are not overrides. ``--config-name`` naming the
Megatron config (``ppo_megatron_trainer``) makes ``actor_rollout_ref.actor.strategy`` megatron, as
that config does. A value that is a shell variable (``$bs``, ``${bs}``) is refused where the reader
reads that field, naming it; any other value holding ``$`` is kept as text. A key given twice with two values is refused naming both.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

from planner.errors import Problem, UserError
from planner.safeload import _CONTROL, _LINE_BREAKS

_OVERRIDE = re.compile(r"^\+{0,2}([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)+)=(.*)$", re.S)


def looks_like_overrides(text: str) -> bool:
    """Whether ``text`` holds at least one ``a.b=value`` override token."""
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError:
        return False
    return any(_OVERRIDE.match(t) for t in tokens)


_SHELL_VAR = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")


def _value(text: str, key: str) -> Any:
    if _SHELL_VAR.match(text.strip()):  # the script sets it (bs=256 ... key=$bs): refused where it is read
        from planner.onramp.verl import Unresolved

        return Unresolved(text, key, shell=True)
    if "$" in text or not text.strip():
        return text  # ($HOME/models/Qwen2.5-7B: its last part still names the model; ${data.x}: Hydra's, resolved later)
    if text.strip()[0] in "[{&*!|>%@`":
        return text  # (a list or mapping: no field read holds one; kept as text, never expanded)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if value is None or isinstance(value, (str, int, float, bool)) else text


def load(text: str, where: str) -> dict:
    """The nested mapping of the overrides in ``text`` (see the module's docstring)."""
    title = f"{where}: cannot write a scenario"
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise UserError(Problem("", f"cannot split the arguments: {exc}", "check the quotes"), title=title) from None
    flat: dict[str, Any] = {}
    megatron = False
    for t in tokens:
        if t.startswith("--config-name"):
            megatron = megatron or "megatron" in t
            continue
        m = _OVERRIDE.match(t)
        if not m:
            continue
        if _CONTROL.intersection(t) or _LINE_BREAKS.intersection(t):
            raise UserError(Problem(m.group(1), "holds a control character or a line break",
                                    "write the value as plain text"), title=title)
        key, value = m.group(1), _value(m.group(2), m.group(1))
        if key in flat and flat[key] != value:
            raise UserError(Problem(key, f"given twice, as '{flat[key]}' and as '{value}'", f"keep one {key}=... in {where}"),
                            title=title)
        flat[key] = value
    if megatron:
        flat.setdefault("actor_rollout_ref.actor.strategy", "megatron")
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise UserError(Problem(key, f"'{'.'.join(parts[:i + 1])}' is given a value and fields below it",
                                        f"keep one of them in {where}"), title=title)
            node = nxt
        if isinstance(node.get(parts[-1]), dict):
            raise UserError(Problem(key, f"'{key}' is given a value and fields below it", f"keep one of them in {where}"),
                            title=title)
        node[parts[-1]] = value
    return out
