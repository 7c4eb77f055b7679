// Internal to the C ABI (not installed; include/vlstack/vlstack.h stays the only public
// surface): the handle structs, the status helpers every entry point runs its body through, and
// the raw-descriptor checks the session prefills and the batch submits share.
//
// The implementation is split by role: capi_common.cc (ABI version, last error, status names,
// the descriptor checks), capi_model_session.cc (vls_model_*, vls_session_*) and capi_batch.cc
// (vls_request_*, vls_batch_*).
//
// Defense in depth (docs/contracts.md §2 layer 4): every descriptor is checked here, on the raw
// pointers, before any C++ object is built from it; the value rules then go through the same
// validators the C++ API uses, explicitly, before the session runs anything. Every entry point
// catches everything, so no exception leaves the library.
#ifndef VLSTACK_CAPI_CAPI_INTERNAL_H_
#define VLSTACK_CAPI_CAPI_INTERNAL_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "runtime/batch_engine.h"
#include "runtime/chat_pipeline.h"
#include "runtime/deepstack.h"
#include "runtime/image_encoder.h"
#include "runtime/loaded_model.h"
#include "runtime/positions.h"
#include "runtime/reply_text.h"
#include "runtime/session.h"
#include "vlstack/vlstack.h"

struct vls_model {
  std::unique_ptr<vls::LoadedModel> lm;
};

struct vls_chat {
  const vls_model* model = nullptr;
  std::unique_ptr<vls::ImageEncoder> images;  // null: the model folder cannot take images
  std::unique_ptr<vls::ChatPipeline> pipeline;
};

struct vls_session {
  const vls_model* model = nullptr;
  std::unique_ptr<vls::Session> session;
  std::vector<float> logits;
  bool has_logits = false;
};

// The batch handle: the engine plus the event buffer its callback fills. Stepping is the
// engine's own: synchronously through BatchEngine::Step, or on the engine's thread
// (BatchEngine::Start); the handle runs no loop of its own.
//
// Lock order: run_mu -> (the engine's locks) -> events_mu. The engine calls `OnEvent` after a
// step has released its step lock; nothing here calls the engine while holding events_mu.
struct vls_batch {
  const vls_model* model = nullptr;

  mutable std::mutex events_mu;
  std::condition_variable events_cv;                 // signalled when an event is buffered
  std::deque<vls_token_event> events;                // guarded by events_mu
  std::unordered_map<uint64_t, std::string> errors;  // guarded by events_mu
  // The text side of chat requests (vls_batch_submit_chat); guarded by events_mu.
  // Each one's text produced and not yet taken is the ReplyText's (TakeText).
  std::unordered_map<uint64_t, vls::ReplyText> chats;

  // Serialises synchronous stepping with vls_batch_start/stop.
  std::mutex run_mu;
  bool threaded = false;  // guarded by run_mu

  // Last, so that it is destroyed first (its callback refers to the members above); its
  // destructor stops its thread.
  std::unique_ptr<vls::BatchEngine> engine;

  vls_batch() = default;
  vls_batch(const vls_batch&) = delete;
  vls_batch& operator=(const vls_batch&) = delete;

  // Buffers the event; a chat request's event also feeds its text stream, and a stop string
  // finishes it here (the engine then cancels it, and its cancelled event is not buffered).
  bool OnEvent(const vls::TokenEvent& e) {
    std::lock_guard<std::mutex> lock(events_mu);
    auto finish = static_cast<int32_t>(e.finish);
    bool keep = true;
    if (auto it = chats.find(e.request_id); it != chats.end()) {
      vls::ReplyText& reply = it->second;
      if (reply.finished()) return true;
      keep = reply.Feed(e);
      if (reply.finished()) finish = static_cast<int32_t>(reply.finish());
    }
    if (e.finish == vls::FinishReason::kError) errors[e.request_id] = e.error;
    events.push_back({e.request_id, e.token, finish});
    events_cv.notify_all();
    return keep;
  }

  // Moves up to `capacity` buffered events into `out`.
  size_t Drain(vls_token_event* out, size_t capacity) {
    std::lock_guard<std::mutex> lock(events_mu);
    const size_t n = std::min(capacity, events.size());
    std::copy_n(events.begin(), n, out);
    events.erase(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }
};

namespace vls::capi {

// Sets the thread's last error to "<fn>: <message>" (made valid UTF-8) and returns the
// status's code. Never throws.
vls_status Fail(const char* fn, const Status& s) noexcept;

// VLS_OK (clearing the last error) when `s` is OK, otherwise Fail.
vls_status Finish(const char* fn, const Status& s) noexcept;

// Runs `body` (returning Status) with every exception turned into a status. Every exported
// vls_* function that can fail runs its body through Guard; the few that return no status
// (vls_*_free, the *_default_options) catch everything themselves.
template <typename F>
vls_status Guard(const char* fn, F&& body) noexcept {
  try {
    return Finish(fn, body());
  } catch (const std::bad_alloc&) {
    return Fail(fn, Status(StatusCode::kResourceExhausted, "out of memory"));
  } catch (const std::exception& e) {
    try {
      return Fail(fn, Internal(std::string("unexpected exception: ") + e.what()));
    } catch (...) {
      return Fail(fn, Status(StatusCode::kInternal, "unexpected exception"));
    }
  } catch (...) {
    return Fail(fn, Status(StatusCode::kInternal, "unexpected non-standard exception"));
  }
}

inline constexpr int64_t kAnyDim = -1;

// The ABI's own descriptor check. `want` holds the expected dims (kAnyDim: any size >= 0);
// its size is the expected rank.
Status CheckDescriptor(const vls_tensor* t, const char* tensor, int32_t dtype,
                       std::initializer_list<int64_t> want, bool deepstack = false);

template <typename T>
std::span<const T> Values(const vls_tensor& t) {
  return {static_cast<const T*>(t.data), static_cast<size_t>(t.byte_length / sizeof(T))};
}

// The mode argument must be a known mode and equal to the model's.
Status CheckMode(int32_t mode, const Qwen3Config& cfg, bool deepstack);

// 1 <= S <= C, checked before any buffer of S rows is read or built.
Status CheckLength(const char* tensor, int64_t S, int capacity);

// positions: NULL (sequential) or i32 [S] / [3, S] per the model's mode.
StatusOr<PositionIds> ReadPositions(const vls_tensor* positions, PositionMode mode, int64_t S);

// The DeepStack arguments after the embeddings and positions: validation layer 1 on the raw
// descriptors with the static bounds (K, Nmax, H) checked before any copy, the optional
// token_ids descriptor, then DeepStackPayload::Create, which copies the payload. `S` is the
// request's checked sequence length.
StatusOr<DeepStackPayload> ReadDeepStack(const LoadedModel& lm, int64_t S,
                                         const vls_tensor* visual_positions,
                                         const vls_tensor* layer_features,
                                         const vls_tensor* layer_indices,
                                         const vls_tensor* token_ids);

// The DeepStack entry exists only when the model declares DeepStack.
Status CheckDeclared(const Qwen3Config& cfg);

}  // namespace vls::capi

#endif  // VLSTACK_CAPI_CAPI_INTERNAL_H_
