// Test-only: decodes a clip with src/video and writes what tests/video/pyav_compare.py compares
// with PyAV. Usage:
//   video_frames_dump CLIP OUT_DIR [INDEX ...]
// writes OUT_DIR/info.json (ProbeVideo's VideoInfo, or {"error": "..."}) and, for the given
// indices, OUT_DIR/frame_<index>.rgb (raw RGB24, rows top to bottom) with each frame's size in
// info.json's "frames_out". Exit status 0 when ProbeVideo and DecodeFrames succeed, 1 otherwise
// (the error is in info.json and on stderr).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "video/video_decode.h"

namespace {

bool WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: video_frames_dump CLIP OUT_DIR [INDEX ...]\n");
    return 2;
  }
  const std::string clip = argv[1];
  const std::string out = argv[2];
  std::vector<int64_t> indices;
  for (int i = 3; i < argc; ++i) indices.push_back(std::strtoll(argv[i], nullptr, 10));
  std::ifstream in(clip, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  nlohmann::json j;
  auto info = vls::video::ProbeVideo(bytes, clip);
  if (!info.ok()) {
    j["error"] = info.status().ToString();
  } else {
    j["frames"] = info->frames;
    j["fps"] = info->fps;
    j["duration_s"] = info->duration_s;
    j["width"] = info->width;
    j["height"] = info->height;
    j["coded_width"] = info->coded_width;
    j["coded_height"] = info->coded_height;
    j["rotation"] = info->rotation;
    j["container"] = info->container;
    j["codec"] = info->codec;
    j["streams"] = info->streams;
    j["video_stream"] = info->video_stream;
    auto frames = vls::video::DecodeFrames(bytes, clip, indices);
    if (!frames.ok()) {
      j["error"] = frames.status().ToString();
    } else {
      j["frames_out"] = nlohmann::json::array();
      for (size_t i = 0; i < frames->size(); ++i) {
        const vls::image::RgbImage& f = (*frames)[i];
        j["frames_out"].push_back(
            {{"index", indices[i]}, {"width", f.width}, {"height", f.height}});
        const std::string path = out + "/frame_" + std::to_string(indices[i]) + ".rgb";
        if (!WriteFile(path, std::string(f.pixels.begin(), f.pixels.end()))) {
          std::fprintf(stderr, "cannot write %s\n", path.c_str());
          return 1;
        }
      }
    }
  }
  if (!WriteFile(out + "/info.json", j.dump(2) + "\n")) {
    std::fprintf(stderr, "cannot write %s/info.json\n", out.c_str());
    return 1;
  }
  if (j.contains("error")) {
    std::fprintf(stderr, "%s\n", j["error"].get<std::string>().c_str());
    return 1;
  }
  return 0;
}
