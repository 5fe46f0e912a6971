"""Block-style YAML for plain data (dicts with string keys, lists, str, int, float, bool, None),
written directly: a plan document's text in a tenth of PyYAML's time.

Why: PyYAML's representer and resolver run in Python for every node even with libyaml's emitter
(``CSafeDumper``): a 2,000-job plan (92,000 nodes, 1 MB) took 0.36-0.45 s to dump, against 0.04 s
for its JSON, and ``planner plan`` writes YAML by default under limits as short as a second.

What it writes (what :func:`yaml.safe_load` reads back as the same data; checked against PyYAML's
own dump on plan documents and on generated data in ``tests/foundation/test_yamlemit.py``):

* mappings and sequences in block style, sequences inside a mapping not indented (PyYAML's
  default), ``{}`` and ``[]`` when empty;
* ``null``, ``true``/``false``, integers as ``str``, floats as PyYAML writes them (``repr``,
  ``.inf``/``-.inf``/``.nan``, an exponent without a dot gets ``.0``);
* a string plain when it is made of a conservative set of characters (letters, digits,
  ``_./+-:@,()$%;=`` and single spaces between them; starting with a letter, a digit or ``_./``;
  no ``": "``, ``" :"`` or final ``:``) *and* PyYAML's resolver reads it back as a string (so
  ``yes``, ``null``, ``1:05``, ``0x1F`` or ``1.5e+3`` are quoted); any other string as PyYAML writes
  it double-quoted on one line (escapes for every non-printable character, no folding; PyYAML
  folds long strings at 100 columns and writes multi-line ones as ``|`` blocks: the same data).

Anything else (a tuple, a numpy scalar, a non-string key, a key over 128 characters, which PyYAML
would write as a complex key) is refused with ``TypeError``: callers pass data already reduced to
these types (:func:`planner.plandoc.to_data`) and fall back on PyYAML for the rest.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from planner.safeload import reads_exponent_floats

_STR_TAG = "tag:yaml.org,2002:str"
_SAFE = re.compile(r"[A-Za-z0-9_./](?:[A-Za-z0-9_./+@:,()$%;=-]| (?=[^ ]))*\Z")  # one space at a time, not last
class _Resolver(Resolver):
    pass


_RESOLVER = _Resolver()
reads_exponent_floats(_Resolver)  # (a name '1e3' written plain was read back as 1000.0)
_QUOTED: dict[str, str] = {}  # string -> its text (plain or double-quoted), for repeated keys and names


def _quoted(s: str) -> str:
    """PyYAML's double-quoted form of ``s`` on one line."""
    text = yaml.dump(s, Dumper=yaml.SafeDumper, default_style='"', width=float("inf"), allow_unicode=False)  # (all quoted)
    return text.rstrip("\n").removesuffix("\n...")


def scalar_str(s: str) -> str:
    got = _QUOTED.get(s)
    if got is None:
        # (a plain "..." or "---" at the start of a line would end or start a document: a top-level
        # scalar "..." read back as a parse error; PyYAML quotes both prefixes)
        plain = (_SAFE.match(s) is not None and not s.endswith(":") and ": " not in s and " :" not in s
                 and not s.startswith(("...", "---")) and _RESOLVER.resolve(ScalarNode, s, (True, False)) == _STR_TAG)
        got = s if plain else _quoted(s)
        if len(_QUOTED) < 100_000:
            _QUOTED[s] = got
    return got


def scalar_float(x: float) -> str:
    if math.isnan(x):
        return ".nan"
    if math.isinf(x):
        return ".inf" if x > 0 else "-.inf"
    v = repr(x).lower()
    if "." not in v and "e" in v:
        v = v.replace("e", ".0e", 1)
    return v


def _scalar(v: Any) -> str:
    t = type(v)
    if t is str:
        return scalar_str(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return scalar_float(v)
    raise TypeError(f"cannot write a {t.__name__} as YAML here: {v!r}")


def _block(v: Any, indent: int, out: list[str], lead: str) -> None:
    """Write ``v`` (a dict or a list, not empty) starting after ``lead`` on the current line."""
    pad = " " * indent
    first = True
    if type(v) is dict:
        for k, x in v.items():
            if type(k) is not str or len(k) > 128:
                raise TypeError(f"mapping keys must be strings of at most 128 characters here: {k!r}")
            head = (lead if first else pad) + scalar_str(k) + ":"
            first = False
            tx = type(x)
            if tx is dict and x:
                out.append(head + "\n")
                _block(x, indent + 2, out, " " * (indent + 2))
            elif tx is list and x:
                out.append(head + "\n")
                _block(x, indent, out, pad)  # a sequence in a mapping is not indented
            else:
                out.append(head + " " + ("{}" if tx is dict else "[]" if tx is list else _scalar(x)) + "\n")
    else:
        for x in v:
            head = (lead if first else pad) + "- "
            first = False
            tx = type(x)
            if (tx is dict or tx is list) and x:
                _block(x, indent + 2, out, head)
            else:
                out.append(head + ("{}" if tx is dict else "[]" if tx is list else _scalar(x)) + "\n")


def dumps(data: Any) -> str:
    """``data`` as a block-style YAML document (module docstring)."""
    t = type(data)
    if (t is dict or t is list) and data:
        out: list[str] = []
        _block(data, 0, out, "")
        return "".join(out)
    if t is dict or t is list:
        return "{}\n" if t is dict else "[]\n"
    return _scalar(data) + "\n"
