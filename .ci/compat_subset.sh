#!/usr/bin/env bash
# Runs the compatibility subset (tests/supported.py, pytest marker compat_subset) in a venv
# of its own with the pins of a requirements file (e.g. .ci/oldest.txt):
#   bash .ci/compat_subset.sh .ci/oldest.txt [VENV_DIR]
# VENV_DIR defaults to $HYPERNET_VENVS (default ~/.cache/hypernet-venvs)/<file name>;
# a venv left there by an earlier run is reused (pip brings it to the pins).
set -euo pipefail
cd "$(dirname "$0")/.."
reqs=$1
venv=${2:-${HYPERNET_VENVS:-$HOME/.cache/hypernet-venvs}/$(basename "$reqs" .txt)}
if ! "$venv/bin/python" -c "" 2>/dev/null; then
  rm -rf "$venv"
  python -m venv "$venv"
fi
if ! "$venv/bin/python" -m pip install --disable-pip-version-check -r "$reqs" -e ".[test]" \
    > "$venv/pip-install.log" 2>&1; then
  tail -n 40 "$venv/pip-install.log"
  echo "compat subset: pip could not install $reqs into $venv (log above)." >&2
  exit 1
fi
"$venv/bin/python" -c "import sys, tensorflow as tf, keras; print('compat subset on Python', \
sys.version.split()[0], 'TensorFlow', tf.__version__, 'Keras', keras.__version__)" 2>/dev/null
"$venv/bin/python" -m pytest -q -p no:cacheprovider -m compat_subset
