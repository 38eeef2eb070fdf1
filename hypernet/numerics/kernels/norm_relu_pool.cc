// Training-mode BatchNorm -> ReLU -> 2x2 max-pool as one CPU kernel, with its gradient
// and the gradient of that gradient (hypernet/numerics/norm_relu_pool.py says why and how).
//
// Per channel c, with batch moments mean_c, inv_std_c = 1 / sqrt(var_c + eps) over all
// N * H * W values of x (NHWC), z = gamma_c * (x - mean_c) * inv_std_c + beta_c and
// relu(z) are monotone in x: increasing when gamma_c >= 0, decreasing when gamma_c < 0.
// So max-pooling relu(z) picks the window's largest x (smallest when gamma_c < 0), and
// the block is computed on the selected values only: the normalisation, the ReLU and
// their gradients touch a quarter of the tensor.
//
// Ops (T = float or double; sums in T about the first pixel, flushed into double every
// 16 rows; deterministic: fixed blocks).
// `shift` (the bias of the convolution before the BatchNorm) is not read: the
// normalisation removes it. It is an input so that its gradient (zero through y) exists.
//   HypernetNormReluPool(x, gamma, beta, shift) -> y [N, H/2, W/2, C], mean [C],
//       variance [C] (biased), inv_std [C], selection uint8 [N, H/2, W/2, C] (which of
//       the window's 4 values, row-major, was picked), selected [N, H/2, W/2, C] (the
//       picked x)
//   HypernetNormReluPoolGrad(dy, x, gamma, y, mean, inv_std, selection, selected)
//       -> dx, dgamma, dbeta
//   HypernetNormReluPoolGradGrad(ddx, ddgamma, ddbeta, dy, x, gamma, y, mean, inv_std,
//       selection, selected) -> d_dy, d_x, d_gamma (the derivation is in
//       norm_relu_pool.py)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace hypernet {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

constexpr int64_t kBlocks = 32;  // fixed reduction blocks: same sums on any thread count

Status PooledShape(InferenceContext* c) {
  ShapeHandle x;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
  DimensionHandle h, w;
  TF_RETURN_IF_ERROR(c->Divide(c->Dim(x, 1), 2, /*evenly_divisible=*/false, &h));
  TF_RETURN_IF_ERROR(c->Divide(c->Dim(x, 2), 2, /*evenly_divisible=*/false, &w));
  ShapeHandle pooled = c->MakeShape({c->Dim(x, 0), h, w, c->Dim(x, 3)});
  ShapeHandle channels = c->Vector(c->Dim(x, 3));
  c->set_output(0, pooled);
  for (int i = 1; i < 4; ++i) c->set_output(i, channels);
  c->set_output(4, pooled);
  c->set_output(5, pooled);
  return Status();
}

REGISTER_OP("HypernetNormReluPool")
    .Input("x: T")
    .Input("gamma: T")
    .Input("beta: T")
    .Input("shift: T")
    .Output("y: T")
    .Output("mean: T")
    .Output("variance: T")
    .Output("inv_std: T")
    .Output("selection: uint8")
    .Output("selected: T")
    .Attr("T: {float, double}")
    .Attr("epsilon: float")
    .SetShapeFn(PooledShape);

REGISTER_OP("HypernetNormReluPoolGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: T")
    .Input("y: T")
    .Input("mean: T")
    .Input("inv_std: T")
    .Input("selection: uint8")
    .Input("selected: T")
    .Output("dx: T")
    .Output("dgamma: T")
    .Output("dbeta: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return Status();
    });

REGISTER_OP("HypernetNormReluPoolGradGrad")
    .Input("ddx: T")
    .Input("ddgamma: T")
    .Input("ddbeta: T")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: T")
    .Input("y: T")
    .Input("mean: T")
    .Input("inv_std: T")
    .Input("selection: uint8")
    .Input("selected: T")
    .Output("d_dy: T")
    .Output("d_x: T")
    .Output("d_gamma: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(3));
      c->set_output(1, c->input(4));
      c->set_output(2, c->input(5));
      return Status();
    });

