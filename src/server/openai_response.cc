#include "server/openai_response.h"

#include <openssl/rand.h>

#include <array>
#include <cctype>
#include <random>
#include <string>
#include <string_view>
#include <utility>

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;

Json NullIfEmpty(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

// The token's bytes and its text (bytes as UTF-8, invalid sequences replaced when dumped).
Json PieceJson(const tok::Tokenizer& tokenizer, int32_t token, float logprob) {
  std::string bytes;
  bool added = false;
  if (!tokenizer.TokenBytes(token, /*skip_special_tokens=*/false, &bytes, &added)) bytes.clear();
  Json b = Json::array();
  for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
  return Json{{"token", bytes}, {"logprob", logprob}, {"bytes", std::move(b)}};
}

// Keeps the finish of a piece that carries one (reason, error, usage).
void RecordFinish(const OutputPiece& p, FinishReason* finish, std::string* error, Usage* usage) {
  if (p.delta.finish == FinishReason::kNone) return;
  *finish = p.delta.finish;
  *error = p.delta.error;
  *usage = p.delta.usage;
}

// The payloads that end a stream: none for a request that was cancelled (its client is gone)
// or has not finished, one error object for a failure, else `finish_chunk` and, with
// include_usage, a chunk of `object` with empty choices and the usage.
std::vector<std::string> EndPayloads(FinishReason finish, const std::string& error,
                                     const Usage& usage, const Json& finish_chunk,
                                     const ResponseMeta& meta, const char* object,
                                     bool include_usage) {
  std::vector<std::string> out;
  if (finish == FinishReason::kCancelled || finish == FinishReason::kNone) return out;
  if (finish == FinishReason::kError) {
    OpenAiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = "generation failed: " + error;
    out.push_back(DumpJson(ErrorBody(e)));
    return out;
  }
  out.push_back(DumpJson(finish_chunk));
  if (include_usage) {
    out.push_back(DumpJson(Json{{"id", meta.id},
                                {"object", object},
                                {"created", meta.created},
                                {"model", meta.model},
                                {"system_fingerprint", NullIfEmpty(meta.system_fingerprint)},
                                {"choices", Json::array()},
                                {"usage", UsageJson(usage)}}));
  }
  return out;
}

// Only blanks (spaces, tabs, newlines), or nothing.
bool IsBlank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// Whether a piece's token is part of the reply (the EOS or stop id that ended it is not).
bool ShownToken(const OutputPiece& p) { return p.token >= 0 && p.delta.stop_token != p.token; }

}  // namespace

std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json ErrorBody(const OpenAiError& e) {
  return Json{{"error",
               {{"message", e.message},
                {"type", e.type},
                {"param", NullIfEmpty(e.param)},
                {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}}}};
}

Json UsageJson(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"completion_tokens_details",
               {{"reasoning_tokens", 0},
                {"audio_tokens", 0},
                {"accepted_prediction_tokens", 0},
                {"rejected_prediction_tokens", 0}}}};
}

Json FinishReasonJson(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    default: return nullptr;
  }
}

Json TokenLogprobJson(const tok::Tokenizer& tokenizer, int32_t token, float logprob,
                      const std::vector<TokenLogprob>& top) {
  Json j = PieceJson(tokenizer, token, logprob);
  Json t = Json::array();
  for (const TokenLogprob& x : top) t.push_back(PieceJson(tokenizer, x.token, x.logprob));
  j["top_logprobs"] = std::move(t);
  return j;
}

std::string NewId(const char* prefix) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::array<unsigned char, 24> r{};
  if (RAND_bytes(r.data(), static_cast<int>(r.size())) != 1) {
    thread_local std::mt19937_64 gen{std::random_device{}()};
    for (unsigned char& c : r) c = static_cast<unsigned char>(gen());
  }
  std::string id = prefix;
  for (unsigned char c : r) id += kAlphabet[c % (sizeof(kAlphabet) - 1)];
  return id;
}

std::string ResponseModelName(const std::string& requested, const std::string& served) {
  auto same = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(a[i])) !=
          std::tolower(static_cast<unsigned char>(b[i]))) {
        return false;
      }
    }
    return true;
  };
  if (served.empty() || requested.empty()) return served;
  std::string_view r = requested;
  if (same(r, served)) return requested;
  if (r.size() > served.size() && r[r.size() - served.size() - 1] == '/' &&
      same(r.substr(r.size() - served.size()), served)) {
    return requested;
  }
  return served;
}

