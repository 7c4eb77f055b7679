// The container from memory. FFmpeg gets a custom AVIOContext over the caller's bytes and nothing
// else: the probe picks the demuxer, which must be one we accept (format_whitelist holds the
// same list, as a second lock); io_open refuses every nested open, so an HLS playlist, a concat
// script, an image2 pattern or an MP4 data reference can never reach a file or the network
// (the first three are refused by name anyway). codec_whitelist keeps the stream probing of
// avformat_find_stream_info to the decoders we accept, each with one thread and max_pixels.
#include "video/container.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <string_view>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
}

namespace vls::video::internal {

struct MemoryContainer::Reader {
  const uint8_t* data;
  int64_t size;
  int64_t pos;
  const std::function<bool()>* cancelled;
};

namespace {

constexpr int kIoBufferBytes = 32 << 10;

// The demuxers we accept, by FFmpeg's name for them, and how errors name them.
constexpr std::array<std::string_view, 4> kContainers = {"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm",
                                                         "avi", "mpegts"};
constexpr const char* kFormatWhitelist = "mov,matroska,avi,mpegts";
constexpr const char* kContainersText = "mov/mp4, matroska/webm, avi, mpegts";

constexpr std::array<AVCodecID, 9> kCodecs = {
    AV_CODEC_ID_H264,  AV_CODEC_ID_HEVC,       AV_CODEC_ID_VP8,
    AV_CODEC_ID_VP9,   AV_CODEC_ID_AV1,        AV_CODEC_ID_MPEG4,
    AV_CODEC_ID_MJPEG, AV_CODEC_ID_MPEG1VIDEO, AV_CODEC_ID_MPEG2VIDEO};
constexpr const char* kCodecsText =
    "h264, hevc, vp8, vp9, av1, mpeg4, mjpeg, mpeg1video, mpeg2video";

// The error lines FFmpeg logged on this thread since ClearAvLog, "; "-joined, at most 1 KiB.
thread_local std::string t_av_errors;

// FFmpeg logs from the calling thread (one decoder thread, no protocol threads): error lines are
// kept for the Status, nothing is printed.
void QuietLog(void* avcl, int level, const char* fmt, va_list args) {
  if (level > AV_LOG_ERROR) return;
  char line[512];
  int print_prefix = 1;
  av_log_format_line2(avcl, level, fmt, args, line, sizeof(line), &print_prefix);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (t_av_errors.size() + text.size() > 1024) return;
  if (!t_av_errors.empty()) t_av_errors += "; ";
  t_av_errors += text;
}

void InstallQuietLog() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(&QuietLog); });
}

int ReadBytes(void* opaque, uint8_t* buf, int buf_size) {
  auto* r = static_cast<MemoryContainer::Reader*>(opaque);
  if (r->cancelled != nullptr && *r->cancelled && (*r->cancelled)()) return AVERROR_EXIT;
  const int64_t n = std::min<int64_t>(buf_size, r->size - r->pos);
  if (n <= 0) return AVERROR_EOF;
  std::memcpy(buf, r->data + r->pos, static_cast<size_t>(n));
  r->pos += n;
  return static_cast<int>(n);
}

// Offsets come from the file: checked against the span before any arithmetic can overflow.
int64_t SeekBytes(void* opaque, int64_t offset, int whence) {
  auto* r = static_cast<MemoryContainer::Reader*>(opaque);
  if ((whence & AVSEEK_SIZE) != 0) return r->size;
  int64_t base = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = r->pos; break;
    case SEEK_END: base = r->size; break;
    default: return AVERROR(EINVAL);
  }
  if (offset < -base || offset > r->size - base) return AVERROR(EINVAL);
  r->pos = base + offset;
  return r->pos;
}

int RefuseNestedOpen(AVFormatContext* /*s*/, AVIOContext** /*pb*/, const char* /*url*/,
                     int /*flags*/, AVDictionary** /*options*/) {
  return AVERROR(EPERM);
}

int Interrupted(void* opaque) {
  return static_cast<const MemoryContainer*>(opaque)->cancelled() ? 1 : 0;
}

std::string RationalText(AVRational q) {
  return std::to_string(q.num) + "/" + std::to_string(q.den);
}

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

std::string AvErrorText(int error) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(error, buf, sizeof(buf));
  return buf;
}

