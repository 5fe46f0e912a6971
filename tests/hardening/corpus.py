"""The hostile-input corpus: a small table of case builders, crossed with every command that reads
files (and the daemon's API bodies), gives a few hundred cases.

A :class:`Case` is a command line whose files are written into a fresh folder: ``files`` maps a
name to its bytes (or to a builder that makes something other than a regular file: a directory, a
symbolic link, a FIFO), ``argv`` uses ``{d}`` for that folder, and ``expect`` is text the error must
contain (the field, or ``file:line``). Every case must end with exit status 2, that text, no
traceback, nothing new in the folder, within 10 s and 1 GB (see test_hostile_inputs.py).
"""

from __future__ import annotations

import copy
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE_SCENARIO = yaml.safe_load((ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml").read_text())
BASE_SNAPSHOT = json.loads((ROOT / "scenarios" / "realloc" / "hetero-h20-h100.json").read_text())["snapshots"][0]
BASE_PLAN = {"kind": "ExecutorTarget", "version": 1, "solver": {"backend": "manual", "status": "feasible"},
             "body": {"nodes": [{"name": "h20-0", "gpu_type": "H20", "gpus": 8, "dram_gb": 512}],
                      "components": [{"name": "job/rollout", "role": "rollout", "gpu_type": "H20", "placement": {"h20-0": 4},
                                      "dram_gb_per_worker": 20}]}}

Content = Union[bytes, Callable[[Path], None]]


@dataclass
class Case:
    id: str
    argv: list[str]
    files: dict[str, Content] = field(default_factory=dict)
    expect: str = ""


#: libyaml's emitter where PyYAML has it (the same text as the pure-Python one, about 10x quicker:
#: the corpus is built at collection, twice, and its ~350 dumps were 8 s of it)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(data: Any) -> bytes:
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False).encode()


# ------------------------------------------------------------------ raw hostile documents
def _bomb(levels: int = 9, width: int = 9) -> bytes:
    out = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        out.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return ("\n".join(out) + "\nname: x\n").encode()


def _dir(p: Path) -> None:
    p.mkdir()


def _link_to(target: str) -> Callable[[Path], None]:
    return lambda p: p.symlink_to(target)


def _fifo(p: Path) -> None:
    os.mkfifo(p)


BIG = 9 << 20  # over safeload's 8 MiB cap

# (id, content, what the error names). Each is a file in place of a scenario, plan or snapshot.
RAW: list[tuple[str, Content, str]] = [
    ("deep-flow", b"name: " + b"[" * 5000 + b"]" * 5000 + b"\n", "x.yaml:1"),
    ("deep-block", "".join(f"{'  ' * i}k{i}:\n" for i in range(200)).encode() + b"  " * 200 + b"v: 1\n", "nested more than"),
    ("deep-json", b'{"a": ' * 3000 + b"1" + b"}" * 3000, "nested"),
    ("recursive-alias-seq", b"name: &a [*a]\n", "recursive alias"),
    ("recursive-alias-map", b"cluster: &c {node_groups: *c}\n", "recursive alias"),
    ("billion-laughs", _bomb(), "alias"),
    ("billion-laughs-map", b"a: &a {x: 1, y: 2, z: 3}\n" + b"".join(
        f"b{i}: &b{i} [{', '.join(['*' + ('a' if i == 0 else f'b{i - 1}')] * 12)}]\n".encode() for i in range(8)), "alias"),
    ("int-tag-garbage", b"name: x\ncluster: {node_groups: [{name: a, gpu_type: H20, count: !!int \"abc\"}]}\n", "count"),
    ("float-tag-garbage", b"name: !!float [1]\n", "x.yaml:1"),
    ("python-object", b"name: !!python/object/apply:os.system ['true']\n", "unsupported YAML tag"),
    ("python-name", b"name: !!python/name:os.system\n", "unsupported YAML tag"),
    ("custom-tag", b"name: !secret x\n", "unsupported YAML tag"),
    ("binary-tag", b"name: !!binary aGVsbG8=\n", "unsupported YAML tag"),
    ("set-tag", b"name: !!set {a, b}\n", "unsupported YAML tag"),
    ("merge-of-scalar", b"a: &a 1\nname:\n  <<: *a\n", "merge key"),
    ("duplicate-key", b"name: a\nname: b\n", "duplicate key"),
    ("complex-key", b"? [a, b]\n: 1\n", "plain scalars"),
    ("undefined-alias", b"name: *nope\n", "x.yaml:1"),
    ("utf16-bom", "name: x\n".encode("utf-16"), "UTF-16"),
    ("utf16-no-bom", "name: x\n".encode("utf-16-le"), "NUL"),
    ("utf32", "name: x\n".encode("utf-32"), "UTF-16 or UTF-32"),
    ("latin1", "name: caf\xe9\n".encode("latin-1"), "UTF-8"),
    ("binary-junk", bytes(range(256)) * 4, "x.yaml"),
    ("control-char", b"name: \"a\x01b\"\n", "YAML"),
    ("unclosed", b"name: x\ncluster: [unclosed\n", "x.yaml:"),
    ("tab-indent", b"name: x\ncluster:\n\tnode_groups: []\n", "x.yaml:"),
    ("huge-int", b"name: x\nversion: " + b"9" * 6000 + b"\n", "version"),
    ("empty", b"", "x.yaml"),
    ("top-list", b"- a\n- b\n", "x.yaml"),
    ("top-scalar", b"42\n", "x.yaml"),
    ("json-nan", b'{"name": NaN}', "x.yaml"),
    ("json-infinity", b'{"name": "x", "version": Infinity}', "x.yaml"),
    ("too-big", lambda p: p.write_bytes(b"#" * BIG), "at most"),
    ("directory", _dir, "directory"),
    ("dev-zero", _link_to("/dev/zero"), "not a regular file"),
    ("dev-null", _link_to("/dev/null"), "not a regular file"),
    ("fifo", _fifo, "not a regular file"),
    ("dangling-link", _link_to("/nonexistent/x.yaml"), "not found"),
    ("missing", None, "not found"),  # type: ignore[list-item]
]


# ------------------------------------------------------------------ scenario values
def _set(path: str, value: Any) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        cur: Any = d
        parts = _split(path)
        for p in parts[:-1]:
            cur = cur[p]
        cur[parts[-1]] = value

    return mutate


def _split(path: str) -> list:
    out: list = []
    for part in path.replace("]", "").split("."):
        name, *idx = part.split("[")
        if name:
            out.append(name)
        out += [int(i) for i in idx]
    return out


INF, NAN = float("inf"), float("nan")
# (field, hostile values): every number of the scenario schema, with NaN/inf, a boolean and an
# out-of-range size
NUMBERS: list[tuple[str, list]] = [
    ("cluster.node_groups[0].count", [True, 10**9, INF, -1, 1e300]),
    ("cluster.node_groups[0].gpus_per_node", [False, 100000, NAN]),
    ("cluster.node_groups[0].host_dram_gb", [INF, 1e300, "Infinity"]),
    ("cluster.clusters[0].inter_cluster_bw_gb_per_s", [INF, 0]),
    ("gpu_types.H20.price_per_gpu_hour", [INF, NAN, -INF, True, 1e300]),
    ("gpu_types.H20.bf16_tflops", [1e-300, INF]),
    ("gpu_types.H20.hbm_gb", [INF, 1e-300]),
    ("gpu_types.H20.max_nodes", [10**12, True]),
    ("jobs[0].rollout.batch_prompts", [10**15, True, INF]),
    ("jobs[0].rollout.group_size", [10**9]),
    ("jobs[0].rollout.turns", [10**6, True]),
    ("jobs[0].rollout.max_response_tokens", [10**12, NAN]),
    ("jobs[0].rollout.prompt_tokens", [10**12]),
    ("jobs[0].rollout.tp", [10**6]),
    ("jobs[0].rollout.nodes", [10**9]),
    ("jobs[0].trainer.pp", [10**9]),
    ("jobs[0].trainer.dp", [10**9]),
    ("jobs[0].trainer.mfu", [NAN, 1e-300]),
    ("jobs[0].slo.ratio_to_solo", [INF, NAN]),
    ("jobs[0].arrival_s", [INF, 1e300]),
    ("jobs[0].duration_s", [INF]),
    ("solver.time_limit_s", [INF, 1e300]),
    ("solver.threads", [100000, True]),
    ("solver.seed", [10**30]),
    ("solver.mip_gap", [NAN]),
    ("solver.move_price_per_job", [INF]),
    ("budget_per_hour", [INF]),
]
STRUCTURE: list[tuple[str, Callable[[dict], None], str]] = [
    ("requests-product", lambda d: d["jobs"][0]["rollout"].update(batch_prompts=65536, group_size=1024), "jobs[0].rollout"),
    ("request-turns-product", lambda d: d["jobs"][0]["rollout"].update(batch_prompts=4096, group_size=64, turns=256), "jobs[0].rollout"),
    ("too-many-jobs", lambda d: d.update(jobs=[dict(copy.deepcopy(d["jobs"][0]), name=f"j{i}") for i in range(4097)]), "jobs"),
    ("too-many-groups", lambda d: d["cluster"].update(node_groups=[dict(d["cluster"]["node_groups"][0], name=f"g{i}") for i in range(300)]),
     "cluster.node_groups"),
    ("cluster-total-nodes", lambda d: d["cluster"].update(node_groups=[dict(d["cluster"]["node_groups"][0], name=f"g{i}", count=4096)
                                                                        for i in range(5)]), "cluster"),
    ("sampled-work", lambda d: (d["solver"].update(phase_time_estimate="sampled"),
                                d["jobs"][0]["rollout"].update(batch_prompts=4096, group_size=64)), "sampled"),
    ("long-name", _set("name", "x" * 10000), "name"),
    ("lognormal-sigma-inf", _set("jobs[0].rollout.response_lengths", {"source": "lognormal", "median_tokens": 100, "sigma": INF}),
     "sigma"),
    ("tool-latency-inf", _set("jobs[0].rollout.tools", {"latency": "fixed", "fixed_latency_s": INF}), "fixed_latency_s"),
    ("model-dims-huge", _set("jobs[0].model", {"hidden_size": 10**9, "num_layers": 1, "num_heads": 1, "num_kv_heads": 1,
                                               "intermediate_size": 1, "vocab_size": 1}), "hidden_size"),
    ("model-dims-bool", _set("jobs[0].model", {"hidden_size": True, "num_layers": 1, "num_heads": 1, "num_kv_heads": 1,
                                               "intermediate_size": 1, "vocab_size": 1}), "hidden_size"),
]
INCLUDES: list[tuple[str, Any, str]] = [
    # (id, the include: value, expected text); the folder also holds sub/ and link.yaml -> /etc/hostname
    ("include-absolute", "/etc/hostname", "include"),
    ("include-parent", "../escape.yaml", "outside"),
    ("include-dev-zero", "/dev/zero", "include"),
    ("include-directory", "sub", "directory"),
    ("include-link-out", "link.yaml", "outside"),
    ("include-self", "x.yaml", "include cycle"),
    ("include-not-string", [1, 2], "include"),
    ("include-missing", "nope.yaml", "not found"),
]


def _scenario_with(mutate: Callable[[dict], None]) -> bytes:
    d = copy.deepcopy(BASE_SCENARIO)
    mutate(d)
    return yaml.dump(d, Dumper=_DUMPER, sort_keys=False, allow_unicode=True).encode()


# ------------------------------------------------------------------ commands
def scenario_commands() -> list[tuple[str, list[str]]]:
    """Every command that reads a scenario, with its output options pointing into the folder."""
    return [
        ("validate", ["validate", "{d}/x.yaml"]),
        ("estimate", ["estimate", "{d}/x.yaml"]),
        ("plan", ["plan", "{d}/x.yaml", "--out", "{d}/out.yaml", "--plot", "{d}/out.png", "--save-instance", "{d}/inst.yaml"]),
        ("admit", ["admit", "{d}/x.yaml", "--current", "{d}/nope-plan.yaml", "--job", "small-a", "--out", "{d}/out.yaml"]),
        ("validate-plan", ["validate-plan", "{d}/x.yaml", "{d}/nope-plan.yaml"]),
        ("whatif", ["whatif", "{d}/x.yaml", "--out", "{d}/w"]),
        ("simulate", ["simulate", "{d}/x.yaml", "--policy", "static", "--job", "small-a", "--out", "{d}/s"]),
        ("realloc", ["realloc", str(ROOT / "scenarios" / "realloc" / "hetero-h20-h100.json"), "--scenario", "{d}/x.yaml",
                     "--out", "{d}/out.yaml"]),
        ("daemon", ["daemon", "--scenario", "{d}/x.yaml", "--state", "{d}/s.db", "--listen", "127.0.0.1:0", "--ready-file", "{d}/r"]),
    ]


def plan_commands() -> list[tuple[str, list[str]]]:
    """Every command that reads a plan document."""
    tiny = str(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    return [
        ("validate-plan", ["validate-plan", tiny, "{d}/x.yaml"]),
        ("admit", ["admit", tiny, "--current", "{d}/x.yaml", "--job", "small-a", "--out", "{d}/out.yaml"]),
        ("apply", ["apply", "{d}/x.yaml", "--dry-run", "--journal", "{d}/j.db", "--sim-state", "{d}/sim.db"]),
    ]


def _file(content: Content | None) -> dict:
    return {} if content is None else {"x.yaml": content}


def _plan_with(**over) -> bytes:
    d = copy.deepcopy(BASE_PLAN)
    for k, v in over.items():
        d[k] = v
    return dump(d)


def _snap_with(mutate: Callable[[dict], None]) -> bytes:
    d = copy.deepcopy(BASE_SNAPSHOT)
    mutate(d)
    return dump(d)


@functools.lru_cache(maxsize=1)  # two test modules read it at collection
def cases() -> list[Case]:
    out: list[Case] = []
    scen = scenario_commands()
    # 1. every raw hostile document through validate and, rotating, two other scenario readers
    for i, (cid, content, expect) in enumerate(RAW):
        picks = [scen[0], scen[1 + (2 * i) % (len(scen) - 1)], scen[1 + (2 * i + 1) % (len(scen) - 1)]]
        for name, argv in picks:
            out.append(Case(f"raw-{cid}-{name}", argv, _file(content), expect))
    # 2. every hostile number: validate, and (rotating) one other scenario reader
    k = 0
    for path, values in NUMBERS:
        for v in values:
            body = _scenario_with(_set(path, v))
            vid = f"{path}={v!r}"[:60]
            out.append(Case(f"num-{vid}-validate", scen[0][1], {"x.yaml": body}, path))
            other = scen[1 + k % (len(scen) - 1)]
            k += 1
            out.append(Case(f"num-{vid}-{other[0]}", other[1], {"x.yaml": body}, path))
    for cid, mutate, expect in STRUCTURE:
        body = _scenario_with(mutate)  # one document for its three readers (too-many-jobs: 0.5 s a dump, at every collection)
        for name, argv in (scen[0], scen[2], scen[6]):
            out.append(Case(f"struct-{cid}-{name}", argv, {"x.yaml": body}, expect))
    # 3. include: only regular files below the including file's folder
    for cid, inc, expect in INCLUDES:
        files: dict[str, Content] = {"x.yaml": _scenario_with(lambda d, inc=inc: d.update(include=inc)), "sub": _dir,
                                     "link.yaml": _link_to("/etc/hostname")}
        for name, argv in (scen[0], scen[2]):
            out.append(Case(f"{cid}-{name}", argv, dict(files), expect))
    # 4. plan documents
    def hostile_plans(kind: str) -> list[tuple[str, Content, str]]:
        return [
            ("plan-version-true", _plan_with(kind=kind, version=True), "version"),
            ("plan-version-2", _plan_with(kind=kind, version=2), "version"),
            ("plan-kind-list", _plan_with(kind=["x"]), "kind"),
            ("plan-no-kind", dump({"version": 1}), "kind"),
            ("plan-solver-inf", _plan_with(kind=kind, solver={"backend": "x", "status": "feasible", "objective": INF}), "solver"),
            ("plan-solver-nan-json", json.dumps({**BASE_PLAN, "kind": kind, "solver": {"backend": "x", "status": "y", "gap": "NaN"}})
             .encode().replace(b'"NaN"', b"NaN"), "NaN"),
            # an ExecutorTarget's body may be empty (nothing runs): on a fresh state it names no nodes to make a cluster of
            ("plan-body-missing", _plan_with(kind=kind, body={}), "nodes" if kind == "ExecutorTarget" else "body"),
            ("plan-extra-key", _plan_with(kind=kind, evil=1), "evil"),
        ]

    pcmds = plan_commands()
    for i, (cid, content, expect) in enumerate(RAW):
        name, argv = pcmds[i % len(pcmds)]
        out.append(Case(f"planraw-{cid}-{name}", argv, _file(content), expect))
    for name, argv in pcmds:
        for cid, content, expect in hostile_plans("ExecutorTarget" if name == "apply" else "PlacementPlan"):
            out.append(Case(f"{cid}-{name}", argv, {"x.yaml": content}, expect))
    apply = dict(pcmds)["apply"]

    def target_with(mutate: Callable[[dict], None]) -> bytes:
        d = copy.deepcopy(BASE_PLAN)
        mutate(d["body"])
        return dump(d)

    trainer = {"name": "job/trainer", "role": "trainer", "gpu_type": "H20", "placement": {"h20-0": 1}}
    for cid, mutate, expect in [
        ("node-gpus-huge", lambda b: b["nodes"][0].update(gpus=10**9), "gpus"),
        ("node-gpus-bool", lambda b: b["nodes"][0].update(gpus=True), "gpus"),
        ("node-dram-inf", lambda b: b["nodes"][0].update(dram_gb=INF), "dram_gb"),
        ("workers-huge", lambda b: b["components"][0].update(placement={"h20-0": 10**9}), "placement"),
        ("workers-total", lambda b: b.update(components=[dict(b["components"][0], name=f"j{i}/rollout", placement={"h20-0": 1000})
                                                         for i in range(70)]), "workers"),
        ("standin-model-huge", lambda b: b["components"].append(dict(trainer, model={"hidden": 16384, "ffn": 65536})), "parameters"),
        ("standin-seed-huge", lambda b: b["components"].append(dict(trainer, model={"seed": 2**40})), "seed"),
        ("engine-batch-huge", lambda b: b["components"][0].update(engine={"max_batch": 10**12}), "max_batch"),
    ]:
        out.append(Case(f"target-{cid}-apply", apply, {"x.yaml": target_with(mutate)}, expect))
    # 5. telemetry snapshots (planner realloc)
    realloc = ["realloc", "{d}/x.yaml", "--out", "{d}/out.yaml"]
    for cid, content, expect in RAW:
        out.append(Case(f"snapraw-{cid}", realloc, _file(content), expect))
    snaps: list[tuple[str, Callable[[dict], None], str]] = [
        ("tokens-inf", lambda d: d["workers"][0].update(tokens_per_s=INF), "tokens_per_s"),
        ("kv-nan", lambda d: d["workers"][0].update(kv_used_tokens=NAN), "kv_used_tokens"),
        ("gpus-bool", lambda d: d["workers"][0].update(gpus=True), "gpus"),
        ("gpus-huge", lambda d: d["workers"][0].update(gpus=10**9), "gpus"),
        ("time-inf", lambda d: d.update(time_s=INF), "time_s"),
        ("progress-nan", lambda d: d["components"][0].update(progress=NAN), "progress"),
        ("iteration-huge", lambda d: d.update(iteration=10**30), "iteration"),
        ("queue-bool", lambda d: d["workers"][0].update(queue_depth=False), "queue_depth"),
    ]
    for cid, mutate, expect in snaps:
        out.append(Case(f"snap-{cid}", realloc, {"x.yaml": _snap_with(mutate)}, expect))
    many = copy.deepcopy(BASE_SNAPSHOT)
    many["workers"] = [dict(many["workers"][0], worker_id=f"w{i}") for i in range(4097)]
    out.append(Case("snap-too-many-workers", realloc, {"x.yaml": json.dumps(many).encode()}, "workers"))
    # 6. the apply journal
    for cid, content, expect in [("journal-dir", _dir, "directory"), ("journal-devnull", _link_to("/dev/null"), "not a regular file"),
                                 ("journal-corrupt", os.urandom(4096), "not a usable apply journal")]:
        for name, argv in [("status", ["status", "--journal", "{d}/x.yaml", "--sim-state", "{sim}"]),
                           ("apply", ["apply", "--rollback", "--journal", "{d}/x.yaml", "--sim-state", "{sim}"])]:
            out.append(Case(f"{cid}-{name}", argv, {"x.yaml": content}, expect))
    return out


# ------------------------------------------------------------------ flags
FLAGS: list[tuple[list[str], str]] = [
    (["apply", "{d}/p.yaml", "--dry-run", "--start-timeout", "nan"], "--start-timeout"),
    (["apply", "{d}/p.yaml", "--dry-run", "--call-timeout", "inf"], "--call-timeout"),
    (["apply", "{d}/p.yaml", "--dry-run", "--start-timeout", "1e400"], "--start-timeout"),
    (["plan", "{tiny}", "--move-price", "nan"], "--move-price"),
    (["plan", "{tiny}", "--time-limit", "inf"], "--time-limit"),
    (["plan", "{tiny}", "--threads", "100000"], "--threads"),
    (["plan", "{tiny}", "--mip-gap", "nan"], "--mip-gap"),
    (["plan", "{tiny}", "--out", "{d}/link.yaml"], "--out"),
    (["plan", "{tiny}", "--out", "{d}"], "--out"),
    (["realloc", "{snap}", "--horizon-s", "nan"], "--horizon-s"),
    (["realloc", "{snap}", "--margin", "inf"], "--margin"),
    (["realloc", "{snap}", "--time-limit-s", "-inf"], "--time-limit-s"),
    (["realloc", "{snap}", "--candidates", "1e9"], "--candidates"),
    (["whatif", "{tiny}", "--sweep", "price.H20=1:2:100000000"], "--sweep"),
    (["whatif", "{tiny}", "--sweep", "max_nodes.H20=0:1e12:3"], "--sweep"),
    (["whatif", "{tiny}", "--sweep", "price.H20=nan:2:3"], "--sweep"),
    (["whatif", "{tiny}", "--sweep", "jobs=1:600:2"], "--sweep"),
    (["whatif", "{tiny}", "--sweep", "response=1:1000:2"], "--sweep"),
    (["whatif", "{tiny}", "--workers", "100000"], "--workers"),
    (["whatif", "{tiny}", "--time-limit", "nan"], "--time-limit"),
    (["simulate", "{tiny}", "--policy", "static", "--horizon-s", "inf"], "--horizon-s"),
    (["simulate", "{tiny}", "--policy", "static", "--iterations", "100000000"], "--iterations"),
    (["simulate", "{tiny}", "--policy", "static", "--u-low", "nan"], "--u-low"),
    (["daemon", "--gain-margin", "nan"], "--gain-margin"),
    (["daemon", "--period-s", "inf"], "--period-s"),
    (["daemon", "--sim-slowdown", "1:inf"], "--sim-slowdown"),
    (["daemon", "--ready-file", "{d}/link.yaml", "--state", "{d}/s.db"], "--ready-file"),
]


def flag_cases() -> list[Case]:
    tiny = str(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    snap = str(ROOT / "scenarios" / "realloc" / "hetero-h20-h100.json")
    out = []
    for argv, expect in FLAGS:
        a = [x.replace("{tiny}", tiny).replace("{snap}", snap) for x in argv]
        out.append(Case(f"flag-{' '.join(argv[:1] + argv[-2:])}", a, {"p.yaml": dump(BASE_PLAN), "link.yaml": _link_to("p.yaml")},
                        expect))
    return out


# ------------------------------------------------------------------ API bodies
def api_cases() -> list[tuple[str, str, Union[bytes, dict], str]]:
    """(id, path, body: raw bytes or a JSON-able dict, the field the 4xx names)."""
    job = copy.deepcopy(BASE_SCENARIO["jobs"][0])
    out: list[tuple[str, str, Union[bytes, dict], str]] = []

    def jb(path: str, v: Any) -> dict:
        d = copy.deepcopy(job)
        _set(path, v)(d)
        return d

    for path, v in [("rollout.batch_prompts", 10**15), ("rollout.turns", True), ("rollout.group_size", 10**9),
                    ("slo.ratio_to_solo", "Infinity"), ("arrival_s", 1e300), ("duration_s", -1), ("trainer.mfu", "NaN"),
                    ("rollout.max_response_tokens", 10**12), ("name", "x" * 1000), ("rollout.tp", False)]:
        out.append((f"job-{path}={v!r}"[:50], "/v1/jobs", jb(path, v), path.split(".")[-1]))
    out.append(("job-json-infinity", "/v1/jobs", json.dumps(job).replace('"ratio_to_solo": 2.0', '"ratio_to_solo": Infinity').encode(),
                "ratio_to_solo"))
    out.append(("job-json-nan", "/v1/jobs", json.dumps(dict(job, arrival_s=0.5)).replace("0.5", "NaN").encode(), "arrival_s"))
    out.append(("job-deep", "/v1/jobs", b'{"a":' * 5000 + b"1" + b"}" * 5000, ""))
    snap = copy.deepcopy(BASE_SNAPSHOT)
    snap["workers"] = snap["workers"][:2]
    snap["workers"] = [w for w in BASE_SNAPSHOT["workers"] if w["component"] in ("rollout",)][:1] + \
        [w for w in BASE_SNAPSHOT["workers"] if w["component"] != "rollout"]

    def sb(mutate: Callable[[dict], None]) -> dict:
        d = copy.deepcopy(snap)
        mutate(d)
        return d

    for cid, mutate, expect in [("tokens-inf-str", lambda d: d["workers"][0].update(tokens_per_s="Infinity"), "tokens_per_s"),
                                ("gpus-bool", lambda d: d["workers"][0].update(gpus=True), "gpus"),
                                ("time-huge", lambda d: d.update(time_s=1e300), "time_s"),
                                ("iteration-huge", lambda d: d.update(iteration=10**30), "iteration"),
                                ("progress-nan", lambda d: d["components"][0].update(progress="NaN"), "progress")]:
        out.append((f"snap-{cid}", "/v1/telemetry", sb(mutate), expect))
    out.append(("snap-json-infinity", "/v1/telemetry", json.dumps(snap).replace('"time_s": 300.0', '"time_s": Infinity').encode(),
                "time_s"))
    return out


# ------------------------------------------------------------------ round 2 (issue 25): calibration folders, traces
SECRET = "hunter2-s3cr3t"  # a value of a file that must never be echoed


def _deep_json(n: int = 200_000) -> bytes:
    return b"[" * n + b"]" * n


def _gz_line(n: int, head: bytes = b"n\n") -> Callable[[Path], None]:
    def make(p: Path) -> None:
        import gzip

        with gzip.open(p, "wb", compresslevel=1) as f:
            f.write(head + b"7" * n)
    return make


def _big(n: int) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(n)  # sparse: n bytes of NUL without writing them
    return make


CALIBRATION: list[tuple[str, str, Content, str]] = [
    # (id, file in the folder, content, what the error names)
    ("eff-compute-0", "calibration.json", json.dumps({"kernels": {"H100": {"gemm": {"eff_compute": 0}}}}).encode(), "eff_compute"),
    ("eff-memory-neg", "calibration.json", json.dumps({"kernels": {"H100": {"gemm": {"eff_memory": -0.5}}}}).encode(), "eff_memory"),
    ("nan", "calibration.json", b'{"kernels": {"H100": {"gemm": {"c0_ms": NaN}}}}', "NaN"),
    ("p-huge", "calibration.json", json.dumps({"kernels": {"H100": {"gemm": {"p": 1e300}}}}).encode(), "gemm.p"),
    ("new-gpu-partial", "calibration.json", json.dumps({"kernels": {"H20": {"gemm": {"p": 2}}}}).encode(), "kernels.H20.gemm"),
    ("bandwidth-0", "calibration.json", json.dumps({"network": {"send_recv": {"inter_node": {"bandwidth_gb_per_s": 0}}}}).encode(),
     "bandwidth_gb_per_s"),
    ("kernels-list", "calibration.json", b'{"kernels": []}', "kernels"),
    ("deep", "calibration.json", _deep_json(), "nested"),
    ("top-list", "calibration.json", b"[]", "JSON object"),
    ("huge", "calibration.json", _big(300 << 20), "bytes"),
    ("dup-key", "calibration.json", b'{"kernels": {}, "kernels": {}}', "twice"),
    ("lengths-foo", "lengths.json", b'{"foo": 1}', "mixture"),
    ("lengths-decreasing", "lengths.json", json.dumps({"mixture": {"input_quantiles": [1, 2], "output_quantiles": [5, 1]}}).encode(),
     "output_quantiles"),
    ("lengths-client-str", "lengths.json", json.dumps({"mixture": {"input_quantiles": [1, 2], "output_quantiles": [1, 2]},
                                                       "clients": {"7": "x"}}).encode(), "clients.7"),
    ("tool-latency-str", "tool_latency.json", b'{"seconds": "fast"}', "seconds"),
    ("tool-latency-dir", "tool_latency.json", _dir, "holds none"),
    # session 45's audit: fits in their types' range but no measurement (a rollout phase of 2e300 s, or 1e12x the peak)
    ("eff-compute-1e-300", "calibration.json", json.dumps({"kernels": {"H100": {"gemm": {"eff_compute": 1e-300, "eff_memory": 1e-300,
                                                                                          "p": 1, "c0_ms": 0}}}}).encode(), "eff_compute"),
    ("eff-compute-1e12", "calibration.json", json.dumps({"kernels": {"H100": {"gemm": {"eff_compute": 1e12, "eff_memory": 0.8,
                                                                                         "p": 1, "c0_ms": 0}}}}).encode(), "eff_compute"),
    ("c0-a-day", "calibration.json", json.dumps({"kernels": {"H100": {"gemm": {"eff_compute": 0.5, "eff_memory": 0.8, "p": 1,
                                                                                 "c0_ms": 8.64e7}}}}).encode(), "c0_ms"),
]

TRACES: list[tuple[str, str, Content, str]] = [
    # (id, trace file name, content, what the error names besides the field)
    ("jsonl-deep", "t.jsonl", _deep_json() + b"\n", "nested"),
    ("csv-gz-one-line", "t.csv.gz", _gz_line(6 << 20), "longer than"),
    ("jsonl-gz-one-line", "t.jsonl.gz", _gz_line(6 << 20, b'{"n": 1}\n{"n": 2}\n{"n": "'), "longer than"),
    ("csv-secret", "t.csv", f"n\n{SECRET}\n{SECRET}\n".encode(), "not a number"),
    ("jsonl-secret", "t.jsonl", (json.dumps({"n": SECRET}) + "\n").encode() * 2, "not a number"),
    ("csv-no-column", "t.csv", f"{SECRET}\n1\n2\n".encode(), "no column"),
    ("jsonl-dup-key", "t.jsonl", b'{"n": 1, "n": 2}\n', "twice"),
    ("gz-garbage", "t.csv.gz", b"\x1f\x8b\x08\x00" + b"\xff" * 64, "cannot read"),
    ("utf16", "t.csv", "n\n1\n2\n".encode("utf-16"), "UTF-8"),
]


def round2_cases() -> list[Case]:
    out: list[Case] = []
    scen = dict(scenario_commands())
    for cid, name, content, expect in CALIBRATION:
        body = _scenario_with(lambda d: d.update(calibration="cal"))
        for cmd in ("validate", "plan"):
            out.append(Case(f"cal-{cid}-{cmd}", scen[cmd], {"cal": _dir, f"cal/{name}": content, "x.yaml": body}, expect))
    for cid, name, content, expect in TRACES:
        body = _scenario_with(_set("jobs[0].rollout.response_lengths", {"source": "trace", "path": name, "column": "n"}))
        for cmd in ("validate", "estimate"):
            out.append(Case(f"trace-{cid}-{cmd}", scen[cmd], {name: content, "x.yaml": body}, expect))
    return out


# ------------------------------------------------------------------ round 2, the smaller shapes (issue 25, item 7)
TINY = str(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
INSTANCE = yaml.safe_load((ROOT / "scenarios" / "instances" / "placement-small.yaml").read_text())


def _made_plan(mutate: Callable[[dict], None]) -> Callable[[Path], None]:
    """A plan of tiny-2jobs made by the planner (in-process), then mutated."""
    def make(p: Path) -> None:
        import contextlib
        import io

        from planner.cli import main

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["plan", TINY, "--out", str(p)]) == 0
        d = yaml.safe_load(p.read_text())
        mutate(d)
        p.write_text(yaml.safe_dump(d, sort_keys=False))
    return make


def _instance_with(mutate: Callable[[dict], None]) -> bytes:
    d = copy.deepcopy(INSTANCE)
    mutate(d)
    return dump(d)


def _rename_pool(d: dict) -> None:
    t = next(iter(d["pool_types"]))
    d["pool_types"][""] = d["pool_types"].pop(t)


def smaller_cases() -> list[Case]:
    scen = dict(scenario_commands())
    apply = ["apply", "{d}/x.yaml", "--scenario", TINY, "--sim-state", "{d}/s.db"]
    first = lambda d: d["body"]["groups"][0]  # noqa: E731
    out = [
        Case("b60-count", scen["validate"], {"x.yaml": _scenario_with(_set("cluster.node_groups[0].count", "1:05"))
                                            .replace(b"'1:05'", b"1:05")}, "base-60"),
        Case("b60-float", scen["plan"], {"x.yaml": _scenario_with(_set("gpu_types.H20.price_per_gpu_hour", "1:30.5"))
                                         .replace(b"'1:30.5'", b"1:30.5")}, "base-60"),
        Case("gpu-type-empty-key", scen["validate"], {"x.yaml": _scenario_with(lambda d: d["gpu_types"].update({"": {"base": "H20"}}))},
             "gpu_types"),
        Case("gpu-type-empty-group", scen["plan"], {"x.yaml": _scenario_with(_set("cluster.node_groups[0].gpu_type", ""))}, "gpu_type"),
        Case("esc-scenario-name", scen["validate"], {"x.yaml": _scenario_with(_set("name", "evil\x1b[2J\x1b[31mred"))}, "control"),
        Case("newline-group-name", scen["plan"], {"x.yaml": _scenario_with(_set("cluster.node_groups[0].name", "g\nFAKE: ok"))},
             "control"),
        Case("esc-key", scen["validate"], {"x.yaml": _scenario_with(lambda d: d.update({"\x1b[2J": 1}))}, "control"),
        # session 45's audit: every field within its limit, together a rollout of 1.4e11 tokens (346 s, then an internal
        # error); GPU figures at their floors estimate an SLO of 2.6e8 s (an internal error deep in the model)
        Case("simulate-out-dangling", ["simulate", TINY, "--policy", "solo-d", "--out", "{d}/dl"],
             {"dl": _link_to("/nonexistent-session45/out")}, "dangling"),
        Case("whatif-out-dangling", ["whatif", TINY, "--out", "{d}/dl"], {"dl": _link_to("/nonexistent-session45/out")}, "dangling"),
        Case("tokens-per-iteration", scen["validate"], {"x.yaml": _scenario_with(lambda d: d["jobs"][0]["rollout"].update(
            batch_prompts=4096, group_size=64, max_response_tokens=524288))}, "max_response_tokens"),
        # (with a limit its estimates fit in: under the scenario's 5 s they are refused first, naming --time-limit)
        Case("gpu-figures-at-floor", scen["plan"] + ["--time-limit", "600"], {"x.yaml": _scenario_with(lambda d: [v.update(
            bf16_tflops=0.1, hbm_bw_tb_per_s=0.01, nvlink_gb_per_s=0.1, pcie_gb_per_s=0.01, inter_node_bw_gb_per_s=0.01)
            for v in d["gpu_types"].values()] + [d["jobs"][0]["slo"].update(ratio_to_solo=10.0),
                                                  d["jobs"][0]["rollout"].update(batch_prompts=512, group_size=16,
                                                                                 max_response_tokens=32768)])}, "beyond the supported"),
        Case("instance-price-1e308", ["plan", "{d}/x.yaml", "--out", "{d}/out.yaml"],
             {"x.yaml": _instance_with(lambda d: next(iter(d["pool_types"].values())).update(price_per_gpu_hour=1e308))},
             "price_per_gpu_hour"),
        Case("instance-gpu-type-empty", ["plan", "{d}/x.yaml", "--out", "{d}/out.yaml"], {"x.yaml": _instance_with(_rename_pool)},
             "pool_types"),
        Case("plan-group-twice", apply, {"x.yaml": _made_plan(lambda d: d["body"]["groups"].append(copy.deepcopy(first(d))))},
             "body.groups"),
        Case("plan-job-twice", apply, {"x.yaml": _made_plan(lambda d: first(d)["members"].append(copy.deepcopy(first(d)["members"][0])))},
             "placed-once"),
        Case("plan-digest-zero", apply, {"x.yaml": _made_plan(lambda d: d.update(scenario_digest="0" * 16))}, "scenario_digest"),
        Case("plan-group-dropped", apply, {"x.yaml": _made_plan(lambda d: d["body"].update(groups=d["body"]["groups"][:-1]))},
             "placed-once"),
        Case("plan-false-cost", apply, {"x.yaml": _made_plan(lambda d: d["body"].update(cost_per_hour=1.0))}, "cost"),
        # session 45's audit: read as 1 / True before (the floats of a plan already were strict)
        Case("plan-size-bool", ["validate-plan", TINY, "{d}/x.yaml"],
             {"x.yaml": _made_plan(lambda d: first(d)["train_pool"].update(size=True))}, "train_pool.size"),
        Case("plan-size-text", ["validate-plan", TINY, "{d}/x.yaml"],
             {"x.yaml": _made_plan(lambda d: first(d)["train_pool"].update(size="1"))}, "train_pool.size"),
        Case("plan-moved-text", ["validate-plan", TINY, "{d}/x.yaml"],
             {"x.yaml": _made_plan(lambda d: first(d)["members"][0].update(moved="yes"))}, "moved"),
        Case("target-empty", ["apply", "{d}/x.yaml", "--sim-state", "{d}/s.db"], {"x.yaml": _plan_with(body={
            "nodes": BASE_PLAN["body"]["nodes"], "components": []})}, "--allow-stop-all"),
        Case("whatif-out-symlink", ["whatif", TINY, "--out", "{d}/w"], {"w": _dir, "w/fleet.png": _link_to("/nonexistent/fleet.png")},
             "fleet.png"),
        Case("status-empty-sim-state", ["status", "--sim-state", "{d}/x.db"], {"x.db": b""}, "empty"),
    ]
    many = copy.deepcopy(BASE_SNAPSHOT)
    many["workers"] = [dict(many["workers"][0], worker_id=f"w{i}", gpus=10**9) for i in range(4097)]
    out.append(Case("snap-huge-error", ["realloc", "{d}/x.yaml", "--out", "{d}/out.yaml"], {"x.yaml": json.dumps(many).encode()},
                    "workers"))
    return out