std::vector<std::pair<size_t, OutputPiece>> LogprobGate::Push(const OutputPiece& piece) {
  if (ShownToken(piece)) {
    std::string bytes;
    bool added = false;
    Held h;
    h.start = token_end_;
    if (tokenizer_ != nullptr &&
        tokenizer_->TokenBytes(piece.token, /*skip_special_tokens=*/true, &bytes, &added)) {
      token_end_ += bytes.size();
    }
    h.end = token_end_;
    h.piece = piece;
    h.piece.delta.text.clear();  // only the token and its log-probabilities travel on
    held_.push_back(std::move(h));
  }
  released_ += piece.delta.text.size();
  const bool end = piece.delta.finish != FinishReason::kNone;
  // At a stop string's finish, what is still held spelled (part of) it or followed it.
  const bool drop_rest = end && piece.delta.stop_index >= 0;
  std::vector<std::pair<size_t, OutputPiece>> out;
  while (!held_.empty() && (held_.front().end <= released_ || (end && !drop_rest))) {
    out.emplace_back(held_.front().start, std::move(held_.front().piece));
    held_.pop_front();
  }
  if (drop_rest) held_.clear();
  return out;
}

// ---- chat ------------------------------------------------------------------------------------

ChatResponder::ChatResponder(const ChatCompletionRequest& request, ResponseMeta meta,
                             const tok::Tokenizer* tokenizer)
    : request_(request), meta_(std::move(meta)), tokenizer_(tokenizer), gate_(tokenizer) {
  if (request_.parse_tool_calls()) tools_ = std::make_unique<ToolCallStream>();
  const StructuredOutput::Tools t = request_.chat.structured.tools;
  calls_only_ =
      tools_ && (t == StructuredOutput::Tools::kRequired || t == StructuredOutput::Tools::kNamed);
}