// Geometry of one call, and the sharded loops over pixels.
struct Geometry {
  int64_t n, h, w, c, ph, pw;
  int64_t pixels() const { return n * h * w; }
  int64_t pooled() const { return n * ph * pw; }
  // Offset (in elements) of window value k (0..3) of pooled pixel q.
  int64_t window(int64_t q, int k) const {
    const int64_t b = q / (ph * pw), r = q % (ph * pw);
    const int64_t i = 2 * (r / pw) + (k >> 1), j = 2 * (r % pw) + (k & 1);
    return ((b * h + i) * w + j) * c;
  }
  // The offsets of pooled pixel q's 4 window values.
  void windows(int64_t q, int64_t off[4]) const {
    off[0] = window(q, 0);
    off[1] = off[0] + c;
    off[2] = off[0] + w * c;
    off[3] = off[2] + c;
  }
};

// Window value k (0..3) of a pooled element, without branches (vectorises).
template <typename T>
inline T Pick(uint8_t k, T v0, T v1, T v2, T v3) {
  const T kf = static_cast<T>(k);
  const T lo = kf == T(0) ? v0 : v1;
  const T hi = kf == T(2) ? v2 : v3;
  return kf < T(2) ? lo : hi;
}

// Calls fn(row) for every pixel of x outside all pooling windows (the last row / column
// when H / W is odd), in parallel.
template <typename Fn>
void ForRestPixels(OpKernelContext* ctx, const Geometry& g, Fn fn);

template <typename Fn>
void ParallelRows(OpKernelContext* ctx, int64_t rows, int64_t cost_per_row, Fn fn) {
  auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  ::tensorflow::Shard(threads->num_threads, threads->workers, rows, cost_per_row,
                      [&](int64_t begin, int64_t end) { fn(begin, end); });
}

// Per-channel sums over `rows` rows: fn(row, acc) adds row's terms to acc[0 .. width)
// in T, flushed into double every kFlush rows (vectorised, and accurate: float sums
// over at most kFlush terms), in kBlocks fixed blocks added in block order.
constexpr int64_t kFlush = 16;

template <typename T, typename Fn>
std::vector<double> BlockSums(OpKernelContext* ctx, int64_t rows, int64_t width,
                              int64_t cost_per_row, Fn fn) {
  const int64_t blocks = std::max<int64_t>(1, std::min(rows, kBlocks));
  std::vector<double> partial(blocks * width, 0.0);
  auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
  ::tensorflow::Shard(
      threads->num_threads, threads->workers, blocks, cost_per_row * (rows / blocks + 1),
      [&](int64_t b0, int64_t b1) {
        std::vector<T> local(width);
        for (int64_t b = b0; b < b1; ++b) {
          double* __restrict acc = partial.data() + b * width;
          const int64_t r1 = rows * (b + 1) / blocks;
          for (int64_t r = rows * b / blocks; r < r1; r += kFlush) {
            std::fill(local.begin(), local.end(), T(0));
            const int64_t end = std::min(r + kFlush, r1);
            for (int64_t rr = r; rr < end; ++rr) fn(rr, local.data());
            const T* __restrict l = local.data();
            for (int64_t i = 0; i < width; ++i) acc[i] += l[i];
          }
        }
      });
  std::vector<double> total(width, 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < width; ++i) total[i] += partial[b * width + i];
  return total;
}

Status GetGeometry(const Tensor& x, Geometry* g) {
  if (x.dims() != 4)
    return ::tensorflow::errors::InvalidArgument("x must be [N, H, W, C]; got rank ", x.dims());
  g->n = x.dim_size(0);
  g->h = x.dim_size(1);
  g->w = x.dim_size(2);
  g->c = x.dim_size(3);
  g->ph = g->h / 2;
  g->pw = g->w / 2;
  if (g->ph == 0 || g->pw == 0)
    return ::tensorflow::errors::InvalidArgument("x's H and W must be at least 2; got ",
                                                 x.shape().DebugString());
  return Status();
}

