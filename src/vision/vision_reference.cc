// VisionModel::ReferenceEncode: the vision tower in plain scalar loops over the checkpoint's
// own weights (widened to f32), written from docs/contracts.md §C.1 / §D.2 without the fast path's
// helpers. Values are f32; dot products, LayerNorm statistics and softmax sums accumulate in
// double. It is the oracle the fast path is tested against, not a production path.
#include <algorithm>
#include <cmath>
#include <new>

#include "kernels/kernels.h"
#include "vision/vision_model.h"

namespace vls {
namespace {

std::vector<float> Widen(const kernels::Matrix& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) kernels::LoadRow(m, r, out.data() + r * m.cols);
  return out;
}

// y[M, N] = x[M, K] · Wᵀ + b.
std::vector<float> Linear(const std::vector<float>& x, int64_t M, const VisionRawLinear& l) {
  const std::vector<float> w = WidenVisionWeight(l), b = Widen(l.b);
  const int64_t N = l.w.rows, K = l.w.cols;
  std::vector<float> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += static_cast<double>(x[static_cast<size_t>(m * K + k)]) *
               w[static_cast<size_t>(n * K + k)];
      }
      y[static_cast<size_t>(m * N + n)] = static_cast<float>(acc + b[static_cast<size_t>(n)]);
    }
  }
  return y;
}

// LayerNorm over rows of n values (eps 1e-6, biased variance).
std::vector<float> LayerNorm(const std::vector<float>& x, int64_t n, const VisionRawNorm& norm) {
  const std::vector<float> w = Widen(norm.w), b = Widen(norm.b);
  std::vector<float> y(x.size());
  const auto rows = static_cast<int64_t>(x.size()) / n;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const double inv = 1.0 / std::sqrt(var + 1e-6);
    for (int64_t i = 0; i < n; ++i) {
      y[static_cast<size_t>(r * n + i)] = static_cast<float>(
          (xr[i] - mean) * inv * w[static_cast<size_t>(i)] + b[static_cast<size_t>(i)]);
    }
  }
  return y;
}

// fc2(GELU_erf(fc1(z))) for z [Nv, m²·Dv].
std::vector<float> MergerMlp(const std::vector<float>& z, int64_t nv, const VisionRawMerger& m) {
  std::vector<float> h = Linear(z, nv, m.fc1);
  for (float& v : h) v = static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  return Linear(h, nv, m.fc2);
}

}  // namespace

