#!/usr/bin/env bash
# Forward check (not gating): the compatibility subset (tests/supported.py) and the
# version-sensitive tests (tests/test_compat.py, tests/test_second_order.py) on the newest
# TensorFlow pre-release with its Keras (keras-nightly for a release candidate), in a venv
# of its own (tools/version_venv.sh pre):
#
#   bash tools/forward_check.sh [VENV_DIR]
#
# Prints the versions, then pytest's summaries; exits with pytest's status. A maintainer
# runs it before a TensorFlow or Keras release; tools/version_matrix.sh runs the whole
# matrix (oldest, newest release, newest pre-release) for the README's table.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(bash tools/version_venv.sh pre "$@")
py="$venv/bin/python"
"$py" -c "import sys, tensorflow as tf, keras; print('forward check on Python', \
sys.version.split()[0], 'TensorFlow', tf.__version__, 'Keras', keras.__version__)" 2>/dev/null
status=0
"$py" -m pytest -q -p no:cacheprovider -m compat_subset --continue-on-collection-errors || status=$?
"$py" -m pytest -q -p no:cacheprovider -m "not compat_subset" tests/test_compat.py \
  tests/test_second_order.py || status=$?
echo "forward check exit status: $status (not gating)"
exit "$status"
