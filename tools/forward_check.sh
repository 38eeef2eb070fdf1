#!/usr/bin/env bash
# Forward check (not gating): the compatibility subset (tests/supported.py) against the
# newest Keras pre-release, on the newest supported TensorFlow, in a venv of its own.
#
#   bash tools/forward_check.sh [VENV_DIR]
#
# The pre-release is `pip install --pre keras` when PyPI has one newer than the newest
# release, else the newest keras-nightly (the same `keras` package, built daily from
# Keras' main branch). hypernet itself is installed without its pins (setup.py allows
# Keras < 3.16). Prints the versions, then pytest's summary; exits with pytest's status.
# VENV_DIR defaults to $HYPERNET_VENVS (default ~/.cache/hypernet-venvs)/keras-pre.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${HYPERNET_VENVS:-$HOME/.cache/hypernet-venvs}/keras-pre}
if ! "$venv/bin/python" -c "" 2>/dev/null; then
  rm -rf "$venv"
  python -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)
log="$venv/pip-install.log"
: > "$log"
# A clean Keras: keras and keras-nightly are the same package under two names.
"$venv/bin/python" -m pip uninstall -y -q keras keras-nightly >> "$log" 2>&1 || true
run_pip() {
  if ! "${pip[@]}" "$@" >> "$log" 2>&1; then
    tail -n 40 "$log"
    echo "forward check: pip install $* failed (log above)." >&2
    exit 1
  fi
}
# The newest supported TensorFlow and the test dependencies, from setup.py.
run_pip -e ".[test]"
run_pip --upgrade "tensorflow>=2.19,<2.22" "tensorboard>=2.19,<2.22"
# The newest pre-release of Keras.
run_pip --pre --upgrade keras
if "$venv/bin/python" - <<'PY'
import importlib.metadata as m, sys
from packaging.version import Version
sys.exit(0 if Version(m.version("keras")).is_prerelease else 1)
PY
then
  source="keras (pip install --pre keras)"
else
  "$venv/bin/python" -m pip uninstall -y -q keras >> "$log" 2>&1
  run_pip --pre --upgrade keras-nightly
  source="keras-nightly (no newer Keras pre-release on PyPI)"
fi
"$venv/bin/python" -c "import sys, tensorflow as tf, keras; print('forward check on Python', \
sys.version.split()[0], 'TensorFlow', tf.__version__, 'Keras', keras.__version__)" 2>/dev/null
echo "Keras from: $source"
status=0
# Modules that fail to import are reported and the rest still runs.
"$venv/bin/python" -m pytest -q -p no:cacheprovider -m compat_subset \
  --continue-on-collection-errors || status=$?
echo "forward check exit status: $status (not gating)"
exit "$status"
