"""The fused BatchNorm -> ReLU -> max-pool kernel built for each instruction set: what
the compiler makes of it, and which builds this CPU can run.

The kernel (``hypernet/numerics/kernels/norm_relu_pool.cc``) is portable C++ whose loops
the compiler vectorises (``#pragma omp simd``) for the target options it is built with
(``HYPERNET_KERNEL_ARCH``, default ``-march=native``), so the meta-step's speed depends on
the CPU it was built for. This script compiles each variant (``-c``, nothing cached) and
prints per variant: whether it compiled and in how long, the instruction sets its code may
use (the compiler's predefined macros), the loops vectorised with their vector widths
(``-fopt-info-vec-optimized``) and whether this CPU can run it. Variants named
``zen4`` and ``sapphirerapids`` build for the two CPUs of docs/performance.md's rows
where this compiler knows them (``-march=znver4`` needs g++ >= 12.3 or 13; older ones
get Zen 3 tuning with Zen 4's AVX-512 extensions: the same instruction sets, not the
same scheduling).

What this tells without the CPU: that a build compiles, which loops get vectors of which
width. What it does not: speed (time a variant on a CPU that runs it with
``python benchmarks/meta_bench.py ... --kernel_archs 'native;-march=x86-64-v3'``);
values are checked against the portable build by ``tests/test_kernel_variants.py`` on
every variant the CPU runs.

    python benchmarks/kernel_variants.py [--variants portable,avx2,avx512,zen4,native]
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

ZEN4_ISA = ("-mavx512f -mavx512cd -mavx512bw -mavx512dq -mavx512vl -mavx512ifma "
            "-mavx512vbmi -mavx512vbmi2 -mavx512vnni -mavx512bitalg -mavx512vpopcntdq "
            "-mavx512bf16 -mgfni -mvaes -mvpclmulqdq")
VARIANTS = collections.OrderedDict([
    ("portable", "-march=x86-64-v2"),
    ("avx2", "-march=x86-64-v3"),
    ("avx512", "-march=x86-64-v4"),
    ("zen4", "-march=znver4"),
    ("sapphirerapids", "-march=sapphirerapids -mno-avx512fp16"),
    ("native", "-march=native"),
])


def _knows(compiler: str, arch: str) -> bool:
  done = subprocess.run([compiler, *arch.split(), "-E", "-x", "c++", os.devnull],
                        capture_output=True, text=True, check=False)
  return done.returncode == 0


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--variants", default=",".join(VARIANTS),
                      help=f"comma-separated, of {', '.join(VARIANTS)}")
  args = parser.parse_args()
  from hypernet.numerics import norm_relu_pool  # pylint: disable=g-import-not-at-top
  unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
  if unknown:
    raise SystemExit(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
  cpu = norm_relu_pool.cpu_extensions()
  report = norm_relu_pool.build_report()
  print(f"CPU: {report['cpu'] or '?'}")
  compiler = norm_relu_pool.compile_command(os.devnull, ["-march=native"])[0]
  print(f"compiler: {subprocess.run([compiler, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
  print(f"{'variant':15s} {'compiled':>8s} {'s':>5s} {'runs here':>9s} {'vector loops (bytes: count)':28s} "
        "instruction sets / target options")
  for name in args.variants.split(","):
    arch = VARIANTS[name]
    if name == "zen4" and not _knows(compiler, arch):
      arch = "-march=znver3 " + ZEN4_ISA  # g++ < 12.3: Zen 4's instruction sets.
    with tempfile.TemporaryDirectory() as tmp:
      cmd = norm_relu_pool.compile_command(os.path.join(tmp, "k.o"), arch.split(),
                                           vectorizer_report=True)
      t0 = time.perf_counter()
      done = subprocess.run(cmd, capture_output=True, text=True, check=False)
      seconds = time.perf_counter() - t0
    own = [l for l in done.stderr.splitlines() if "norm_relu_pool.cc" in l]
    widths = collections.Counter(
        int(m.group(1)) for l in own for m in [re.search(r"using (\d+) byte vectors", l)] if m)
    isa = norm_relu_pool.target_isa(arch.split()) or []
    runs = set(isa) <= cpu if cpu else "?"
    loops = ", ".join(f"{b}: {n}" for b, n in sorted(widths.items())) or "-"
    status = "yes" if done.returncode == 0 else "FAILED"
    print(f"{name:15s} {status:>8s} {seconds:5.1f} {str(runs):>9s} {loops:28s} "
          f"{' '.join(isa) or '?'} / {arch}")
    if done.returncode != 0:
      errors = [l for l in done.stderr.splitlines() if "error" in l.lower()]
      print(f"{'':15s} {(errors or done.stderr.splitlines() or ['?'])[0][:160]}")


if __name__ == "__main__":
  main()
