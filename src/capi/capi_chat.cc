// The C ABI's chat entry points (vls_chat_*, vls_batch_submit_chat, vls_batch_take_text) over
// the runtime's request pipeline (runtime/chat_pipeline.h, chat_json.h, text_stream.h).
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "base/status.h"
#include "capi/capi_internal.h"
#include "runtime/chat_json.h"
#include "runtime/chat_pipeline.h"
#include "vlstack/vlstack.h"

namespace vls::capi {
namespace {

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
  VLS_ASSIGN_OR_RETURN(PreparedChat prepared, p.Prepare(request));
  TextStream stream = p.NewTextStream(prepared);
  // The text state is registered under the event lock before the engine can deliver an event
  // of the request (a running engine thread waits for the lock in OnEvent).
  std::lock_guard<std::mutex> lock(b->events_mu);
  VLS_ASSIGN_OR_RETURN(uint64_t id, b->engine->Submit(std::move(prepared.request)));
  b->chats.emplace(id, vls_batch::ChatText{std::move(stream), std::string(), false});
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
  const size_t need = it->second.text.size() + 1;
  if (needed != nullptr) *needed = need;
  if (len < need) {
    return OutOfRange("buf holds " + std::to_string(len) + " bytes; the text needs " +
                      std::to_string(need));
  }
  std::memcpy(buf, it->second.text.c_str(), need);
  const bool done = it->second.finished;
  if (finished != nullptr) *finished = done ? 1 : 0;
  if (done) {
    b->chats.erase(it);
  } else {
    it->second.text.clear();
  }
  return Status::Ok();
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

}  // extern "C"
