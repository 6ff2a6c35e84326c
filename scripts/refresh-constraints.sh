#!/usr/bin/env bash
# Refresh constraints.txt: the exact version of every package that the project and all its extras install,
# re-resolved from pyproject.toml's ranges (the newest versions they allow). Usage, from anywhere:
#
#   bash scripts/refresh-constraints.sh                  # re-pin everything to the newest allowed versions
#   bash scripts/refresh-constraints.sh --no-upgrade     # keep the current pins; add/drop only what pyproject.toml changed
#   bash scripts/refresh-constraints.sh -P dagster       # (with --no-upgrade) move one package only
#
# Any arguments are passed to pip-compile. It needs only python3 (3.11, the project's and the image's Python: the
# pins are resolved for the interpreter that runs this; PYTHON=... chooses another) and PyPI: pip-tools is
# installed into a throwaway virtual environment. Then install with:
#   pip install -e '.[dev]' -c constraints.txt
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-python3}"
work="$(mktemp -d /tmp/refresh-constraints.XXXXXX)"
trap 'rm -rf "$work"' EXIT

echo "== pip-tools in a throwaway virtual environment ($("$python" --version))"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check 'pip-tools>=7.6,<8'

echo "== pip-compile pyproject.toml (the base, every extra) -> constraints.txt"
# --all-extras: stack and dev (and any extra added later). --strip-extras: a constraints file may not name extras.
# --unsafe-package streaming-pipeline: the dev extra names the project itself (streaming-pipeline[stack]), which a
#   constraints file must not pin (`pip install -e .` would then conflict with `streaming-pipeline @ file://...`);
#   pip-tools leaves an "unsafe" package out, listing it only in a comment. This replaces pip-tools' default
#   unsafe set (pip, setuptools), so those are pinned like every other package when something needs them.
# --no-emit-*: no index or find-links of this machine's pip configuration goes into the file.
# Default --upgrade: re-resolve from scratch; a later --no-upgrade in "$@" wins (click takes the last one).
CUSTOM_COMPILE_COMMAND="bash scripts/refresh-constraints.sh" \
  "$work/venv/bin/pip-compile" \
  --quiet \
  --upgrade \
  --all-extras \
  --strip-extras \
  --unsafe-package streaming-pipeline \
  --no-emit-index-url \
  --no-emit-trusted-host \
  --no-emit-find-links \
  --newline lf \
  --output-file constraints.txt \
  "$@" \
  pyproject.toml

# What a constraints file must not have: the project itself, a local path, an extra.
if grep -nE '^(streaming[-_.]pipeline\b|.*file://|[A-Za-z0-9._-]+\[)' constraints.txt; then
  echo "constraints.txt pins the project, a local path or an extra (above): not usable with pip install -e ." >&2
  exit 1
fi
echo "== constraints.txt: $(grep -cE '^[A-Za-z0-9]' constraints.txt) packages; the engine and Dagster:"
grep -E '^(pyspark|delta-spark|dagster|dagster-webserver|dagster-postgres|pandas)==' constraints.txt
