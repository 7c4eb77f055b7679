// Images -> pixel_values and image_grid_thw, as Qwen2VLImageProcessorFast computes them for
// Qwen3-VL (spec §D.3, §D.4).
#ifndef VLSTACK_VISION_PREPROCESS_H_
#define VLSTACK_VISION_PREPROCESS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "image/image.h"
#include "tensor/grid_thw.h"
#include "vision/image_processor_config.h"

namespace vls {

struct PixelValues {
  std::vector<float> data;     // [rows, cols]
  int64_t rows = 0;            // Σ t·h·w patches over the images
  int64_t cols = 0;            // 3 · temporal_patch_size · patch_size²
  std::vector<GridThw> grids;  // one per image, in patches: (1, H̄ / patch, W̄ / patch)
};

// Each image, in order:
//   1. do_resize: (H̄, W̄) = SmartResize(H, W, factor, min_pixels, max_pixels), then
//      ResizeBicubicAntialias when the size changes (an unchanged size is left untouched, as
//      torch's resize leaves it). Without do_resize the sides must already be multiples of
//      the factor.
//   2. rescale and normalise in float32 as the fast processor fuses them: with both on,
//      x' = (x − m) / s where m = f32(mean) · f32(1 / rescale_factor) and
//      s = f32(std) · f32(1 / rescale_factor), each op rounded to float; rescale alone
//      x' = x · f32(rescale_factor); normalise alone (x − mean) / std; neither: x.
//   3. the frame repeated to temporal_patch_size frames (a still image is grid t = 1);
//   4. patches in merge-window order (spec §D.4): rows ordered (t', bh, bw, ih, iw) where
//      patch row = bh · merge + ih, patch column = bw · merge + iw; features (c, t, py, px).
// Images are concatenated in order.
//
// InvalidArgument (naming the image index) for an empty or inconsistent RgbImage, for an
// image SmartResize refuses (aspect ratio over 200), for sides that are not multiples of the
// factor without do_resize, for a grid outside ValidateGridThw's bounds, or when the output
// would pass `max_elements` floats (the caller's memory budget; the default allows 2^31,
// 8 GiB). `pool` (may be null) parallelises the resize.
StatusOr<PixelValues> PreprocessImages(std::span<const image::RgbImage> images,
                                       const ImageProcessorConfig& cfg, ThreadPool* pool = nullptr,
                                       int64_t max_elements = int64_t{1} << 31);

// The size one image is resized to ((H, W) itself without do_resize): what PreprocessImages
// would produce, without touching pixels. Same errors.
StatusOr<std::pair<int, int>> ResizedImageSize(int height, int width,
                                               const ImageProcessorConfig& cfg);

// The patch grid of an image of height x width pixels, (1, H̄ / patch, W̄ / patch).
StatusOr<GridThw> ImageGridThw(int height, int width, const ImageProcessorConfig& cfg);

// LLM tokens an image of this grid becomes: t · h · w / merge² (= MergedTokens).
int64_t ImageTokens(const GridThw& grid, const ImageProcessorConfig& cfg);

}  // namespace vls

#endif  // VLSTACK_VISION_PREPROCESS_H_
