"""Side-by-side timing shared by the benchmarks: compiled windows of steps, timed in
interleaved rounds so that load from other jobs hits every variant alike."""
import statistics
import time
from typing import Callable, Dict, Tuple

import tensorflow as tf


def compiled_window(step: Callable[[], tf.Tensor]) -> Callable[[int], float]:
  """``run(n)``: ``n`` calls of ``step()`` (a scalar each) in one ``tf.function``
  (``tf.foldl``), returning their sum; traced on its first call."""
  loop = tf.function(lambda n: tf.foldl(lambda a, _: a + step(), tf.range(n),
                                        initializer=tf.constant(0.0)))
  return lambda n: loop(tf.constant(n)).numpy()


def interleaved(runs: Dict[str, Callable[[int], object]], steps: int, repeats: int
                ) -> Dict[str, Tuple[float, float, float]]:
  """``{name: run(n)}`` -> ``{name: (wall s/step, CPU s/step, warm-up s)}``: medians over
  ``repeats`` rounds of ``steps`` steps per variant, round ``r`` starting at the ``r``-th
  variant (A, B, C, then B, C, A, ...); the warm-up is the first call of ``run(2)``
  (tracing included). CPU time is the process's, all threads."""
  warmup, wall, cpu = {}, {k: [] for k in runs}, {k: [] for k in runs}
  for name, run in runs.items():
    t = time.perf_counter()
    run(2)
    warmup[name] = time.perf_counter() - t
  names = list(runs)
  for r in range(repeats):
    for k in range(len(names)):
      name = names[(r + k) % len(names)]
      t, c = time.perf_counter(), time.process_time()
      runs[name](steps)
      wall[name].append(time.perf_counter() - t)
      cpu[name].append(time.process_time() - c)
  return {k: (statistics.median(wall[k]) / steps, statistics.median(cpu[k]) / steps,
              warmup[k]) for k in names}