// The pointers to pooled pixel q's 4 window rows of a full-size tensor.
template <typename P>
struct Window {
  P v[4];
  Window(P base, const Geometry& g, int64_t q) {
    int64_t off[4];
    g.windows(q, off);
    for (int k = 0; k < 4; ++k) v[k] = base + off[k];
  }
};

template <typename T>
class NormReluPoolOp : public OpKernel {
 public:
  explicit NormReluPoolOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x_t = ctx->input(0);
    Geometry g;
    OP_REQUIRES_OK(ctx, GetGeometry(x_t, &g));
    const int64_t C = g.c;
    OP_REQUIRES(ctx, ctx->input(1).NumElements() == C && ctx->input(2).NumElements() == C &&
                    ctx->input(3).NumElements() == C,
                ::tensorflow::errors::InvalidArgument("gamma, beta and shift must have C values"));
    const T* x = x_t.flat<T>().data();
    const T* gamma = ctx->input(1).flat<T>().data();
    const T* beta = ctx->input(2).flat<T>().data();
    Tensor *y_t, *mean_t, *var_t, *inv_t, *sel_t, *xs_t;
    TensorShape pooled({g.n, g.ph, g.pw, C});
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, pooled, &y_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({C}), &mean_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({C}), &var_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({C}), &inv_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, pooled, &sel_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(5, pooled, &xs_t));
    T* y = y_t->flat<T>().data();
    T* mean = mean_t->flat<T>().data();
    T* var = var_t->flat<T>().data();
    T* inv = inv_t->flat<T>().data();
    uint8_t* sel = sel_t->flat<uint8_t>().data();
    T* selected = xs_t->flat<T>().data();

    // The sign of gamma decides, before any moment is known, whether the block's max-pool
    // picks a window's largest x (gamma >= 0) or its smallest: so one pass over x takes
    // the moments' sums and the selection, and a pass over the pooled quarter normalises.
    // (gamma == 0: sign 0, every value ties and the first one is picked, as TensorFlow's
    // max-pool sends the gradient of a tied window to its first value.)
    std::vector<T> sign(C);
    for (int64_t c = 0; c < C; ++c) sign[c] = gamma[c] < T(0) ? T(-1) : gamma[c] > T(0) ? T(1) : T(0);
    const T* __restrict sg = sign.data();
    // Sums of x - K and (x - K)^2 with K the first pixel's values: with K near the mean,
    // no cancellation when a channel's mean is large against its spread (E[x^2] - mean^2
    // would lose the variance entirely there).
    std::vector<T> origin(C, T(0));
    if (g.pixels() > 0) std::copy(x, x + C, origin.begin());
    const T* __restrict kp0 = origin.data();
    std::vector<double> sums =
        BlockSums<T>(ctx, g.pooled(), 2 * C, 16 * C, [&](int64_t q, T* __restrict acc) {
          const Window<const T*> w(x, g, q);
          const T *__restrict w0 = w.v[0], *__restrict w1 = w.v[1], *__restrict w2 = w.v[2],
                  *__restrict w3 = w.v[3];
          T* __restrict xq = selected + q * C;
          uint8_t* __restrict sq = sel + q * C;
          const int64_t cn = C;
#pragma omp simd
          for (int64_t c = 0; c < cn; ++c) {
            const T x0 = w0[c], x1 = w1[c], x2 = w2[c], x3 = w3[c];
            const T d0 = x0 - kp0[c], d1 = x1 - kp0[c], d2 = x2 - kp0[c], d3 = x3 - kp0[c];
            acc[c] += (d0 + d1) + (d2 + d3);
            acc[cn + c] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
            // The largest of sign * x (the first one on ties, in row-major order), as the
            // max-pool after an increasing (sign +1) or decreasing (sign -1) map picks it.
            const T s = sg[c];
            const T v0 = s * x0, v1 = s * x1, v2 = s * x2, v3 = s * x3;
            const T m01 = v1 > v0 ? v1 : v0, m23 = v3 > v2 ? v3 : v2;
            const int32_t k01 = v1 > v0 ? 1 : 0, k23 = v3 > v2 ? 3 : 2;
            const T x01 = v1 > v0 ? x1 : x0, x23 = v3 > v2 ? x3 : x2;
            xq[c] = m23 > m01 ? x23 : x01;
            sq[c] = static_cast<uint8_t>(m23 > m01 ? k23 : k01);
          }
        });
    if (g.h != 2 * g.ph || g.w != 2 * g.pw) {  // the pixels outside every window
      std::vector<double> rest =
          BlockSums<T>(ctx, g.pixels(), 2 * C, 2 * C, [&](int64_t r, T* __restrict acc) {
            const int64_t i = (r / g.w) % g.h, j = r % g.w;
            if (i < 2 * g.ph && j < 2 * g.pw) return;
            const T* __restrict xr = x + r * C;
            const int64_t cn = C;
#pragma omp simd
            for (int64_t c = 0; c < cn; ++c) {
              const T d = xr[c] - kp0[c];
              acc[c] += d;
              acc[cn + c] += d * d;
            }
          });
      for (int64_t i = 0; i < 2 * C; ++i) sums[i] += rest[i];
    }
    const int64_t M = g.pixels();
    std::vector<T> scale(C);
    for (int64_t c = 0; c < C; ++c) {
      const double m = M > 0 ? sums[c] / M : 0.0;  // mean of x - K
      const double v = M > 0 ? std::max(sums[C + c] / M - m * m, 0.0) : 0.0;
      mean[c] = static_cast<T>(static_cast<double>(origin[c]) + m);
      var[c] = static_cast<T>(v);
      inv[c] = static_cast<T>(1.0 / std::sqrt(v + static_cast<double>(epsilon_)));
      scale[c] = gamma[c] * inv[c];
    }
    const T* __restrict sc = scale.data();
    const T* __restrict mp = mean;
    const T* __restrict bt = beta;
    ParallelRows(ctx, g.pooled(), 3 * C, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const T* __restrict xq = selected + q * C;
        T* __restrict yq = y + q * C;
        const int64_t cn = C;
#pragma omp simd
        for (int64_t c = 0; c < cn; ++c) {
          const T z = (xq[c] - mp[c]) * sc[c] + bt[c];  // centred first: no cancellation
          yq[c] = z > T(0) ? z : T(0);
        }
      }
    });
  }

 private:
  float epsilon_;
};

