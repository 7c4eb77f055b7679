// `forward --image` and batch lines with "images" (docs/contracts.md §6): a request whose input_ids
// hold one image pad per image, with the images given as files.
#ifndef VLSTACK_CLI_IMAGE_REQUEST_H_
#define VLSTACK_CLI_IMAGE_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/request_input.h"
#include "io/safetensors.h"
#include "runtime/image_encoder.h"
#include "runtime/image_prompt.h"
#include "runtime/loaded_model.h"

namespace vls::cli {

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
