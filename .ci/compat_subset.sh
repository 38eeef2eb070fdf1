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
# The venv gets the pins and the package's dependencies and test extras, read from
# pyproject.toml, but not the package itself: nothing is built, so nothing is written into
# the checkout (.ci/run runs this beside the suite's own install); the tests import
# hypernet from the checkout (python -m pytest puts the current folder first on sys.path).
# uv installs in parallel: about 1 min from nothing against pip's 2-2.5 min on 2 cores
# (the running Python's uv, else one installed into the venv first).
if ! "$venv/bin/python" -c "" 2>/dev/null; then
  rm -rf "$venv"
  python -m venv "$venv"
fi
log=$venv/pip-install.log
uv=(python -m uv)
if ! "${uv[@]}" --version > /dev/null 2>&1; then
  uv=("$venv/bin/python" -m uv)
  "${uv[@]}" --version > /dev/null 2>&1 || \
    "$venv/bin/python" -m pip install -q --disable-pip-version-check uv > "$log" 2>&1 || uv=()
fi
python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['test']))" > "$venv/dependencies.txt"
if [[ ${#uv[@]} -gt 0 ]]; then
  install=("${uv[@]}" pip install -q --python "$venv/bin/python")
else
  install=("$venv/bin/python" -m pip install --disable-pip-version-check)
fi
if ! "${install[@]}" -r "$reqs" -r "$venv/dependencies.txt" >> "$log" 2>&1; then
  tail -n 40 "$log"
  echo "compat subset: could not install $reqs into $venv (log above)." >&2
  exit 1
fi
"$venv/bin/python" -c "import sys, tensorflow as tf, keras; print('compat subset on Python', \
sys.version.split()[0], 'TensorFlow', tf.__version__, 'Keras', keras.__version__)" 2>/dev/null
# One process (-n 0) and only the subset's files collected: beside the suite a second
# pytest-xdist worker would only pay TensorFlow's import and the collection of every test
# file again (117 -> 90 CPU-s in all, the same wall time beside the suite).
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n 0 -m compat_subset \
  $("$venv/bin/python" tests/supported.py)
