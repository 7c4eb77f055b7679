// Frames as PyAV 10 gives them to transformers. PyAV's container.decode(video=0) reads every
// packet with av_read_frame, sends those of the first video stream to the decoder and takes
// every frame it returns, then flushes it at the end; enumerate numbers those frames. Its
// to_ndarray(format="rgb24") is VideoReformatter.reformat with no colorspace and BILINEAR:
// sws_getCachedContext(w, h, frame format, w, h, RGB24, SWS_BILINEAR) and sws_scale into a
// frame from av_image_alloc(..., align 16) (both colorspaces DEFAULT, so no
// sws_setColorspaceDetails: the frame's colour metadata is not consulted, only what swscale
// infers from the pixel format, e.g. full range for yuvj420p). We make the same calls over the
// same libraries, so the bytes are PyAV's (tests/video/pyav_compare.py checks every pixel).
#include "video/video_decode.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "video/container.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace vls::video {
namespace {

using internal::MemoryContainer;
using internal::Orientation;

struct CodecDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsDeleter {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

// The frame turned for display (ffmpeg's transpose / hflip / vflip, see container.h).
image::RgbImage Orient(image::RgbImage in, const Orientation& o) {
  if (!o.transpose && !o.mirror_x && !o.mirror_y) return in;
  const size_t w = static_cast<size_t>(in.width);
  const size_t h = static_cast<size_t>(in.height);
  image::RgbImage out;
  out.width = o.transpose ? in.height : in.width;
  out.height = o.transpose ? in.width : in.height;
  out.pixels.resize(in.pixels.size());
  const size_t ow = static_cast<size_t>(out.width);
  const size_t oh = static_cast<size_t>(out.height);
  for (size_t y = 0; y < oh; ++y) {
    for (size_t x = 0; x < ow; ++x) {
      size_t sx = o.transpose ? y : x;
      size_t sy = o.transpose ? x : y;
      if (o.mirror_x) sx = w - 1 - sx;
      if (o.mirror_y) sy = h - 1 - sy;
      std::memcpy(&out.pixels[(y * ow + x) * 3], &in.pixels[(sy * w + sx) * 3], 3);
    }
  }
  return out;
}

class FrameDecoder {
 public:
  // `collect`: the frames are kept (and bounded by max_output_bytes) for DecodeFrames; else
  // each goes to `sink` as it is decoded.
  FrameDecoder(MemoryContainer* c, std::span<const int64_t> indices,
               const std::function<bool()>& cancelled, const FrameSink* sink)
      : c_(c), label_(c->label()), indices_(indices), cancelled_(cancelled), sink_(sink) {}

  Status Run();
  std::vector<image::RgbImage> TakeFrames() { return std::move(out_); }

 private:
  Status OpenDecoder();
  // Sends one packet (null: flush) and takes every frame the decoder has.
  Status Feed(const AVPacket* packet);
  Status TakeFrame();
  StatusOr<image::RgbImage> ToRgb(const AVFrame* frame);
  bool done() const { return next_ == indices_.size(); }
  bool cancelled() const { return cancelled_ && cancelled_(); }