template <typename Fn>
void ForRestPixels(OpKernelContext* ctx, const Geometry& g, Fn fn) {
  if (g.h == 2 * g.ph && g.w == 2 * g.pw) return;
  ParallelRows(ctx, g.pixels(), 2 * g.c, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = (r / g.w) % g.h, j = r % g.w;
      if (i >= 2 * g.ph || j >= 2 * g.pw) fn(r);
    }
  });
}

template <typename T>
class NormReluPoolGradOp : public OpKernel {
 public:
  explicit NormReluPoolGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x_t = ctx->input(1);
    Geometry g;
    OP_REQUIRES_OK(ctx, GetGeometry(x_t, &g));
    const int64_t C = g.c;
    OP_REQUIRES(ctx, ctx->input(0).NumElements() == g.pooled() * C,
                ::tensorflow::errors::InvalidArgument("dy must be [N, H/2, W/2, C]"));
    const T* dy = ctx->input(0).flat<T>().data();
    const T* x = x_t.flat<T>().data();
    const T* gamma = ctx->input(2).flat<T>().data();
    const T* y = ctx->input(3).flat<T>().data();
    const T* mean = ctx->input(4).flat<T>().data();
    const T* inv = ctx->input(5).flat<T>().data();
    const uint8_t* sel = ctx->input(6).flat<uint8_t>().data();
    const T* selected = ctx->input(7).flat<T>().data();
    Tensor *dx_t, *dgamma_t, *dbeta_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x_t.shape(), &dx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({C}), &dgamma_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({C}), &dbeta_t));
    T* dx = dx_t->flat<T>().data();

    // g = dy where the ReLU passed; dbeta = sum g, dgamma = sum g * xhat(selected)
    // = r * sum g (x(selected) - mean).
    std::vector<double> sums =
        BlockSums<T>(ctx, g.pooled(), 2 * C, 8 * C, [&](int64_t q, T* __restrict acc) {
          const T* __restrict dyq = dy + q * C;
          const T* __restrict yq = y + q * C;
          const T* __restrict xq = selected + q * C;
          const T* __restrict mp = mean;
          const int64_t cn = C;
#pragma omp simd
          for (int64_t c = 0; c < cn; ++c) {
            const T gv = yq[c] > T(0) ? dyq[c] : T(0);
            const T xs = xq[c];
            acc[c] += gv;
            acc[cn + c] += gv * (xs - mp[c]);
          }
        });
    const double M = static_cast<double>(g.pixels());
    std::vector<T> a(C), b(C), k(C);
    for (int64_t c = 0; c < C; ++c) {
      const double dgamma = sums[C + c] * inv[c];
      dbeta_t->flat<T>()(c) = static_cast<T>(sums[c]);
      dgamma_t->flat<T>()(c) = static_cast<T>(dgamma);
      const double kc = static_cast<double>(gamma[c]) * inv[c];
      // dx = k (G - dbeta / M - xhat dgamma / M) = a (x - mean) + b + k G.
      a[c] = static_cast<T>(-kc * dgamma / M * inv[c]);
      b[c] = static_cast<T>(-kc * sums[c] / M);
      k[c] = static_cast<T>(kc);
    }
    const T* __restrict ap = a.data();
    const T* __restrict bp = b.data();
    const T* __restrict kp = k.data();
    const T* __restrict mp = mean;
    // One pass over the windows (the scattered G added where selected) ...
    ParallelRows(ctx, g.pooled(), 16 * C, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const T* __restrict dyq = dy + q * C;
        const T* __restrict yq = y + q * C;
        const uint8_t* __restrict sq = sel + q * C;
        const Window<const T*> xw(x, g, q);
        const Window<T*> dw(dx, g, q);
        for (int kk = 0; kk < 4; ++kk) {
          const T* __restrict xr = xw.v[kk];
          T* __restrict out = dw.v[kk];
          const int64_t cn = C;
#pragma omp simd
          for (int64_t c = 0; c < cn; ++c) {
            // Two selects on 32-bit lanes, no &&: AVX2 vectorises this only without the
            // control flow of a short-circuit between a float and a uint8 comparison.
            const int32_t s = sq[c];
            const T gy = yq[c] > T(0) ? dyq[c] : T(0);
            const T gv = s == kk ? gy : T(0);
            out[c] = ap[c] * (xr[c] - mp[c]) + bp[c] + kp[c] * gv;
          }
        }
      }
    });
    // ... and over the pixels outside every window.
    ForRestPixels(ctx, g, [&](int64_t r) {
      const int64_t cn = C;
#pragma omp simd
      for (int64_t c = 0; c < cn; ++c) dx[r * C + c] = ap[c] * (x[r * C + c] - mp[c]) + bp[c];
    });
  }
};

