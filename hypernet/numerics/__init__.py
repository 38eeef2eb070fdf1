"""The numerics behind the functional call (implementation; nothing here is needed to use
hypernet): exact second-order normalisation moments (:mod:`.second_order`), TensorFlow's
fused BatchNorm kernel with exact second derivatives (:mod:`.fused_norm`), plain bias
additions for the meta-learners on CPU (:mod:`.plain_bias`), the fused BatchNorm -> ReLU
-> max-pool CPU kernel and its C++ source (:mod:`.norm_relu_pool`, ``kernels/``), and the
device facts that switch them (:mod:`.devices`), and every private TensorFlow / Keras hook
they rely on, each checked at first use (:mod:`.compat`). The lowest layer: it imports only
TensorFlow and Keras."""
