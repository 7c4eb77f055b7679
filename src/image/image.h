// A decoded still image: 8-bit RGB, rows top to bottom, the form every later stage takes.
#ifndef VLSTACK_IMAGE_IMAGE_H_
#define VLSTACK_IMAGE_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vls::image {

struct RgbImage {
  int width = 0;                // W
  int height = 0;               // H
  std::vector<uint8_t> pixels;  // [H, W, 3] interleaved R, G, B

  uint8_t At(int y, int x, int c) const {
    return pixels[(static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) *
                      3 +
                  static_cast<size_t>(c)];
  }
};

}  // namespace vls::image

#endif  // VLSTACK_IMAGE_IMAGE_H_
