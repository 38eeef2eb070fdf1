"""benchmarks/gpu_check.py runs on a machine without a GPU: its correctness section
compares CPU float32 and XLA second derivatives with float64, the GPU rows say why they
are skipped, every other row is measured (tiny), and the tables list every row."""
import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_check.py"
MAML = "MAML meta-gradient, conv-BN-ReLU-max-pool"
HVP = "Hessian-vector product, conv-LayerNorm"


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_with_its_gpu_rows_skipped(tmp_path):
  out = tmp_path / "rows.json"
  proc = subprocess.run(
      [sys.executable, str(SCRIPT), "--cpu_only", "--cpu_steps=4", f"--json={out}"],
      capture_output=True, text=True, timeout=900, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads(out.read_text())
  assert results["gpus"] == [] and results["tensorflow"] and results["total_s"] > 0

  # Correctness: real errors of CPU float32 (graph, XLA) against float64.
  checks = {(r["check"], r["mode"]): r for r in results["correctness"]}
  for case in (MAML, HVP):
    calibration = checks[(case, "CPU float32 (calibration)")]
    # float32 rounding is there (nonzero) and small (float32's unit roundoff is 6e-8).
    assert 1e-9 < calibration["rel_error"] < 1e-5, calibration
    assert calibration["tolerance"] == 1e-4 and calibration["result"] == "PASS"
  xla = checks[(HVP, "CPU float32, XLA")]
  assert 1e-9 < xla["rel_error"] < 1e-5 and xla["result"] == "PASS", xla
  assert checks[(MAML, "CPU float32, XLA")]["result"].startswith("skipped (CPU: XLA")
  readme = results["correctness"][-1]
  assert readme["check"] == "README job accuracy" and readme["result"] == "not compared"
  # The canaries of the private hooks the check's functional calls used, each passed.
  assert {"moments", "tape_query"} <= set(results["canaries"]), results["canaries"]
  assert all(v is None for v in results["canaries"].values()), results["canaries"]
  assert "canaries: " in proc.stdout

  rows = results["rows"]
  skipped = [r for r in rows if r["result"] == "skipped"]
  measured = [r for r in rows if r["result"] != "skipped"]
  gpu_rows = [r for r in skipped if r["note"] == "--cpu_only: GPU row"]
  one_xla = [r for r in skipped if r["note"] == "CPU (tiny): one XLA setting per step"]
  assert len(gpu_rows) + len(one_xla) == len(skipped), skipped
  # GPU rows: mixed precision (2 policies x 2 steps x XLA off/on), MirroredStrategy
  # against one device for both steps, peak memory.
  assert len(gpu_rows) == 8 + 4 + 1
  assert {r["dtype"] for r in gpu_rows if r["dtype"]} == {"mixed_bfloat16", "mixed_float16",
                                                          "float32"}
  assert [(r["row"], r["xla"]) for r in one_xla] == [("hypernetwork step", "off"),
                                                     ("MAML meta-step", "on")]
  assert [r["row"] for r in measured] == ["README job (digits_hyper)", "hypernetwork step",
                                          "MAML meta-step"]
  job = measured[0]
  assert job["note"] == "4 steps (tiny: CPU)" and job["xla"] == "off"
  accuracy = float(job["result"].split()[1])
  assert 0.0 <= accuracy <= 1.0
  for r in measured[1:]:
    assert r["dtype"] == "float32" and r["peak_gpu_mb"] is None
    assert float(r["result"].split()[0]) > 0 and r["result"].endswith("steps/s")
  # The XLA column is what the Trainer chose: on for the hypernetwork step, off for MAML.
  assert [r["xla"] for r in measured[1:]] == ["on", "off"]
  checks_table = proc.stdout[proc.stdout.index("| check |"):]
  assert checks_table.count("\n|") >= len(results["correctness"]) + 1
  table = proc.stdout[proc.stdout.index("| row |"):]
  assert table.count("\n|") == len(rows) + 1  # header rule + one line per row


def test_a_wrong_reference_is_reported_as_fail():
  """The check judges the numbers it computed: a float64 reference 1% off makes every
  judged mode FAIL, with an error near 1e-2."""
  spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
  gpu_check = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(gpu_check)
  rows = gpu_check.second_order_check([], reference_error=1e-2, cases=[HVP])
  assert [r["mode"] for r in rows] == ["CPU float32 (calibration)", "CPU float32, XLA"]
  for r in rows:
    assert r["result"] == "FAIL" and r["rel_error"] == pytest.approx(1e-2 / 1.01, rel=1e-3)
  assert gpu_check.readme_accuracy_check(0.9700, True, False)["result"] == "FLAG"
  assert gpu_check.readme_accuracy_check(0.9800, True, False)["result"] == "PASS"