template <typename T>
class NormReluPoolGradGradOp : public OpKernel {
 public:
  explicit NormReluPoolGradGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x_t = ctx->input(4);
    Geometry g;
    OP_REQUIRES_OK(ctx, GetGeometry(x_t, &g));
    const int64_t C = g.c;
    OP_REQUIRES(ctx, ctx->input(0).NumElements() == g.pixels() * C,
                ::tensorflow::errors::InvalidArgument("ddx must have x's shape"));
    const T* ddx = ctx->input(0).flat<T>().data();
    const T* ddgamma = ctx->input(1).flat<T>().data();
    const T* ddbeta = ctx->input(2).flat<T>().data();
    const T* dy = ctx->input(3).flat<T>().data();
    const T* x = x_t.flat<T>().data();
    const T* gamma = ctx->input(5).flat<T>().data();
    const T* y = ctx->input(6).flat<T>().data();
    const T* mean = ctx->input(7).flat<T>().data();
    const T* inv = ctx->input(8).flat<T>().data();
    const uint8_t* sel = ctx->input(9).flat<uint8_t>().data();
    const T* selected = ctx->input(10).flat<T>().data();
    Tensor *ddy_t, *dx_t, *dgamma_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(3).shape(), &ddy_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x_t.shape(), &dx_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({C}), &dgamma_t));
    T* d_dy = ddy_t->flat<T>().data();
    T* d_x = dx_t->flat<T>().data();
    T* d_gamma = dgamma_t->flat<T>().data();

    // Full-size sums: A = sum ddx, S2 = sum ddx (x - mean).
    std::vector<double> full =
        BlockSums<T>(ctx, g.pixels(), 2 * C, 4 * C, [&](int64_t r, T* __restrict acc) {
          const T* __restrict dr = ddx + r * C;
          const T* __restrict xr = x + r * C;
          const T* __restrict mp = mean;
          const int64_t cn = C;
#pragma omp simd
          for (int64_t c = 0; c < cn; ++c) {
            const T d = dr[c];
            acc[c] += d;
            acc[cn + c] += d * (xr[c] - mp[c]);
          }
        });
    // Pooled sums over g = dy [y > 0]: dbeta = sum g, S1 = sum g u(sel), C0 = sum g ddx(sel).
    std::vector<double> pooled =
        BlockSums<T>(ctx, g.pooled(), 3 * C, 10 * C, [&](int64_t q, T* __restrict acc) {
          const T* __restrict dyq = dy + q * C;
          const T* __restrict yq = y + q * C;
          const uint8_t* __restrict sq = sel + q * C;
          const T* __restrict xq = selected + q * C;
          const Window<const T*> dw(ddx, g, q);
          const T *__restrict d0 = dw.v[0], *__restrict d1 = dw.v[1], *__restrict d2 = dw.v[2],
                  *__restrict d3 = dw.v[3], *__restrict mp = mean;
          const int64_t cn = C;
#pragma omp simd
          for (int64_t c = 0; c < cn; ++c) {
            const T gt = yq[c] > T(0) ? dyq[c] : T(0);
            const uint8_t k = sq[c];
            const T xt = xq[c];
            const T dt = Pick(k, d0[c], d1[c], d2[c], d3[c]);
            acc[c] += gt;
            acc[cn + c] += gt * (xt - mp[c]);
            acc[2 * cn + c] += gt * dt;
          }
        });
    const double M = static_cast<double>(g.pixels());
    std::vector<T> kk(C), A(C), B(C), K1(C), K2(C), K3(C), K4(C), mu(C), r(C), ddg(C), ddb(C);
    const int64_t cn = C;
