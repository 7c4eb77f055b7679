// The C ABI's chat entry points (vls_chat_*, vls_batch_submit_chat, vls_batch_take_text) over
// the runtime's request pipeline (runtime/chat_pipeline.h, chat_json.h, reply_text.h), and the
// front end's tokenizer and template on their own (vls_chat_tokenize, _detokenize, _render), and
// vls_resolve_model (a folder or a Hugging Face repository id in the local cache: io/hf_cache.h).
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "capi/capi_internal.h"
#include "io/hf_cache.h"
#include "runtime/chat_json.h"
#include "runtime/chat_pipeline.h"
#include "vlstack/vlstack.h"

namespace vls::capi {
namespace {

// Copies `text` and its NUL into buf under the *needed / OUT_OF_RANGE rule of the header.
Status WriteText(const std::string& text, char* buf, size_t len, size_t* needed) {
  const size_t need = text.size() + 1;
  if (needed != nullptr) *needed = need;
  if (len < need) {
    return OutOfRange("buf holds " + std::to_string(len) + " bytes; the text needs " +
                      std::to_string(need));
  }
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  return Status::Ok();
}

Status SubmitChat(vls_batch* b, const vls_chat* chat, const char* request_json, uint64_t* out_id) {
  if (b == nullptr || b->engine == nullptr) return InvalidArgument("batch is NULL");
  if (chat == nullptr || chat->pipeline == nullptr) return InvalidArgument("chat is NULL");
  if (request_json == nullptr) return InvalidArgument("request_json is NULL");
  if (out_id == nullptr) return InvalidArgument("out_id is NULL");
  if (chat->model != b->model) {
    return InvalidArgument("the chat and the batch belong to different models");
  }
  const ChatPipeline& p = *chat->pipeline;
  VLS_ASSIGN_OR_RETURN(ChatRequest request,
                       ChatRequestFromJsonText(request_json, p.generation_defaults()));
  StatusOr<PreparedChat> prepared_or = p.Prepare(request);
  if (!prepared_or.ok()) {
    // vlstack.h: a request refused for what it holds is VLS_ERR_INVALID_ARGUMENT; the pipeline
    // says OutOfRange for a prompt that does not fit the context (the server's 400
    // context_length_exceeded).
    const Status& s = prepared_or.status();
    if (s.code() == StatusCode::kOutOfRange) return InvalidArgument(s.message());
    return s;
  }
  PreparedChat prepared = std::move(*prepared_or);
  TextStream stream = p.NewTextStream(prepared);
  // The text state is registered under the event lock before the engine can deliver an event
  // of the request (a running engine thread waits for the lock in OnEvent).
  std::lock_guard<std::mutex> lock(b->events_mu);
  VLS_ASSIGN_OR_RETURN(uint64_t id, b->engine->Submit(std::move(prepared.request)));
  b->chats.emplace(id, ReplyText(std::move(stream)));
  *out_id = id;
  return Status::Ok();
}

Status TakeText(vls_batch* b, uint64_t id, char* buf, size_t len, size_t* needed,
                int32_t* finished) {
  if (b == nullptr || b->engine == nullptr) return InvalidArgument("batch is NULL");
  if (buf == nullptr && len > 0) return InvalidArgument("buf is NULL but len is not 0");
  std::lock_guard<std::mutex> lock(b->events_mu);
  auto it = b->chats.find(id);
  if (it == b->chats.end()) {
    return NotFound("request " + std::to_string(id) +
                    " is not a chat request of this batch, or its text was all taken");
  }
  VLS_RETURN_IF_ERROR(WriteText(it->second.text(), buf, len, needed));
  const bool done = it->second.finished();
  if (finished != nullptr) *finished = done ? 1 : 0;
  if (done) {
    b->chats.erase(it);
  } else {
    (void)it->second.TakeText();
  }
  return Status::Ok();
}

Status Tokenize(const vls_chat* chat, const char* text, size_t text_len, int32_t* ids,
                size_t capacity, size_t* count) {
  if (chat == nullptr || chat->pipeline == nullptr) return InvalidArgument("chat is NULL");
  if (text == nullptr && text_len > 0) return InvalidArgument("text is NULL but text_len is not 0");
  if (ids == nullptr && capacity > 0) return InvalidArgument("ids is NULL but capacity is not 0");
  if (count == nullptr) return InvalidArgument("count is NULL");
  const ChatPipeline& p = *chat->pipeline;
  VLS_ASSIGN_OR_RETURN(std::vector<int32_t> out, p.tokenizer().Encode(std::string_view(
                                                     text == nullptr ? "" : text, text_len)));
  const int32_t vocab = p.model().config().vocab;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= vocab) {
      return InvalidArgument("ids[" + std::to_string(i) + "] = " + std::to_string(out[i]) +
                             " is outside the model's vocabulary [0, " + std::to_string(vocab) +
                             ")");
    }
  }
  *count = out.size();
  if (capacity < out.size()) {
    return OutOfRange("ids holds " + std::to_string(capacity) + " entries; the text has " +
                      std::to_string(out.size()) + " tokens");
  }
  std::copy(out.begin(), out.end(), ids);
  return Status::Ok();
}