std::string AvLogErrors() { return t_av_errors; }
void ClearAvLog() { t_av_errors.clear(); }

Orientation OrientationFromMatrix(const int32_t matrix[9]) {
  // ffmpeg 5.1's get_rotation (cmdutils.c) and the filters ffmpeg_filter.c inserts for it.
  const double angle = av_display_rotation_get(matrix);
  if (!std::isfinite(angle)) return {};
  double theta = -std::round(angle);
  theta -= 360 * std::floor(theta / 360 + 0.9 / 360);
  Orientation o;
  if (std::fabs(theta - 90) < 1.0) {
    // transpose=clock, or cclock_flip for a mirrored matrix.
    o = matrix[3] > 0 ? Orientation{true, false, false, 90} : Orientation{true, false, true, 90};
  } else if (std::fabs(theta - 180) < 1.0) {
    o = Orientation{false, matrix[0] < 0, matrix[4] < 0, 180};
  } else if (std::fabs(theta - 270) < 1.0) {
    // transpose=cclock, or clock_flip for a mirrored matrix.
    o = matrix[3] < 0 ? Orientation{true, true, true, 270} : Orientation{true, true, false, 270};
  } else if (std::fabs(theta) < 1.0) {
    o.mirror_y = matrix[4] < 0;
  }
  return o;
}

const std::string& MemoryContainer::DecoderWhitelist() {
  static const std::string names = [] {
    std::string s;
    for (const AVCodecID id : kCodecs) {
      const AVCodec* codec = avcodec_find_decoder(id);
      if (codec == nullptr) continue;
      if (!s.empty()) s += ',';
      s += codec->name;
    }
    return s;
  }();
  return names;
}

MemoryContainer::MemoryContainer(std::span<const uint8_t> bytes, const std::string& label,
                                 const VideoLimits& limits, const std::function<bool()>& cancelled)
    : label_(label),
      limits_(limits),
      cancelled_(cancelled),
      reader_(new Reader{bytes.data(), static_cast<int64_t>(bytes.size()), 0, &cancelled_}) {}

MemoryContainer::~MemoryContainer() {
  avformat_close_input(&format_);  // AVFMT_FLAG_CUSTOM_IO: leaves io_ to us
  if (io_ != nullptr) {
    av_freep(&io_->buffer);  // FFmpeg may have replaced the buffer we gave it
    avio_context_free(&io_);
  }
}

StatusOr<std::unique_ptr<MemoryContainer>> MemoryContainer::Open(
    std::span<const uint8_t> bytes, const std::string& label, const VideoLimits& limits,
    const std::function<bool()>& cancelled) {
  if (bytes.empty()) return InvalidArgument(label + ": empty input (no video bytes)");
  if (bytes.size() > limits.max_bytes) {
    return InvalidArgument(label + ": " + std::to_string(bytes.size()) +
                           " bytes exceed max_bytes " + std::to_string(limits.max_bytes));
  }
  InstallQuietLog();
  ClearAvLog();
  std::unique_ptr<MemoryContainer> c(new MemoryContainer(bytes, label, limits, cancelled));
  VLS_RETURN_IF_ERROR(c->OpenInput());
  VLS_RETURN_IF_ERROR(c->CheckHeader());
  return c;
}

