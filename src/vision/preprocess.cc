#include "vision/preprocess.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "vision/resize.h"
#include "vision/smart_resize.h"

namespace vls {
namespace {

std::string ImageName(size_t i) { return "image " + std::to_string(i); }

Status CheckConfig(const ImageProcessorConfig& cfg) {
  if (cfg.patch_size < 1 || cfg.patch_size > kMaxPatchSize || cfg.temporal_patch_size < 1 ||
      cfg.temporal_patch_size > kMaxTemporalPatchSize || cfg.merge_size < 1 ||
      cfg.merge_size > kMaxMergeSize) {
    return InvalidArgument("image processor config: patch_size " + std::to_string(cfg.patch_size) +
                           ", temporal_patch_size " + std::to_string(cfg.temporal_patch_size) +
                           ", merge_size " + std::to_string(cfg.merge_size) +
                           " outside the bounds ParseImageProcessorConfig enforces");
  }
  return Status::Ok();
}

Status CheckImage(const image::RgbImage& im, size_t index) {
  if (im.width < 1 || im.height < 1 ||
      im.pixels.size() != 3 * static_cast<size_t>(im.width) * static_cast<size_t>(im.height)) {
    return InvalidArgument(ImageName(index) + ": " + std::to_string(im.width) + "x" +
                           std::to_string(im.height) + " pixels with " +
                           std::to_string(im.pixels.size()) +
                           " bytes: need width, height >= 1 and 3 bytes per pixel");
  }
  return Status::Ok();
}

// Per-channel affine map x -> (x - sub) / div or x * mul, in the float ops the fast processor
// runs (header: step 2).
struct Normalizer {
  enum class Kind { kNone, kRescale, kNormalize } kind = Kind::kNone;
  std::array<float, 3> sub{};
  std::array<float, 3> div{};
  float mul = 1.0f;

  explicit Normalizer(const ImageProcessorConfig& cfg) {
    if (cfg.do_normalize) {
      kind = Kind::kNormalize;
      // torch.tensor(mean) * (1.0 / rescale_factor): a float32 tensor times a Python float,
      // which torch rounds to float32 first.
      const float inv = cfg.do_rescale ? static_cast<float>(1.0 / cfg.rescale_factor) : 1.0f;
      for (int c = 0; c < 3; ++c) {
        sub[c] = cfg.do_rescale ? cfg.image_mean[c] * inv : cfg.image_mean[c];
        div[c] = cfg.do_rescale ? cfg.image_std[c] * inv : cfg.image_std[c];
      }
    } else if (cfg.do_rescale) {
      kind = Kind::kRescale;
      mul = static_cast<float>(cfg.rescale_factor);
    }
  }

