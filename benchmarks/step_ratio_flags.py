"""step_ratio.py's flags, in a module without TensorFlow: step_breakdown.py adopts them as
its own, and its ``--help`` lists them without loading TensorFlow and PyTorch."""
from absl import flags

flags.DEFINE_integer("batch_size", 128, "Examples per step.")
flags.DEFINE_integer("steps", 50, "Steps per timed call.")
flags.DEFINE_integer("repeats", 5, "Interleaved timed rounds (medians are reported).")
flags.DEFINE_bool("jit", False, "jit_compile the steps (XLA).")
flags.DEFINE_bool("malloc_keep", False, "glibc's malloc keeps freed memory for reuse "
                  "(torch_reference.keep_freed_memory): PyTorch's tensors stop page-faulting "
                  "on fresh memory. Process-wide, so the TF variants run with it too.")
flags.DEFINE_bool("accelerate_meta", False, "Also time the hypernetwork step with the "
                  "meta-learners' accelerations, as functional_call(..., accelerate='meta') "
                  "runs it: on CPU each BatchNorm -> ReLU -> 2x2 max-pool block as one kernel "
                  "(--nobatch_norm: each conv -> bias -> ReLU -> 2x2 max-pool block pooled "
                  "first) and plain bias adds (hypernet.numerics.accel), with the fused "
                  "blocks alone, and with both and hn.FusedAdam (Adam as one kernel a "
                  "variable).")
flags.DEFINE_bool("batch_norm", None, "BatchNorm after each conv of the target (default: "
                  "as configs/fashion_mnist_hyper.py, which has it).")
