// `forward --image / --video` and batch lines with "images" / "videos" (docs/contracts.md §6,
// docs/video.md): a request whose input_ids hold one image pad per image and one
// vision_start video_pad vision_end per video, with the images and videos given as files.
#ifndef VLSTACK_CLI_IMAGE_REQUEST_H_
#define VLSTACK_CLI_IMAGE_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/args.h"
#include "cli/request_input.h"
#include "io/safetensors.h"
#include "runtime/image_encoder.h"
#include "runtime/image_prompt.h"
#include "runtime/loaded_model.h"
#include "tokenizer/tokenizer.h"

namespace vls::cli {

// The visual files of a request, each kind in prompt order, and the videos' sampling.
struct VisualFiles {
  std::vector<std::string> images;
  std::vector<std::string> videos;
  VideoSamplingOptions video;
  bool empty() const { return images.empty() && videos.empty(); }
};

// --image, --video, --fps, --max-frames and --num-frames of a command. --fps / --max-frames /
// --num-frames without --video are refused, as are --fps with --num-frames.
StatusOr<VisualFiles> VisualFilesFromArgs(const Args& args);
// The help lines of --video, --fps, --max-frames and --num-frames.
std::string VideoFlagsHelp();

// The tokenizer that writes a video's timestamps (the model folder's tokenizer.json);
// InvalidArgument saying so when the folder has none.
StatusOr<std::unique_ptr<tok::Tokenizer>> LoadTimestampTokenizer(const std::string& model_dir);

// The length of a prompt of `length` tokens once its image pads and video triples are expanded
// (images decoded and planned; videos probed and planned, their timestamps tokenized), before
// the model is loaded: it sizes the context.
StatusOr<int64_t> PlanExpandedLength(const std::string& model_dir, int64_t length,
                                     const VisualFiles& files);

// ReadImageRequestInput with videos too: the pads of input_ids are matched in order with the
// images (image pads) and videos (video pads); each video's triple becomes its timestamped
// groups (SpliceVideoGroups, timestamps tokenized by `tokenizer`, which may be null without
// videos), then every pad is expanded and the prompt built.
StatusOr<RequestInput> ReadVisualRequestInput(const SafetensorsFile& in, const LoadedModel& model,
                                              const ImageEncoder& encoder, const VisualFiles& files,
                                              const tok::Tokenizer* tokenizer,
                                              VisualFeatures* features);

// The grid each image file will get (decoded, then smart_resize with the model folder's
// preprocessor_config.json), before the model is loaded: it sizes the context.
StatusOr<std::vector<GridThw>> PlanImageGrids(const std::string& model_dir,
                                              const std::vector<std::string>& files);

// The prompt length after each of `pads` image pads of a prompt of `length` tokens is expanded
// to its grid's tokens.
int64_t ExpandedLength(int64_t length, std::span<const GridThw> grids, int merge_size);

// The tensors an input file may hold with images: input_ids and decode_tokens only (the engine
// derives the embeddings, positions and DeepStack payload itself).
Status CheckImageInputTensors(const SafetensorsFile& in);

// input_ids of `in` (one pad per image) with the images encoded by `encoder`: expanded ids,
// embeddings, positions, rope_delta and the DeepStack payload (image_prompt.h), plus
// decode_tokens. `features` receives the images' grids and features.
StatusOr<RequestInput> ReadImageRequestInput(const SafetensorsFile& in, const LoadedModel& model,
                                             const ImageEncoder& encoder,
                                             const std::vector<std::string>& files,
                                             VisualFeatures* features);

}  // namespace vls::cli

#endif  // VLSTACK_CLI_IMAGE_REQUEST_H_
