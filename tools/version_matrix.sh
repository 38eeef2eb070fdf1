#!/usr/bin/env bash
# The version matrix behind the README's "Supported versions" table: for CI's oldest pair,
# the newest releases and the newest pre-releases (tools/version_venv.sh oldest|newest|pre,
# each a venv of its own), README command 1's job and the compatibility tests
# (pytest -m compat_subset, then tests/test_compat.py and tests/test_second_order.py).
#
#   bash tools/version_matrix.sh [KIND ...]     # default: oldest newest pre
#
# Prints one Markdown row per pair (and writes them to $OUT, default
# /tmp/hypernet-version-matrix.md; a pair's pytest log beside it where a test failed). About 5 minutes per pair on 2 cores once its venv
# exists; a new venv downloads TensorFlow (~640 MB) first.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL=3
kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(oldest newest pre)
out=${OUT:-/tmp/hypernet-version-matrix.md}
header="| pair | TensorFlow | Keras | numpy | README job: test accuracy / loss | compatibility subset | test_compat + test_second_order |
|---|---|---|---|---|---|---|"
echo "$header" | tee "$out"
for kind in "${kinds[@]}"; do
  venv=$(bash tools/version_venv.sh "$kind")
  py="$venv/bin/python"
  versions=$("$py" -c "import tensorflow as tf, keras, numpy as np
print(f'{tf.__version__} | {keras.__version__} | {np.__version__}')" 2>/dev/null)
  work=$(mktemp -d)
  "$py" -m hypernet.train --config=configs/digits_hyper.py --workdir="$work/job" \
    > "$work/job.log" 2>&1 || true
  job=$("$py" -c "import json, sys
try:
  m = json.load(open(sys.argv[1]))
  print(f\"{100 * m['accuracy']:.2f} % / {m['loss']:.5f}\")
except Exception as e:
  print('failed: see', sys.argv[2])" "$work/job/final_metrics.json" "$work/job.log")
  # pytest's summary line ("178 passed, 2 skipped"), without its time.
  summary() { grep -E "^=* ?[0-9]+ (passed|failed|error)" "$1" | tail -n 1 |
              sed -E 's/ in [0-9.]+s.*//; s/, [0-9]+ warnings?//; s/=//g; s/^ //'; }
  "$py" -m pytest -q -p no:cacheprovider -m compat_subset > "$work/subset.log" 2>&1 || true
  "$py" -m pytest -q -p no:cacheprovider -m "not compat_subset" tests/test_compat.py \
    tests/test_second_order.py > "$work/rest.log" 2>&1 || true
  subset=$(summary "$work/subset.log")
  rest=$(summary "$work/rest.log")
  for log in subset rest; do  # Failures are kept for reading.
    if grep -qE "^FAILED|^ERROR" "$work/$log.log"; then
      cp "$work/$log.log" "${out%.md}-$kind-$log.log"
    fi
  done
  echo "| $kind | $versions | $job | $subset | $rest |" | tee -a "$out"
  rm -rf "$work"
done
