#!/usr/bin/env bash
# Runs the compatibility subset (tests/supported.py, pytest marker compat_subset) in a venv
# of its own with the pins of a requirements file (e.g. .ci/oldest.txt):
#   bash .ci/compat_subset.sh .ci/oldest.txt [VENV_DIR]
# VENV_DIR defaults to $HYPERNET_VENVS (default ~/.cache/hypernet-venvs)/<file name>;
# a venv left there by an earlier run is reused (the installer brings it to the pins).
set -euo pipefail
cd "$(dirname "$0")/.."
reqs=$1
venv=${2:-${HYPERNET_VENVS:-$HOME/.cache/hypernet-venvs}/$(basename "$reqs" .txt)}
# uv (in the test extras) builds the venv and installs into it in parallel: about 1 min
# from nothing against pip's 2-2.5 min on 2 cores; pip where uv is not installed.
if python -m uv --version > /dev/null 2>&1; then
  make_venv=(python -m uv venv -q --seed "$venv")
  install=(python -m uv pip install -q --python "$venv/bin/python")
else
  make_venv=(python -m venv "$venv")
  install=("$venv/bin/python" -m pip install --disable-pip-version-check)
fi
if ! "$venv/bin/python" -c "" 2>/dev/null; then
  rm -rf "$venv"
  "${make_venv[@]}"
fi
if ! "${install[@]}" -r "$reqs" -e ".[test]" > "$venv/pip-install.log" 2>&1; then
  tail -n 40 "$venv/pip-install.log"
  echo "compat subset: could not install $reqs into $venv (log above)." >&2
  exit 1
fi
"$venv/bin/python" -c "import sys, tensorflow as tf, keras; print('compat subset on Python', \
sys.version.split()[0], 'TensorFlow', tf.__version__, 'Keras', keras.__version__)" 2>/dev/null
"$venv/bin/python" -m pytest -q -p no:cacheprovider -m compat_subset
