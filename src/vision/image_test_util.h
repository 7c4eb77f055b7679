// Synthetic RGB images for the preprocessing tests.
#ifndef VLSTACK_VISION_IMAGE_TEST_UTIL_H_
#define VLSTACK_VISION_IMAGE_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>

#include "image/image.h"

namespace vls::testing {

// An h x w image whose pixel (y, x) channel c is fn(y, x, c).
inline image::RgbImage MakeImage(int h, int w, uint8_t (*fn)(int y, int x, int c)) {
  image::RgbImage im;
  im.height = h;
  im.width = w;
  im.pixels.resize(static_cast<size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) im.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] = fn(y, x, c);
    }
  }
  return im;
}

}  // namespace vls::testing

#endif  // VLSTACK_VISION_IMAGE_TEST_UTIL_H_
