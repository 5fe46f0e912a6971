"""Shared test helpers: the project root, the shared data folder, and running the CLI."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RL_PLANNER_SHARED_DATA", ROOT.parent / "shared" / "data"))
SCENARIOS = ROOT / "scenarios"
# the compiled-instance cache (planner/instances/cache.py) is off in tests: they patch the model at
# run time, which its source digest cannot see; tests of the cache turn it on in a folder of their own
os.environ["RL_PLANNER_CACHE"] = "0"
# one OpenMP / BLAS thread in the test processes and every process they start (daemons, Ray workers,
# CLI runs), unless the caller set them: the suite runs three workers beside Ray clusters and daemons on
# two cores, where thread pools that spin between tiny ops slow each other down many times over
# (the reshard property test: 2-3 s alone, 35-57 s in the suite). Read by torch at its import.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# property tests draw the same examples on every run (CI and a reviewer's run see what the author saw;
# a failure reproduces), with no example database written into the checkout; HYPOTHESIS_PROFILE=explore
# draws fresh examples (and keeps a database) to look for new counterexamples
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def shared_data(*parts: str) -> Path:
    """Path into ../shared/data; the calling test is skipped when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not available: {p}")
    return p


def unprivileged(what: str) -> list[str]:
    """A command prefix under which file permissions apply to ``what`` (a test's subprocess): none for a
    normal user; as root, ``setpriv`` without the capabilities that bypass them (skips when there is none)."""
    import shutil

    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip(f"running as root without setpriv: file permissions cannot be made to apply to {what}")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600.0, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m planner ARGS`` in a subprocess (the real entry point), capturing output."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("COLUMNS", "120")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "planner", *args], cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=timeout, env=e)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="module", autouse=True)
def _freeze_what_the_module_starts_with():
    """At each module's first test: collect, then move every object still alive (imported modules,
    the sessions' and earlier modules' fixtures) to the cyclic collector's permanent generation, so
    that its full collections no longer walk them again and again (the suite's collector time: about
    33 CPU s before, 12-16 after). Objects allocated later are collected as before."""
    gc.collect()
    gc.freeze()
    yield


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the marker into the node id
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (the default run: ``-n 3 --dist loadgroup`` in pyproject.toml) the tests of
    one module run in one worker, so that a module's fixtures (a Ray cluster, a daemon replay) start
    once, and every test that starts a local Ray cluster runs in the same worker, one module after
    the other: two clusters at once would double the processes and memory on a 2-core machine.
    The modules marked ``jit`` (they compile the numba pricing kernel, about 15 CPU s, unless numba's
    on-disk cache has it) also share one worker: on a fresh checkout, in separate workers, each
    compiled it at once (four such modules: 70 CPU s cold against 33 warm)."""
    for item in items:
        if item.get_closest_marker("ray") is not None:
            group = "ray"
        elif item.get_closest_marker("jit") is not None:
            group = "jit"
        else:
            group = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