  float operator()(uint8_t v, int c) const {
    const float x = v;
    switch (kind) {
      case Kind::kNormalize: {
        const float centred = x - sub[c];
        return centred / div[c];
      }
      case Kind::kRescale: return x * mul;
      case Kind::kNone: break;
    }
    return x;
  }
};

// Writes one resized, still image's patches: [h·w, cols] rows in merge-window order.
void Patchify(const image::RgbImage& im, const ImageProcessorConfig& cfg, const GridThw& g,
              float* out) {
  const Normalizer norm(cfg);
  const int p = cfg.patch_size;
  const int m = cfg.merge_size;
  const int tp = cfg.temporal_patch_size;
  const int64_t plane = static_cast<int64_t>(p) * p;  // one (c, t) block of a row
  const int64_t cols = 3 * tp * plane;
  int64_t row = 0;
  for (int bh = 0; bh < g.h / m; ++bh) {
    for (int bw = 0; bw < g.w / m; ++bw) {
      for (int ih = 0; ih < m; ++ih) {
        for (int iw = 0; iw < m; ++iw, ++row) {
          float* dst = out + row * cols;
          const int y0 = (bh * m + ih) * p;
          const int x0 = (bw * m + iw) * p;
          for (int c = 0; c < 3; ++c) {
            float* block = dst + static_cast<int64_t>(c) * tp * plane;  // t = 0
            for (int py = 0; py < p; ++py) {
              for (int px = 0; px < p; ++px) {
                block[py * p + px] = norm(im.At(y0 + py, x0 + px, c), c);
              }
            }
            for (int t = 1; t < tp; ++t) {  // the still frame repeated
              std::copy(block, block + plane, block + t * plane);
            }
          }
        }
      }
    }
  }
}

}  // namespace

StatusOr<std::pair<int, int>> ResizedImageSize(int height, int width,
                                               const ImageProcessorConfig& cfg) {
  VLS_RETURN_IF_ERROR(CheckConfig(cfg));
  if (cfg.do_resize) {
    return SmartResize(height, width, cfg.factor(), cfg.min_pixels, cfg.max_pixels);
  }
  if (height < 1 || width < 1 || height % cfg.factor() != 0 || width % cfg.factor() != 0) {
    return InvalidArgument("image of " + std::to_string(height) + "x" + std::to_string(width) +
                           " (height x width) pixels: with do_resize false both sides must be "
                           "positive multiples of patch_size * merge_size = " +
                           std::to_string(cfg.factor()));
  }
  return std::pair<int, int>(height, width);
}

StatusOr<GridThw> ImageGridThw(int height, int width, const ImageProcessorConfig& cfg) {
  VLS_ASSIGN_OR_RETURN(auto size, ResizedImageSize(height, width, cfg));
  const int gh = size.first / cfg.patch_size;
  const int gw = size.second / cfg.patch_size;
  if (gh > kMaxGridSide || gw > kMaxGridSide) {
    return InvalidArgument("image of " + std::to_string(height) + "x" + std::to_string(width) +
                           " pixels resizes to a patch grid of " + std::to_string(gh) + "x" +
                           std::to_string(gw) + ", over kMaxGridSide (" +
                           std::to_string(kMaxGridSide) + ")");
  }
  GridThw g{1, gh, gw};
  VLS_RETURN_IF_ERROR(ValidateGridThw(g, cfg.merge_size, "image grid"));
  return g;
}

int64_t ImageTokens(const GridThw& grid, const ImageProcessorConfig& cfg) {
  return MergedTokens(grid, cfg.merge_size);
}

StatusOr<PixelValues> PreprocessImages(std::span<const image::RgbImage> images,
                                       const ImageProcessorConfig& cfg, ThreadPool* pool,
                                       int64_t max_elements) {
  VLS_RETURN_IF_ERROR(CheckConfig(cfg));
  PixelValues pv;
  pv.cols = 3 * static_cast<int64_t>(cfg.temporal_patch_size) * cfg.patch_size * cfg.patch_size;
  // First the sizes, so that nothing is resized or allocated for a batch that cannot fit.
  for (size_t i = 0; i < images.size(); ++i) {
    VLS_RETURN_IF_ERROR(CheckImage(images[i], i));
    auto grid = ImageGridThw(images[i].height, images[i].width, cfg);
    if (!grid.ok()) return grid.status().WithContext(ImageName(i));
    pv.grids.push_back(*grid);
    const int64_t patches = static_cast<int64_t>(grid->h) * grid->w;  // < 2^30
    if (patches > (max_elements / pv.cols) - pv.rows) {
      return InvalidArgument(ImageName(i) + ": the images' pixel_values would pass " +
                             std::to_string(max_elements) + " floats");
    }
    pv.rows += patches;
  }
  pv.data.resize(static_cast<size_t>(pv.rows * pv.cols));
  int64_t row = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const GridThw& g = pv.grids[i];
    const int rh = g.h * cfg.patch_size;
    const int rw = g.w * cfg.patch_size;
    const image::RgbImage& in = images[i];
    float* out = pv.data.data() + row * pv.cols;
    if (rh == in.height && rw == in.width) {
      Patchify(in, cfg, g, out);
    } else {
      Patchify(ResizeBicubicAntialias(in, rh, rw, pool), cfg, g, out);
    }
    row += static_cast<int64_t>(g.h) * g.w;
  }
  return pv;
}

}  // namespace vls
