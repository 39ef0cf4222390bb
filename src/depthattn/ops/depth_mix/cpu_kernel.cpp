// Depth mixing for CPU inference in one op (docs/method.md#the-operation); built on first use by cpu.py.
//
// Per row (b, h, t): the group-summed query's scores against each candidate's score key, scaled, plus the
// optional bias, a softmax (or the uniform rule), then each mixed state's weighted sum. Accumulates in float32
// (float64 for float64 inputs), as the reference in naive.py. Reads the candidates through their strides, so
// nothing is stacked; rows run in parallel only when there are many (prefill), so a decoding step stays on one
// thread. No backward: cpu.py sends anything that needs gradients to the compiled form.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace {

struct Strided {  // a (B, H, T, d) tensor's data and strides
  const void* data;
  int64_t s0, s1, s2, s3;
  explicit Strided(const at::Tensor& t)
      : data(t.data_ptr()), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
  template <typename T>
  const T* row(int64_t b, int64_t h, int64_t t) const {
    return static_cast<const T*>(data) + b * s0 + h * s1 + t * s2;
  }
};

template <typename scalar_t, typename acc_t>
void mix_rows(const at::Tensor& query, const std::vector<Strided>& keys, const std::vector<Strided>& states,
              double scale, const acc_t* bias, bool uniform, std::vector<at::Tensor>& out, at::Tensor& weights) {
  const int64_t B = query.size(0), Hq = query.size(1), T = query.size(2), D = query.size(3);
  const int64_t n = keys.size(), mixed = out.size(), Hkv = weights.size(1), G = Hq / Hkv;
  const Strided q(query);
  acc_t* w_data = weights.data_ptr<acc_t>();      // (B, Hkv, T, n), contiguous
  const int64_t rows = B * Hkv * T, grain = std::max<int64_t>(1, 16384 / (n * D * (G + mixed + 1)));

  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> dq(D), acc(D);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = r % T, h = (r / T) % Hkv, b = r / (T * Hkv);
      acc_t* w = w_data + r * n;
      if (uniform && !bias) {
        std::fill(w, w + n, acc_t(1) / acc_t(n));
      } else {
        if (uniform) {
          std::fill(w, w + n, acc_t(0));
        } else {
          std::fill(dq.begin(), dq.end(), acc_t(0));
          for (int64_t g = 0; g < G; ++g) {
            const scalar_t* qr = q.row<scalar_t>(b, h * G + g, t);
            for (int64_t e = 0; e < D; ++e) dq[e] += static_cast<acc_t>(qr[e * q.s3]);
          }
          for (int64_t j = 0; j < n; ++j) {
            const scalar_t* kr = keys[j].row<scalar_t>(b, h, t);
            acc_t s = 0;
            for (int64_t e = 0; e < D; ++e) s += dq[e] * static_cast<acc_t>(kr[e * keys[j].s3]);
            w[j] = s * static_cast<acc_t>(scale);
          }
        }
        if (bias) for (int64_t j = 0; j < n; ++j) w[j] += bias[j];
        const acc_t top = *std::max_element(w, w + n);
        acc_t total = 0;
        for (int64_t j = 0; j < n; ++j) total += (w[j] = std::exp(w[j] - top));
        for (int64_t j = 0; j < n; ++j) w[j] /= total;
      }
      for (int64_t m = 0; m < mixed; ++m) {
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t j = 0; j < n; ++j) {
          const Strided& s = states[m * n + j];
          const scalar_t* vr = s.row<scalar_t>(b, h, t);
          for (int64_t e = 0; e < D; ++e) acc[e] += w[j] * static_cast<acc_t>(vr[e * s.s3]);
        }
        scalar_t* o = out[m].data_ptr<scalar_t>() + r * D;  // (B, Hkv, T, D), contiguous
        for (int64_t e = 0; e < D; ++e) o[e] = static_cast<scalar_t>(acc[e]);
      }
    }
  });
}

// query (B, Hq, T, d); score_keys: n tensors (B, Hkv, T, d); states: the n candidates of each mixed state in turn
// (n or 2n tensors). Returns (m mixed states (B, Hkv, T, d), weights (B, Hkv, T, n) in the accumulation dtype).
std::tuple<std::vector<at::Tensor>, at::Tensor> depth_mix(const at::Tensor& query,
                                                          const std::vector<at::Tensor>& score_keys,
                                                          const std::vector<at::Tensor>& states, double scale,
                                             const std::optional<at::Tensor>& bias, bool uniform) {
  const int64_t n = score_keys.size();
  TORCH_CHECK(n > 0 && !states.empty() && states.size() % n == 0, "depth_mix: states must hold n per mixed state");
  TORCH_CHECK(query.dim() == 4, "depth_mix: query must be (B, Hq, T, d)");
  const auto& like = score_keys[0];
  TORCH_CHECK(query.size(1) % like.size(1) == 0, "depth_mix: query heads must be a multiple of the KV heads");
  for (const auto* list : {&score_keys, &states})
    for (const auto& t : *list)
      TORCH_CHECK(t.sizes() == like.sizes() && t.scalar_type() == query.scalar_type() && t.device().is_cpu(),
                  "depth_mix: every state must be a CPU tensor of the query's dtype and the same (B, Hkv, T, d)");
  const auto acc_type = query.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t mixed = states.size() / n;
  std::vector<at::Tensor> out;
  for (int64_t m = 0; m < mixed; ++m) out.push_back(at::empty(like.sizes(), query.options()));
  auto weights = at::empty({like.size(0), like.size(1), like.size(2), n}, query.options().dtype(acc_type));
  at::Tensor bias_acc;
  if (bias) {
    TORCH_CHECK(bias->numel() == n, "depth_mix: bias must hold one score per candidate");
    bias_acc = bias->to(acc_type).contiguous();
  }
  std::vector<Strided> key_rows, state_rows;
  for (const auto& t : score_keys) key_rows.emplace_back(t);
  for (const auto& t : states) state_rows.emplace_back(t);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, query.scalar_type(), "depth_mix", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    mix_rows<scalar_t, acc_t>(query, key_rows, state_rows, scale, bias ? bias_acc.data_ptr<acc_t>() : nullptr,
                              uniform, out, weights);
  });
  return {out, weights};
}

}  // namespace

// a plain Python function rather than a torch.ops operator: called once per layer in a decoding step, the
// dispatcher's extra microseconds showed in the step time
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("depth_mix", &depth_mix); }