Json ChatResponder::Chunk(Json delta, Json finish, Json logprobs) const {
  Json choice{{"index", 0},
              {"delta", std::move(delta)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", std::move(finish)}};
  Json j{{"id", meta_.id},
         {"object", "chat.completion.chunk"},
         {"created", meta_.created},
         {"model", meta_.model},
         {"system_fingerprint", NullIfEmpty(meta_.system_fingerprint)},
         {"choices", Json::array({std::move(choice)})}};
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

Json ChatResponder::ToolCallJson(const ToolCall& c, int index, bool streaming) {
  Json j = Json::object();
  if (streaming) j["index"] = index;
  j["id"] = NewId("call_");
  j["type"] = "function";
  j["function"] = Json{{"name", c.name}, {"arguments", c.arguments}};
  return j;
}

void ChatResponder::Record(const OutputPiece& piece) {
  RecordFinish(piece, &finish_, &error_, &usage_);
}

Json ChatResponder::FinalFinishReason() const {
  if (finish_ == FinishReason::kStop && (!calls_.empty() || streamed_calls_ > 0)) {
    return "tool_calls";
  }
  return FinishReasonJson(finish_);
}

std::vector<std::string> ChatResponder::StreamPiece(const OutputPiece& piece) {
  std::vector<std::string> out;
  Record(piece);
  if (!started_) {
    started_ = true;
    out.push_back(DumpJson(Chunk(Json{{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}},
                                 nullptr, nullptr)));
  }
  Json logprobs = nullptr;
  if (request_.logprobs) {
    Json content = Json::array();
    for (const auto& [start, p] : gate_.Push(piece)) {
      content.push_back(TokenLogprobJson(*tokenizer_, p.token, p.logprob, p.top_logprobs));
    }
    if (!content.empty()) logprobs = Json{{"content", std::move(content)}};
  }
  ToolCallSplit split;
  if (tools_) {
    split = tools_->Push(piece.delta.text);
    if (piece.delta.finish != FinishReason::kNone) {
      ToolCallSplit rest = tools_->Finish();
      split.content += rest.content;
      for (ToolCall& c : rest.calls) split.calls.push_back(std::move(c));
    }
  } else {
    split.content = piece.delta.text;
  }
  // Enforced calls: the blanks the grammar lets through between calls are not content.
  if (calls_only_ && IsBlank(split.content)) split.content.clear();
  if (!split.content.empty() || !logprobs.is_null()) {
    out.push_back(DumpJson(Chunk(Json{{"content", split.content}}, nullptr, std::move(logprobs))));
  }
  for (const ToolCall& c : split.calls) {
    Json calls = Json::array({ToolCallJson(c, streamed_calls_++, true)});
    out.push_back(DumpJson(Chunk(Json{{"tool_calls", std::move(calls)}}, nullptr, nullptr)));
  }
  return out;
}

std::vector<std::string> ChatResponder::StreamEnd() {
  return EndPayloads(finish_, error_, usage_, Chunk(Json::object(), FinalFinishReason(), nullptr),
                     meta_, "chat.completion.chunk", request_.include_usage);
}

void ChatResponder::Collect(const OutputPiece& piece) {
  Record(piece);
  text_ += piece.delta.text;
  if (!request_.logprobs) return;
  for (const auto& [start, p] : gate_.Push(piece)) {
    logprobs_.push_back(TokenLogprobJson(*tokenizer_, p.token, p.logprob, p.top_logprobs));
  }
}

Json ChatResponder::Completion() {
  Json message{{"role", "assistant"}, {"content", nullptr}, {"refusal", nullptr}};
  if (request_.parse_tool_calls()) {
    ToolCallSplit split = SplitToolCalls(text_);
    calls_ = split.calls;
    // With calls, blank content (the "\n" between blocks) is none.
    message["content"] =
        split.calls.empty() || !IsBlank(split.content) ? Json(split.content) : Json(nullptr);
    if (!split.calls.empty()) {
      Json calls = Json::array();
      for (size_t i = 0; i < split.calls.size(); ++i) {
        calls.push_back(ToolCallJson(split.calls[i], static_cast<int>(i), false));
      }
      message["tool_calls"] = std::move(calls);
    }
  } else {
    message["content"] = text_;
  }
  Json choice{{"index", 0},
              {"message", std::move(message)},
              {"logprobs", request_.logprobs ? Json{{"content", logprobs_}} : Json(nullptr)},
              {"finish_reason", FinalFinishReason()}};
  return Json{{"id", meta_.id},
              {"object", "chat.completion"},
              {"created", meta_.created},
              {"model", meta_.model},
              {"system_fingerprint", NullIfEmpty(meta_.system_fingerprint)},
              {"choices", Json::array({std::move(choice)})},
              {"usage", UsageJson(usage_)}};
}

// ---- completions -----------------------------------------------------------------------------

CompletionResponder::CompletionResponder(const CompletionRequest& request, ResponseMeta meta,
                                         const tok::Tokenizer* tokenizer)
    : request_(request), meta_(std::move(meta)), tokenizer_(tokenizer), gate_(tokenizer) {}

void CompletionResponder::Record(const OutputPiece& piece) {
  RecordFinish(piece, &finish_, &error_, &usage_);
}

Json CompletionResponder::Chunk(const std::string& text, Json finish, Json logprobs) const {
  Json choice{{"index", 0},
              {"text", text},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", std::move(finish)}};
  Json j{{"id", meta_.id},
         {"object", "text_completion"},
         {"created", meta_.created},
         {"model", meta_.model},
         {"system_fingerprint", NullIfEmpty(meta_.system_fingerprint)},
         {"choices", Json::array({std::move(choice)})}};
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

Json CompletionResponder::LegacyLogprobs(const std::vector<OutputPiece>& pieces,
                                         size_t text_start) const {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  size_t offset = text_start;
  for (const OutputPiece& p : pieces) {
    if (!ShownToken(p)) continue;
    std::string bytes;
    bool added = false;
    if (!tokenizer_->TokenBytes(p.token, false, &bytes, &added)) bytes.clear();
    tokens.push_back(bytes);
    lps.push_back(p.logprob);
    Json top = Json::object();
    for (const TokenLogprob& t : p.top_logprobs) {
      std::string b;
      if (!tokenizer_->TokenBytes(t.token, false, &b, &added)) b.clear();
      if (!top.contains(b)) top[b] = t.logprob;
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += bytes.size();
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

std::vector<std::string> CompletionResponder::StreamPiece(const OutputPiece& piece) {
  Record(piece);
  std::vector<std::string> out;
  Json logprobs = nullptr;
  if (request_.logprobs >= 0) {
    std::vector<OutputPiece> released;
    size_t start = 0;
    for (auto& [offset, p] : gate_.Push(piece)) {
      if (released.empty()) start = offset;
      released.push_back(std::move(p));
    }
    if (!released.empty()) logprobs = LegacyLogprobs(released, start);
  }
  text_ += piece.delta.text;
  if (!piece.delta.text.empty() || !logprobs.is_null()) {
    out.push_back(DumpJson(Chunk(piece.delta.text, nullptr, std::move(logprobs))));
  }
  return out;
}

std::vector<std::string> CompletionResponder::StreamEnd() {
  return EndPayloads(finish_, error_, usage_, Chunk("", FinishReasonJson(finish_), nullptr), meta_,
                     "text_completion", request_.include_usage);
}

void CompletionResponder::Collect(const OutputPiece& piece) {
  Record(piece);
  text_ += piece.delta.text;
  if (request_.logprobs < 0) return;
  for (auto& [offset, p] : gate_.Push(piece)) pieces_.push_back(std::move(p));
}

Json CompletionResponder::Completion() const {
  Json choice{{"index", 0},
              {"text", text_},
              {"logprobs", request_.logprobs >= 0 ? LegacyLogprobs(pieces_, 0) : Json(nullptr)},
              {"finish_reason", FinishReasonJson(finish_)}};
  return Json{{"id", meta_.id},
              {"object", "text_completion"},
              {"created", meta_.created},
              {"model", meta_.model},
              {"system_fingerprint", NullIfEmpty(meta_.system_fingerprint)},
              {"choices", Json::array({std::move(choice)})},
              {"usage", UsageJson(usage_)}};
}

}  // namespace vls::server
