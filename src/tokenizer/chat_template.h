// Chat templates as transformers applies them, and image placeholder expansion.
#ifndef VLSTACK_TOKENIZER_CHAT_TEMPLATE_H_
#define VLSTACK_TOKENIZER_CHAT_TEMPLATE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/grid_thw.h"
#include "tokenizer/jinja_template.h"

namespace vls::tok {

// Reads a model's chat template source: chat_template.jinja, else chat_template.json
// ("chat_template"), else tokenizer_config.json ("chat_template", a string or the entry named
// "default" of a list). JSON files are parsed with ParseUntrustedJson (io/untrusted_json.h) and
// read strictly: a malformed file or a field of the wrong type is kDataLoss naming it.
StatusOr<std::string> LoadChatTemplateSource(const std::string& model_dir);
// Reads a template file: a .json file holding "chat_template", or raw Jinja text.
StatusOr<std::string> LoadChatTemplateFile(const std::string& path);

// Renders `request` = {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?,
// other template variables...} the way transformers' apply_chat_template does: tools and
// documents are None when absent, add_generation_prompt defaults to false, and every other
// key is passed through as a template variable. Every limit of jinja_template.h applies; the
// request's values nest at most kMaxValueDepth and hold at most kMaxTemplateInputValues each.
// "add_generation_prompt" must be a boolean or null. Never throws.
StatusOr<std::string> RenderChat(const jinja::Template& tmpl, const nlohmann::ordered_json& request,
                                 const jinja::RenderLimits& limits = {});

// Replaces the i-th `pad_id` in `ids` by MergedTokens(grid i) copies: t*(h/merge)*(w/merge)
// (Qwen-VL's spatial merge of 2). Fails if the number of pads and grids differ, a grid breaks
// ValidateGridThw, or the expanded sequence would pass 2^24 tokens.
StatusOr<std::vector<int32_t>> ExpandVisualPads(std::span<const int32_t> ids, int32_t pad_id,
                                                std::span<const GridThw> grids, int merge_size = 2);

}  // namespace vls::tok

#endif  // VLSTACK_TOKENIZER_CHAT_TEMPLATE_H_