Status MemoryContainer::OpenInput() {
  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBufferBytes));
  if (buffer == nullptr) return ResourceExhausted(label_ + ": out of memory for the reader");
  io_ =
      avio_alloc_context(buffer, kIoBufferBytes, 0, reader_.get(), &ReadBytes, nullptr, &SeekBytes);
  if (io_ == nullptr) {
    av_free(buffer);
    return ResourceExhausted(label_ + ": out of memory for the reader");
  }
  // The kind of container, from its first bytes (never a file name): refused by name unless
  // accepted, before any demuxer reads a header.
  const AVInputFormat* input = nullptr;
  const int score = av_probe_input_buffer2(io_, &input, "", nullptr, 0, 0);
  if (score == AVERROR_EXIT && cancelled()) return Cancelled(label_ + ": cancelled");
  if (score < 0 || input == nullptr) {
    return InvalidArgument(label_ + ": not a video container (accepted: " + kContainersText + ")");
  }
  if (std::find(kContainers.begin(), kContainers.end(), std::string_view(input->name)) ==
      kContainers.end()) {
    return InvalidArgument(label_ + ": container '" + input->name +
                           "' is not supported (accepted: " + kContainersText + ")");
  }

  format_ = avformat_alloc_context();
  if (format_ == nullptr) return ResourceExhausted(label_ + ": out of memory for the demuxer");
  format_->pb = io_;
  format_->flags |= AVFMT_FLAG_CUSTOM_IO;
  format_->io_open = &RefuseNestedOpen;
  format_->interrupt_callback.callback = &Interrupted;
  format_->interrupt_callback.opaque = this;
  AVDictionary* options = nullptr;
  av_dict_set(&options, "format_whitelist", kFormatWhitelist, 0);
  av_dict_set(&options, "protocol_whitelist", "", 0);
  av_dict_set(&options, "codec_whitelist", DecoderWhitelist().c_str(), 0);
  av_dict_set_int(&options, "max_streams", std::max(limits_.max_streams, 1), 0);
  int err = avformat_open_input(&format_, nullptr, input, &options);  // frees format_ on failure
  av_dict_free(&options);
  const std::string container = input->name;
  if (err < 0) {
    if (cancelled()) return Cancelled(label_ + ": cancelled");
    const std::string log = AvLogErrors();
    if (log.find("max_streams") != std::string::npos) {
      return InvalidArgument(label_ + ": more streams than max_streams " +
                             std::to_string(limits_.max_streams));
    }
    return DataLoss(label_ + ": cannot read the " + container + " header: " + AvErrorText(err) +
                    (log.empty() ? "" : " (" + log + ")"));
  }
  if (format_->nb_streams > static_cast<unsigned>(std::max(limits_.max_streams, 0))) {
    return InvalidArgument(label_ + ": " + std::to_string(format_->nb_streams) +
                           " streams exceed max_streams " + std::to_string(limits_.max_streams));
  }

  // Stream probing may decode a few packets: one thread, no frame over max_frame_pixels.
  const int64_t max_pixels =
      std::clamp<int64_t>(limits_.max_frame_pixels, 1, std::numeric_limits<int>::max());
  std::vector<AVDictionary*> stream_options(format_->nb_streams, nullptr);
  for (AVDictionary*& d : stream_options) {
    av_dict_set(&d, "threads", "1", 0);
    av_dict_set_int(&d, "max_pixels", max_pixels, 0);
  }
  err = avformat_find_stream_info(format_, stream_options.data());
  for (AVDictionary*& d : stream_options) av_dict_free(&d);
  if (err < 0) {
    if (cancelled()) return Cancelled(label_ + ": cancelled");
    const std::string log = AvLogErrors();
    if (log.find("max_streams") != std::string::npos) {
      return InvalidArgument(label_ + ": more streams than max_streams " +
                             std::to_string(limits_.max_streams));
    }
    return DataLoss(label_ + ": cannot read the stream parameters: " + AvErrorText(err) +
                    (log.empty() ? "" : " (" + log + ")"));
  }
  if (cancelled()) return Cancelled(label_ + ": cancelled");
  return Status::Ok();
}