#pragma omp simd
    for (int64_t c = 0; c < cn; ++c) {
      const double gm = gamma[c], rc = inv[c], r3 = rc * rc * rc;
      const double a = full[c] / M, s2 = full[C + c];
      const double dbeta = pooled[c], s1 = pooled[C + c], c0 = pooled[2 * C + c];
      const double dgamma = rc * s1, b = rc * s2 / M;
      const double dd_gamma = ddgamma[c];
      d_gamma[c] = static_cast<T>(rc * (c0 - dbeta * a - dgamma * b));
      const double P = gm * c0 - gm * dbeta * a + dd_gamma * s1 - 3.0 * gm / M * rc * rc * s1 * s2;
      const double Q = -gm / M * r3 * s2 + dd_gamma * rc;
      const double R = -gm / M * r3 * s1;
      kk[c] = static_cast<T>(gm * rc);
      A[c] = static_cast<T>(a);
      B[c] = static_cast<T>(b);
      K1[c] = static_cast<T>(-r3 / M * P);
      K2[c] = static_cast<T>(Q);
      K3[c] = static_cast<T>(R);
      K4[c] = static_cast<T>(-Q * dbeta / M - R * a);
      mu[c] = mean[c];
      r[c] = inv[c];
      ddg[c] = ddgamma[c];
      ddb[c] = ddbeta[c];
    }
    // d_dy = [y > 0] (k (ddx(sel) - A - xhat(sel) B) + ddgamma xhat(sel) + ddbeta), and
    // d_x = K1 (x - mean) + K3 ddx + K4, plus K2 g at the selected positions: one pass
    // over the windows, one over the pixels outside them.
    ParallelRows(ctx, g.pooled(), 24 * C, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const T* __restrict dyq = dy + q * C;
        const T* __restrict yq = y + q * C;
        const uint8_t* __restrict sq = sel + q * C;
        T* __restrict ddyq = d_dy + q * C;
        const T* __restrict xq = selected + q * C;
        const Window<const T*> xw(x, g, q);
        const Window<const T*> dw(ddx, g, q);
        const Window<T*> ow(d_x, g, q);
        const T *__restrict x0 = xw.v[0], *__restrict x1 = xw.v[1], *__restrict x2 = xw.v[2],
                *__restrict x3 = xw.v[3];
        const T *__restrict d0 = dw.v[0], *__restrict d1 = dw.v[1], *__restrict d2 = dw.v[2],
                *__restrict d3 = dw.v[3];
        const T *__restrict mup = mu.data(), *__restrict rp = r.data(), *__restrict kp = kk.data(),
                *__restrict Ap = A.data(), *__restrict Bp = B.data(), *__restrict gp = ddg.data(),
                *__restrict bp = ddb.data();
        const int64_t cn = C;
#pragma omp simd
        for (int64_t c = 0; c < cn; ++c) {
          const uint8_t k = sq[c];
          const T xh = (xq[c] - mup[c]) * rp[c];
          const T ds = Pick(k, d0[c], d1[c], d2[c], d3[c]);
          const T v = kp[c] * (ds - Ap[c] - xh * Bp[c]) + gp[c] * xh + bp[c];
          ddyq[c] = yq[c] > T(0) ? v : T(0);
        }
        for (int w = 0; w < 4; ++w) {
          const T* __restrict xr = xw.v[w];
          const T* __restrict dr = dw.v[w];
          T* __restrict out = ow.v[w];
          const int64_t cn = C;
#pragma omp simd
          for (int64_t c = 0; c < cn; ++c) {
            const int32_t s = sq[c];  // As in the gradient's scatter: vectorised on AVX2.
            const T gy = yq[c] > T(0) ? dyq[c] : T(0);
            const T gv = s == w ? gy : T(0);
            out[c] = K1[c] * (xr[c] - mu[c]) + K3[c] * dr[c] + K4[c] + K2[c] * gv;
          }
        }
      }
    });
    ForRestPixels(ctx, g, [&](int64_t rr) {
      const int64_t cn = C;
#pragma omp simd
      for (int64_t c = 0; c < cn; ++c)
        d_x[rr * C + c] = K1[c] * (x[rr * C + c] - mu[c]) + K3[c] * ddx[rr * C + c] + K4[c];
    });
  }
};

#define REGISTER(T)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                           \
      Name("HypernetNormReluPool").Device(DEVICE_CPU).TypeConstraint<T>("T"),        \
      NormReluPoolOp<T>);                                                            \
  REGISTER_KERNEL_BUILDER(                                                           \
      Name("HypernetNormReluPoolGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),    \
      NormReluPoolGradOp<T>);                                                        \
  REGISTER_KERNEL_BUILDER(                                                           \
      Name("HypernetNormReluPoolGradGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
      NormReluPoolGradGradOp<T>);
REGISTER(float)
REGISTER(double)
#undef REGISTER

}  // namespace hypernet