  MemoryContainer* c_;
  const std::string& label_;
  std::span<const int64_t> indices_;
  const std::function<bool()>& cancelled_;
  const FrameSink* sink_;  // null: collect into out_
  std::unique_ptr<AVCodecContext, CodecDeleter> codec_;
  std::unique_ptr<AVFrame, FrameDeleter> frame_{av_frame_alloc()};
  std::unique_ptr<SwsContext, SwsDeleter> sws_;
  std::vector<image::RgbImage> out_;
  size_t next_ = 0;      // the next index to return
  int64_t decoded_ = 0;  // frames the decoder returned so far
  int first_width_ = 0;
  int first_height_ = 0;
};

Status FrameDecoder::OpenDecoder() {
  const AVCodec* decoder = c_->decoder();
  codec_.reset(avcodec_alloc_context3(decoder));
  if (!codec_ || !frame_) return ResourceExhausted(label_ + ": out of memory for the decoder");
  const AVStream* st = c_->format()->streams[c_->info().video_stream];
  int err = avcodec_parameters_to_context(codec_.get(), st->codecpar);
  if (err < 0) return DataLoss(label_ + ": bad codec parameters: " + internal::AvErrorText(err));
  codec_->pkt_timebase = st->time_base;
  codec_->thread_count = 1;  // deterministic, and the engine owns the cores
  codec_->max_pixels = std::clamp<int64_t>(c_->limits().max_frame_pixels, 1, INT32_MAX);
  AVDictionary* options = nullptr;
  av_dict_set(&options, "codec_whitelist", MemoryContainer::DecoderWhitelist().c_str(), 0);
  err = avcodec_open2(codec_.get(), decoder, &options);
  av_dict_free(&options);
  if (err < 0) {
    return DataLoss(label_ + ": cannot open the " + c_->info().codec +
                    " decoder: " + internal::AvErrorText(err));
  }
  return Status::Ok();
}

StatusOr<image::RgbImage> FrameDecoder::ToRgb(const AVFrame* frame) {
  const int w = frame->width;
  const int h = frame->height;
  const auto format = static_cast<AVPixelFormat>(frame->format);
  sws_.reset(sws_getCachedContext(sws_.release(), w, h, format, w, h, AV_PIX_FMT_RGB24,
                                  SWS_BILINEAR, nullptr, nullptr, nullptr));
  if (!sws_) {
    const char* name = av_get_pix_fmt_name(format);
    return DataLoss(label_ + ": frame " + std::to_string(decoded_) + " has pixel format '" +
                    (name != nullptr ? name : "unknown") + "', which cannot be converted to RGB");
  }
  uint8_t* dst[4] = {};
  int dst_linesize[4] = {};
  if (av_image_alloc(dst, dst_linesize, w, h, AV_PIX_FMT_RGB24, 16) < 0) {
    return ResourceExhausted(label_ + ": out of memory for an RGB frame");
  }
  if (sws_scale(sws_.get(), frame->data, frame->linesize, 0, h, dst, dst_linesize) < 0) {
    av_freep(&dst[0]);
    return DataLoss(label_ + ": frame " + std::to_string(decoded_) + " cannot be converted to RGB");
  }
  image::RgbImage img;
  img.width = w;
  img.height = h;
  const size_t row = static_cast<size_t>(w) * 3;
  img.pixels.resize(row * static_cast<size_t>(h));
  for (size_t y = 0; y < static_cast<size_t>(h); ++y) {
    std::memcpy(&img.pixels[y * row], dst[0] + y * static_cast<size_t>(dst_linesize[0]), row);
  }
  av_freep(&dst[0]);
  return Orient(std::move(img), c_->orientation());
}

Status FrameDecoder::TakeFrame() {
  const VideoLimits& limits = c_->limits();
  const int64_t w = frame_->width;
  const int64_t h = frame_->height;
  const std::string where = label_ + ": frame " + std::to_string(decoded_) + " is " +
                            std::to_string(w) + "x" + std::to_string(h);
  if (w < 1 || h < 1 || w > limits.max_side || h > limits.max_side) {
    return InvalidArgument(where + ", outside max_side " + std::to_string(limits.max_side));
  }
  if (w * h > limits.max_frame_pixels) {
    return InvalidArgument(where + ", over max_frame_pixels " +
                           std::to_string(limits.max_frame_pixels));
  }
  if (decoded_ == 0) {
    first_width_ = static_cast<int>(w);
    first_height_ = static_cast<int>(h);
    // The output budget, now that the real size is known (collected frames only: a sink bounds
    // what it keeps).
    const int64_t bytes = w * h * 3;
    if (sink_ == nullptr &&
        static_cast<int64_t>(indices_.size()) > limits.max_output_bytes / bytes) {
      return InvalidArgument(label_ + ": " + std::to_string(indices_.size()) + " frames of " +
                             std::to_string(w) + "x" + std::to_string(h) +
                             " exceed max_output_bytes " + std::to_string(limits.max_output_bytes));
    }
  } else if (w != first_width_ || h != first_height_) {
    return InvalidArgument(where + " where frame 0 is " + std::to_string(first_width_) + "x" +
                           std::to_string(first_height_) +
                           " (a clip that changes size is not supported)");
  }
  if (!done() && indices_[next_] == decoded_) {
    VLS_ASSIGN_OR_RETURN(image::RgbImage img, ToRgb(frame_.get()));
    if (sink_ != nullptr) {
      VLS_RETURN_IF_ERROR((*sink_)(next_, std::move(img)));
    } else {
      out_.push_back(std::move(img));
    }
    ++next_;
  }
  ++decoded_;
  return Status::Ok();
}

Status FrameDecoder::Feed(const AVPacket* packet) {
  int err = avcodec_send_packet(codec_.get(), packet);
  if (err < 0 && err != AVERROR_EOF) {
    return DataLoss(label_ + ": the " + c_->info().codec + " decoder failed after frame " +
                    std::to_string(decoded_) + ": " + internal::AvErrorText(err));
  }
  while (!done()) {
    if (cancelled()) return Cancelled(label_ + ": cancelled");
    err = avcodec_receive_frame(codec_.get(), frame_.get());
    if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) break;
    if (err < 0) {
      return DataLoss(label_ + ": the " + c_->info().codec + " decoder failed after frame " +
                      std::to_string(decoded_) + ": " + internal::AvErrorText(err));
    }
    Status s = TakeFrame();
    av_frame_unref(frame_.get());
    VLS_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

Status FrameDecoder::Run() {
  VLS_RETURN_IF_ERROR(OpenDecoder());
  AVFormatContext* format = c_->format();
  const int stream = c_->info().video_stream;
  for (unsigned i = 0; i < format->nb_streams; ++i) {
    if (static_cast<int>(i) != stream) format->streams[i]->discard = AVDISCARD_ALL;
  }
  std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
  if (!packet) return ResourceExhausted(label_ + ": out of memory for a packet");
  if (sink_ == nullptr) out_.reserve(indices_.size());
  while (!done()) {
    if (cancelled()) return Cancelled(label_ + ": cancelled");
    const int err = av_read_frame(format, packet.get());
    if (err == AVERROR_EOF) {
      VLS_RETURN_IF_ERROR(Feed(nullptr));
      break;
    }
    if (err < 0) {
      if (cancelled()) return Cancelled(label_ + ": cancelled");
      return DataLoss(label_ + ": cannot read the packet after frame " + std::to_string(decoded_) +
                      ": " + internal::AvErrorText(err));
    }
    // An empty packet would put the decoder in draining mode: skipped.
    Status s =
        packet->stream_index == stream && packet->size > 0 ? Feed(packet.get()) : Status::Ok();
    av_packet_unref(packet.get());
    VLS_RETURN_IF_ERROR(s);
  }
  if (!done()) {
    return InvalidArgument(label_ + ": frame index " + std::to_string(indices_[next_]) +
                           " is past the last decodable frame (" + std::to_string(decoded_) +
                           " frames decoded, the last is " + std::to_string(decoded_ - 1) + ")");
  }
  return Status::Ok();
}

Status CheckIndices(const std::string& label, std::span<const int64_t> indices,
                    const VideoLimits& limits) {
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= limits.max_frames) {
      return InvalidArgument(label + ": frame index " + std::to_string(indices[i]) +
                             " is outside [0, max_frames " + std::to_string(limits.max_frames) +
                             ")");
    }
    if (i > 0 && indices[i] <= indices[i - 1]) {
      return InvalidArgument(label + ": frame indices must be strictly increasing (" +
                             std::to_string(indices[i - 1]) + " then " +
                             std::to_string(indices[i]) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<VideoInfo> ProbeVideo(std::span<const uint8_t> bytes, const std::string& label,
                               const VideoLimits& limits) {
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<MemoryContainer> c,
                       MemoryContainer::Open(bytes, label, limits, nullptr));
  if (!c->frames_declared()) VLS_RETURN_IF_ERROR(c->CountFrames());
  return c->info();
}

StatusOr<std::vector<image::RgbImage>> DecodeFrames(std::span<const uint8_t> bytes,
                                                    const std::string& label,
                                                    std::span<const int64_t> indices,
                                                    const VideoLimits& limits,
                                                    const std::function<bool()>& cancelled) {
  VLS_RETURN_IF_ERROR(CheckIndices(label, indices, limits));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<MemoryContainer> c,
                       MemoryContainer::Open(bytes, label, limits, cancelled));
  const VideoInfo& info = c->info();
  const int64_t frame_bytes = int64_t{info.coded_width} * info.coded_height * 3;
  if (static_cast<int64_t>(indices.size()) > limits.max_output_bytes / frame_bytes) {
    return InvalidArgument(label + ": " + std::to_string(indices.size()) + " frames of " +
                           std::to_string(info.coded_width) + "x" +
                           std::to_string(info.coded_height) + " exceed max_output_bytes " +
                           std::to_string(limits.max_output_bytes));
  }
  if (indices.empty()) return std::vector<image::RgbImage>{};
  FrameDecoder decoder(c.get(), indices, cancelled, nullptr);
  VLS_RETURN_IF_ERROR(decoder.Run());
  return decoder.TakeFrames();
}

Status DecodeFramesTo(std::span<const uint8_t> bytes, const std::string& label,
                      std::span<const int64_t> indices, const FrameSink& sink,
                      const VideoLimits& limits, const std::function<bool()>& cancelled) {
  VLS_RETURN_IF_ERROR(CheckIndices(label, indices, limits));
  VLS_ASSIGN_OR_RETURN(std::unique_ptr<MemoryContainer> c,
                       MemoryContainer::Open(bytes, label, limits, cancelled));
  if (indices.empty()) return Status::Ok();
  FrameDecoder decoder(c.get(), indices, cancelled, &sink);
  return decoder.Run();
}

}  // namespace vls::video