Status MemoryContainer::CheckHeader() {
  info_.container = format_->iformat->name;
  info_.streams = static_cast<int>(format_->nb_streams);
  if (info_.streams > limits_.max_streams) {
    return InvalidArgument(label_ + ": " + std::to_string(info_.streams) +
                           " streams exceed max_streams " + std::to_string(limits_.max_streams));
  }
  for (unsigned i = 0; i < format_->nb_streams; ++i) {
    if (format_->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) {
      info_.video_stream = static_cast<int>(i);
      break;
    }
  }
  if (info_.video_stream < 0) {
    return InvalidArgument(label_ + ": no video stream (" + std::to_string(info_.streams) +
                           " streams in the " + info_.container + " container)");
  }
  AVStream* st = format_->streams[info_.video_stream];
  const AVCodecParameters* par = st->codecpar;
  if (std::find(kCodecs.begin(), kCodecs.end(), par->codec_id) != kCodecs.end()) {
    decoder_ = avcodec_find_decoder(par->codec_id);
  }
  if (decoder_ == nullptr) {
    return InvalidArgument(label_ + ": codec '" + avcodec_get_name(par->codec_id) +
                           "' is not supported (supported: " + kCodecsText + ")");
  }
  info_.codec = decoder_->name;

  const int64_t w = par->width;
  const int64_t h = par->height;
  const std::string size = std::to_string(w) + "x" + std::to_string(h);
  if (w < 1 || h < 1) return InvalidArgument(label_ + ": the video stream declares no frame size");
  if (w > limits_.max_side || h > limits_.max_side) {
    return InvalidArgument(label_ + ": " + size + " frames exceed max_side " +
                           std::to_string(limits_.max_side));
  }
  if (w * h > limits_.max_frame_pixels) {
    return InvalidArgument(label_ + ": " + size + " frames (" + std::to_string(w * h) +
                           " pixels) exceed max_frame_pixels " +
                           std::to_string(limits_.max_frame_pixels));
  }
  info_.coded_width = static_cast<int>(w);
  info_.coded_height = static_cast<int>(h);

  if (st->nb_frames < 0 || st->nb_frames > limits_.max_frames) {
    return InvalidArgument(label_ + ": the video stream declares " + std::to_string(st->nb_frames) +
                           " frames, over max_frames " + std::to_string(limits_.max_frames));
  }
  info_.frames = st->nb_frames;
  frames_declared_ = st->nb_frames > 0;

  const AVRational rate = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0
                              ? st->avg_frame_rate
                              : st->r_frame_rate;
  const double fps = rate.den != 0 ? av_q2d(rate) : 0.0;
  if (!std::isfinite(fps) || fps <= 0) {
    return InvalidArgument(label_ + ": the video stream has no usable frame rate (avg_frame_rate " +
                           RationalText(st->avg_frame_rate) + ", r_frame_rate " +
                           RationalText(st->r_frame_rate) + ")");
  }
  if (fps > limits_.max_fps) {
    return InvalidArgument(label_ + ": frame rate " + Number(fps) + " exceeds max_fps " +
                           Number(limits_.max_fps));
  }
  info_.fps = fps;

  double duration = 0;
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0 && st->time_base.num > 0 &&
      st->time_base.den > 0) {
    duration = static_cast<double>(st->duration) * av_q2d(st->time_base);
  } else if (format_->duration != AV_NOPTS_VALUE && format_->duration > 0) {
    duration = static_cast<double>(format_->duration) / AV_TIME_BASE;
  }
  if (!std::isfinite(duration) || duration > limits_.max_duration_s) {
    return InvalidArgument(label_ + ": duration " + Number(duration) +
                           " s exceeds max_duration_s " + Number(limits_.max_duration_s));
  }
  info_.duration_s = duration;

  size_t matrix_size = 0;
  const uint8_t* matrix = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &matrix_size);
  if (matrix != nullptr && matrix_size >= 9 * sizeof(int32_t)) {
    int32_t m[9];
    std::memcpy(m, matrix, sizeof(m));
    orientation_ = OrientationFromMatrix(m);
  }
  info_.rotation = orientation_.degrees;
  info_.width = orientation_.transpose ? info_.coded_height : info_.coded_width;
  info_.height = orientation_.transpose ? info_.coded_width : info_.coded_height;
  return Status::Ok();
}

Status MemoryContainer::CountFrames() {
  for (unsigned i = 0; i < format_->nb_streams; ++i) {
    if (static_cast<int>(i) != info_.video_stream) format_->streams[i]->discard = AVDISCARD_ALL;
  }
  AVPacket* packet = av_packet_alloc();
  if (packet == nullptr) return ResourceExhausted(label_ + ": out of memory for a packet");
  int64_t frames = 0;
  Status status;
  for (;;) {
    const int err = av_read_frame(format_, packet);
    if (err == AVERROR_EOF) break;
    if (err < 0) {
      status = DataLoss(label_ + ": cannot read packet " + std::to_string(frames) +
                        " of the video stream: " + AvErrorText(err));
      break;
    }
    if (packet->stream_index == info_.video_stream) ++frames;
    av_packet_unref(packet);
    if (frames > limits_.max_frames) {
      status = InvalidArgument(label_ + ": the video stream holds more than max_frames " +
                               std::to_string(limits_.max_frames) + " frames");
      break;
    }
  }
  av_packet_free(&packet);
  if (status.ok()) info_.frames = frames;
  return status;
}

}  // namespace vls::video::internal