StatusOr<VisionOutput> VisionModel::ReferenceEncode(std::span<const float> pixel_values,
                                                    int64_t rows, std::span<const GridThw> grids,
                                                    VisionDiagnostics* diagnostics) const {
  VLS_ASSIGN_OR_RETURN(const int64_t nv,
                       Validate(pixel_values, rows, grids, diagnostics != nullptr));
  VisionOutput out;
  out.tokens = nv;
  if (diagnostics != nullptr) *diagnostics = VisionDiagnostics{};
  if (nv == 0) return out;
  try {
    const VisionConfig& c = cfg_;
    const int64_t np = rows, Dv = c.hidden, hd = c.head_dim(), m = c.spatial_merge_size;
    const int64_t G = c.pos_grid_side();

    // Patch embedding (Conv3d with kernel = stride = the patch, i.e. a Linear over the row).
    std::vector<float> x =
        Linear(std::vector<float>(pixel_values.begin(), pixel_values.end()), np, raw_.patch);

    // Each row's full-resolution (row, col), its segment [seg_begin, seg_end) and positions.
    std::vector<int64_t> prow(static_cast<size_t>(np)), pcol(static_cast<size_t>(np));
    std::vector<int64_t> seg_begin(static_cast<size_t>(np)), seg_end(static_cast<size_t>(np));
    std::vector<float> pos(static_cast<size_t>(np * Dv));
    const std::vector<float> table = Widen(raw_.pos);
    int64_t i = 0;
    for (const GridThw& g : grids) {
      for (int t = 0; t < g.t; ++t) {
        const int64_t begin = i, end = i + int64_t{g.h} * g.w;
        for (int64_t bh = 0; bh < g.h / m; ++bh) {
          for (int64_t bw = 0; bw < g.w / m; ++bw) {
            for (int64_t ih = 0; ih < m; ++ih) {
              for (int64_t iw = 0; iw < m; ++iw, ++i) {
                const int64_t r = bh * m + ih, col = bw * m + iw;
                prow[static_cast<size_t>(i)] = r;
                pcol[static_cast<size_t>(i)] = col;
                seg_begin[static_cast<size_t>(i)] = begin;
                seg_end[static_cast<size_t>(i)] = end;
                // Bilinear, align_corners: grid coordinate r·(G−1)/(h−1).
                const double fy = g.h > 1 ? static_cast<double>(r * (G - 1)) / (g.h - 1) : 0.0;
                const double fx = g.w > 1 ? static_cast<double>(col * (G - 1)) / (g.w - 1) : 0.0;
                const auto y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
                const int64_t y1 = std::min(y0 + 1, G - 1), x1 = std::min(x0 + 1, G - 1);
                const double dy = fy - y0, dx = fx - x0;
                const int64_t idx[4] = {y0 * G + x0, y0 * G + x1, y1 * G + x0, y1 * G + x1};
                const float wt[4] = {
                    static_cast<float>((1 - dy) * (1 - dx)), static_cast<float>((1 - dy) * dx),
                    static_cast<float>(dy * (1 - dx)), static_cast<float>(dy * dx)};
                for (int64_t d = 0; d < Dv; ++d) {
                  float s = 0;
                  for (int q = 0; q < 4; ++q)
                    s += wt[q] * table[static_cast<size_t>(idx[q] * Dv + d)];
                  pos[static_cast<size_t>(i * Dv + d)] = s;
                }
              }
            }
          }
        }
      }
    }
    if (diagnostics != nullptr) {
      diagnostics->patch_embeds = x;
      diagnostics->pos_embeds = pos;
    }
    for (size_t k = 0; k < x.size(); ++k) x[k] += pos[k];

    // 2-D rotary cos/sin per row [Np, hd/2]: rows then cols over hd/4 frequencies each.
    const int64_t quarter = hd / 4, half = hd / 2;
    std::vector<float> rc(static_cast<size_t>(np * half)), rs(rc.size());
    for (int64_t r = 0; r < np; ++r) {
      for (int64_t f = 0; f < half; ++f) {
        const double inv =
            std::pow(10000.0, -static_cast<double>(2 * (f % quarter)) / static_cast<double>(half));
        const double p = static_cast<double>(f < quarter ? prow[static_cast<size_t>(r)]
                                                         : pcol[static_cast<size_t>(r)]);
        rc[static_cast<size_t>(r * half + f)] = static_cast<float>(std::cos(p * inv));
        rs[static_cast<size_t>(r * half + f)] = static_cast<float>(std::sin(p * inv));
      }
    }
    const auto rotate = [&](float* v, int64_t r) {  // rotate_half convention, in place
      for (int64_t f = 0; f < half; ++f) {
        const float co = rc[static_cast<size_t>(r * half + f)];
        const float si = rs[static_cast<size_t>(r * half + f)];
        const float a = v[f], b = v[f + half];
        v[f] = a * co - b * si;
        v[f + half] = b * co + a * si;
      }
    };

    const int64_t heads = c.heads, Md = c.merged_dim(), O = c.out_hidden;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    out.embeds.assign(static_cast<size_t>(nv * O), 0.0f);
    out.deepstack.assign(c.deepstack_visual_indexes.size() * static_cast<size_t>(nv * O), 0.0f);
    for (int j = 0; j < c.depth; ++j) {
      const VisionRawBlock& blk = raw_.blocks[static_cast<size_t>(j)];
      // Attention: qkv as [Np, 3, heads, hd].
      std::vector<float> qkv = Linear(LayerNorm(x, Dv, blk.norm1), np, blk.qkv);
      for (int64_t r = 0; r < np; ++r) {
        for (int64_t h = 0; h < heads; ++h) {
          rotate(qkv.data() + r * 3 * Dv + h * hd, r);
          rotate(qkv.data() + r * 3 * Dv + Dv + h * hd, r);
        }
      }
      std::vector<float> attn(static_cast<size_t>(np * Dv));
      std::vector<double> p;
      for (int64_t r = 0; r < np; ++r) {
        const int64_t a = seg_begin[static_cast<size_t>(r)], e = seg_end[static_cast<size_t>(r)];
        p.assign(static_cast<size_t>(e - a), 0.0);
        for (int64_t h = 0; h < heads; ++h) {
          const float* q = qkv.data() + r * 3 * Dv + h * hd;
          double mx = -INFINITY, sum = 0;
          for (int64_t s = a; s < e; ++s) {
            const float* k = qkv.data() + s * 3 * Dv + Dv + h * hd;
            double dot = 0;
            for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * k[d];
            p[static_cast<size_t>(s - a)] = dot * scale;
            mx = std::max(mx, dot * scale);
          }
          for (double& v : p) sum += (v = std::exp(v - mx));
          for (int64_t d = 0; d < hd; ++d) {
            double acc = 0;
            for (int64_t s = a; s < e; ++s) {
              acc += p[static_cast<size_t>(s - a)] *
                     qkv[static_cast<size_t>(s * 3 * Dv + 2 * Dv + h * hd + d)];
            }
            attn[static_cast<size_t>(r * Dv + h * hd + d)] = static_cast<float>(acc / sum);
          }
        }
      }
      const std::vector<float> proj = Linear(attn, np, blk.proj);
      for (size_t k = 0; k < x.size(); ++k) x[k] += proj[k];
      // MLP with the tanh GELU.
      std::vector<float> hmid = Linear(LayerNorm(x, Dv, blk.norm2), np, blk.fc1);
      for (float& v : hmid) {
        const double u = v;
        v = static_cast<float>(
            0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u))));
      }
      const std::vector<float> mlp = Linear(hmid, np, blk.fc2);
      for (size_t k = 0; k < x.size(); ++k) x[k] += mlp[k];
      if (diagnostics != nullptr) diagnostics->blocks.push_back(x);
      for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k) {
        if (c.deepstack_visual_indexes[k] != j) continue;
        // Post-shuffle norm: LayerNorm over each window's m² rows side by side.
        const std::vector<float> f =
            MergerMlp(LayerNorm(x, Md, raw_.deepstack[k].norm), nv, raw_.deepstack[k]);
        std::copy(f.begin(), f.end(), out.deepstack.begin() + static_cast<int64_t>(k) * nv * O);
      }
    }
    // Main merger: LayerNorm per patch over Dv, then the windows side by side.
    out.embeds = MergerMlp(LayerNorm(x, Dv, raw_.merger.norm), nv, raw_.merger);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory in the reference vision encoder");
  }
  return out;
}

}  // namespace vls
