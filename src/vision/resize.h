// Bicubic resizing with antialiasing, as Qwen2VLImageProcessorFast resizes (spec §D.3).
#ifndef VLSTACK_VISION_RESIZE_H_
#define VLSTACK_VISION_RESIZE_H_

#include "base/thread_pool.h"
#include "image/image.h"

namespace vls {

// Resizes `in` to out_height x out_width as torchvision computes
// F.resize(uint8 tensor [3, H, W], [out_height, out_width], InterpolationMode.BICUBIC,
// antialias=True) on the CPU with torch's float path (torchvision 0.14 / torch 1.13): the image
// goes to float32, torch's _upsample_bicubic2d_aa resamples it separably (the width first, then
// the height; Keys' cubic with a = -0.5, its support widened by the downscale factor, weights
// normalised per output pixel, align_corners=False, weights and sums in float32 rounded where
// torch's AVX2 build (Debian's) rounds them: fused multiply-adds in the filter and in the last
// (taps - 1) % 4 taps of each sum, separately rounded products before), and the result is
// clamped to [0, 255] and rounded half to even. A dimension whose size does not change is
// copied (torch's weights there are exactly 0 and 1). Measured against that torch, the result
// is bit-identical in every pixel the oracle test checks (tests/oracle/preprocess_ref.py);
// another torch build (another vectorizer width) may round a value near .5 the other way: one
// level in a few pixels in a million.
//
// torchvision >= 0.16 (transforms.v2, which transformers prefers when installed) resizes uint8
// bicubic images with torch's integer kernel instead (16-bit fixed-point weights); that differs
// from this by at most one level in a few pixels, below the tolerance the vision tower cares
// about.
//
// REQUIRES: in.width, in.height >= 1, in.pixels.size() == 3 * width * height, out_height and
// out_width >= 1 (callers size images through SmartResize). `pool` may be null (one thread).
// The fused multiply-adds use the CPU's FMA instruction when it has one, else std::fma; both
// give the same bits, and allow_fma_instruction = false forces the second (tests).
// Cost: O((out_w * in_h + out_h * out_w) * taps), taps = 4 * max(1, in/out) per axis.
image::RgbImage ResizeBicubicAntialias(const image::RgbImage& in, int out_height, int out_width,
                                       ThreadPool* pool = nullptr,
                                       bool allow_fma_instruction = true);

}  // namespace vls

#endif  // VLSTACK_VISION_RESIZE_H_