Status Detokenize(const vls_chat* chat, const int32_t* ids, size_t n, int32_t skip_special,
                  char* buf, size_t len, size_t* needed) {
  if (chat == nullptr || chat->pipeline == nullptr) return InvalidArgument("chat is NULL");
  if (ids == nullptr && n > 0) return InvalidArgument("ids is NULL but n is not 0");
  if (skip_special != 0 && skip_special != 1) {
    return InvalidArgument("skip_special = " + std::to_string(skip_special) + " is not 0 or 1");
  }
  if (buf == nullptr && len > 0) return InvalidArgument("buf is NULL but len is not 0");
  const ChatPipeline& p = *chat->pipeline;
  const int32_t vocab = p.model().config().vocab;
  const std::span<const int32_t> in(ids, n);
  for (size_t i = 0; i < n; ++i) {
    if (in[i] < 0 || in[i] >= vocab) {
      return InvalidArgument("ids[" + std::to_string(i) + "] = " + std::to_string(in[i]) +
                             " is outside the model's vocabulary [0, " + std::to_string(vocab) +
                             ")");
    }
  }
  return WriteText(p.tokenizer().Decode(in, skip_special == 1), buf, len, needed);
}

Status Render(const vls_chat* chat, const char* request_json, char* buf, size_t len,
              size_t* needed) {
  if (chat == nullptr || chat->pipeline == nullptr) return InvalidArgument("chat is NULL");
  if (request_json == nullptr) return InvalidArgument("request_json is NULL");
  if (buf == nullptr && len > 0) return InvalidArgument("buf is NULL but len is not 0");
  const ChatPipeline& p = *chat->pipeline;
  VLS_ASSIGN_OR_RETURN(ChatRequest request,
                       ChatRequestFromJsonText(request_json, p.generation_defaults()));
  VLS_ASSIGN_OR_RETURN(std::string prompt, p.Render(request));
  return WriteText(prompt, buf, len, needed);
}

Status ResolveModel(const char* model, char* buf, size_t len, size_t* needed) {
  if (model == nullptr) return InvalidArgument("model is NULL");
  if (buf == nullptr && len > 0) return InvalidArgument("buf is NULL but len is not 0");
  VLS_ASSIGN_OR_RETURN(std::string dir, ResolveModelFolder(model));
  return WriteText(dir, buf, len, needed);
}

}  // namespace
}  // namespace vls::capi

using vls::InvalidArgument;
using vls::Status;
using vls::capi::Guard;

extern "C" {

vls_status vls_chat_create(const vls_model* model, const char* model_dir, vls_chat** out) {
  return Guard("vls_chat_create", [&]() -> Status {
    if (model == nullptr || model->lm == nullptr) return InvalidArgument("model is NULL");
    if (model_dir == nullptr) return InvalidArgument("model_dir is NULL");
    if (out == nullptr) return InvalidArgument("out is NULL");
    auto chat = std::make_unique<vls_chat>();
    chat->model = model;
    // Images when the folder has a vision tower; otherwise image parts are refused with the
    // reason. Image bytes come only as data: URLs (a library never reads files named by a
    // request).
    vls::ChatPipelineOptions po;
    auto encoder = vls::ImageEncoder::Load(model_dir, *model->lm, vls::ImageEncoderOptions{});
    if (encoder.ok()) {
      chat->images = std::move(*encoder);
      po.images = chat->images.get();
    } else {
      po.images_unavailable = encoder.status().ToString();
    }
    VLS_ASSIGN_OR_RETURN(chat->pipeline, vls::ChatPipeline::Load(model_dir, *model->lm, po));
    *out = chat.release();
    return Status::Ok();
  });
}

void vls_chat_free(vls_chat* chat) {
  try {
    delete chat;
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors do not throw; nothing may escape
  }
}

vls_status vls_batch_submit_chat(vls_batch* batch, const vls_chat* chat, const char* request_json,
                                 uint64_t* out_id) {
  return Guard("vls_batch_submit_chat",
               [&] { return vls::capi::SubmitChat(batch, chat, request_json, out_id); });
}

vls_status vls_batch_take_text(vls_batch* batch, uint64_t id, char* buf, size_t len, size_t* needed,
                               int32_t* finished) {
  return Guard("vls_batch_take_text",
               [&] { return vls::capi::TakeText(batch, id, buf, len, needed, finished); });
}

vls_status vls_chat_tokenize(const vls_chat* chat, const char* text, size_t text_len, int32_t* ids,
                             size_t capacity, size_t* count) {
  return Guard("vls_chat_tokenize",
               [&] { return vls::capi::Tokenize(chat, text, text_len, ids, capacity, count); });
}

vls_status vls_chat_detokenize(const vls_chat* chat, const int32_t* ids, size_t n,
                               int32_t skip_special, char* buf, size_t len, size_t* needed) {
  return Guard("vls_chat_detokenize",
               [&] { return vls::capi::Detokenize(chat, ids, n, skip_special, buf, len, needed); });
}

vls_status vls_resolve_model(const char* model, char* buf, size_t len, size_t* needed) {
  return Guard("vls_resolve_model",
               [&] { return vls::capi::ResolveModel(model, buf, len, needed); });
}

vls_status vls_chat_render(const vls_chat* chat, const char* request_json, char* buf, size_t len,
                           size_t* needed) {
  return Guard("vls_chat_render",
               [&] { return vls::capi::Render(chat, request_json, buf, len, needed); });
}

}  // extern "C"
