#!/usr/bin/env bash
# Builds what tests/executor/gpu_checks.sh needs on a GPU machine that reaches no package index and
# takes at most 64 MiB of carried files (the device tool of this workplace: docs in
# /work/.library/device/README.md). Run it from the repository root on a machine with network:
#
#   bash tests/executor/gpu_bundle.sh [DEST]          # DEST defaults to .gpu (keep it git-ignored:
#                                                     # echo /.gpu/ >> .git/info/exclude)
#
# It writes:
#   DEST/ray-site.tar.xz  Ray's cp312 manylinux wheel (RAY_VERSION, default 2.60.0; 79 MB zipped,
#                         201 MB unpacked) unpacked and stripped of what the executor never loads:
#                         the Java jars, RLlib, Tune, Serve, Data, Train, LLM, Workflow and the
#                         dashboard's web client (ray.init(include_dashboard=False) serves no UI).
#                         Kept: the core (raylet, gcs_server, _raylet.so), ray._private (with the
#                         runtime-env agent's vendored aiohttp), the dashboard agent's Python code,
#                         autoscaler, util, dag, air, experimental. About 138 MB unpacked, 20 MB as xz -9.
#   DEST/whl/*.whl        wheels of what the GPU image lacks: Ray's jsonschema (with referencing,
#                         jsonschema-specifications, rpds-py cp312), the executor's pydantic (with
#                         pydantic-core cp312, annotated-types, typing-inspection, typing-extensions
#                         4.16: pydantic 2.14 needs it), and megatron-core 0.16.1 cp312 (taken from
#                         .whl/ when it is there). The image has torch, pytest, psutil, pyyaml,
#                         numpy, msgpack, protobuf, click, filelock, requests, attrs, aiohttp, grpcio.
#
# PY=311 RAY_TREE=<site-packages>/ray DEST=... builds the same stripped tree from an installed Ray
# instead (to try the stripped Ray on a python 3.11 machine before carrying the cp312 one).
set -euo pipefail
DEST=${1:-${DEST:-.gpu}}
PY=${PY:-312}
RAY_VERSION=${RAY_VERSION:-2.60.0}
PIP=${PIP:-python3 -m pip}
STRIP="jars rllib tune serve data train llm workflow dashboard/client setup-dev.py"
DL=${DL:-/tmp/rlp-gpu-dl}  # downloads stay outside DEST: DEST is what travels
mkdir -p "$DEST/whl" "$DL"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

download() {  # cp$PY manylinux wheels, no dependencies (each one is named)
  $PIP download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$1" "${@:2}"
}

mkdir -p "$stage/site"
if [ -n "${RAY_TREE:-}" ]; then  # an installed Ray: the package and its dist-info
  cp -a "$RAY_TREE" "$stage/site/ray"
  cp -a "$(dirname "$RAY_TREE")"/ray-"$RAY_VERSION".dist-info "$stage/site/" 2>/dev/null || true
else
  whl=${RAY_WHEEL:-$(ls "$DL"/ray-"$RAY_VERSION"-cp"$PY"-*.whl 2>/dev/null | head -1 || true)}
  if [ -z "$whl" ]; then
    download "$DL" "ray==$RAY_VERSION"
    whl=$(ls "$DL"/ray-"$RAY_VERSION"-cp"$PY"-*.whl | head -1)
  fi
  unzip -q "$whl" -d "$stage/site"  # unzip keeps the executables' mode (raylet, gcs_server, the .so files)
fi
for p in $STRIP; do rm -rf "$stage/site/ray/$p"; done
find "$stage/site" -name __pycache__ -type d -prune -exec rm -rf {} +
echo "stripped ray tree: $(du -sh "$stage/site" | cut -f1)"
tar -C "$stage/site" -cf - . | xz -T0 -9 > "$DEST/ray-site.tar.xz"
echo "$DEST/ray-site.tar.xz: $(du -h "$DEST/ray-site.tar.xz" | cut -f1)"

if [ "$PY" = 312 ]; then
  download "$DEST/whl" jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
  if ls .whl/megatron_core-0.16.1-cp312-*.whl >/dev/null 2>&1; then
    cp .whl/megatron_core-0.16.1-cp312-*.whl "$DEST/whl/"
  else
    download "$DEST/whl" megatron-core==0.16.1
  fi
fi
du -ch "$DEST"/ray-site.tar.xz $(ls "$DEST"/whl/*.whl 2>/dev/null) | tail -1
