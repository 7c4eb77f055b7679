// `vlstack serve`: the OpenAI-compatible HTTP server (docs/contracts.md §7). The command wires the
// parts together: the listener first (so /health answers 503 "loading" while the weights load),
// then the model, the image encoder, the chat pipeline and the generation service; SIGTERM or
// SIGINT drains (new requests 503, those in flight finish within --drain-timeout) and exits 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "base/memory.h"
#include "base/pool_pacer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "cli/speculative_flags.h"
#include "runtime/chat_pipeline.h"
#include "runtime/image_encoder.h"
#include "runtime/loaded_model.h"
#include "server/generation_service.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace vls::cli {
namespace {

constexpr const char* kHelp =
    "usage: vlstack serve --model DIR [--host 127.0.0.1] [--port 8080] [options]\n"
    "\n"
    "Serves the model over an OpenAI-compatible HTTP API: POST /v1/chat/completions (text,\n"
    "images and video clips as data: URLs, streaming, tools, logprobs), POST /v1/completions,\n"
    "POST /tokenize, POST /detokenize, GET /v1/models, GET /health, GET /metrics (Prometheus)\n"
    "and a chat page at /. Prints a line with `listening on http://HOST:PORT` once it accepts\n"
    "connections (/health and /health/ready answer 503 until the model is loaded, then 200;\n"
    "/health/live answers 200 throughout), and one JSON line per request on stderr (with the\n"
    "caller's X-Request-Id when a load balancer sends one). SIGTERM or Ctrl-C: stops taking\n"
    "requests (503), finishes those in flight, exits 0.\n"
    "\n"
    "  --model DIR            model folder: weights, config.json, tokenizer.json, the chat\n"
    "                         template, preprocessor_config.json for images (and\n"
    "                         video_preprocessor_config.json, defaults when absent)\n"
    "                         or Org/Name: a Hugging Face repository id in the local cache\n"
    "  --model-name NAME      the model id in /v1/models and responses (default: the folder's\n"
    "                         name, or the repository id --model named)\n"
    "  --host ADDR            address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port N               port (default 8080; 0 picks a free one)\n"
    "  --api-key KEY          require `Authorization: Bearer KEY` on every endpoint but / and\n"
    "                         /health* (default: the VLSTACK_API_KEY environment variable, else\n"
    "                         none)\n"
    "  --slots B              sequences generated at once (default 4)\n"
    "  --capacity C           the longest sequence, prompt and reply, in tokens (default 4096);\n"
    "                         KV memory is taken as sequences grow (--kv-memory)\n"
    "  --max-queue N          requests waiting for a slot before new ones get 429 (default 64)\n"
    "  --max-body-mb N        largest request body in MiB (default 64; images and clips come\n"
    "                         inline, base64 adds a third: a 64 MiB body holds a 47 MiB clip)\n"
    "  --max-images N         most images and videos in one request (default 16)\n"
    "  --video-max-frames N   most frames sampled from one video, and the bound on a request's\n"
    "                         max_frames / num_frames (default 768)\n"
    "  --video-max-fps F      the bound on a request's fps (default 60)\n"
    "  --max-messages N       most messages in one request (default 1024)\n"
    "  --allow-local-files DIR  image and video parts may name files under DIR (default: only\n"
    "                         data: URLs)\n"
    "  --drain-timeout S      seconds SIGTERM waits for requests in flight (default 30); until\n"
    "                         they finish /health/ready answers 503 \"draining\"\n"
    "  --overload-status N    a full queue's answer, with Retry-After: 429 (default) or 503\n"
    "                         (behind a load balancer that retries another replica on 503)\n"
    "  --prefill-chunk N      prompt tokens per step and prompt while other streams decode,\n"
    "                         in the same pass as their decode rows (default 64; with nothing\n"
    "                         decoding a prompt goes in one pass)\n"
    "  --encode-share F       while streams decode, image and video encoding runs between\n"
    "                         engine steps for F x the step's time (default 0.5: streams\n"
    "                         keep an even pace 1.5x their step, encoding gets a third of\n"
    "                         the cores; larger encodes faster and slows streams more)\n"
    "  --http-threads N       requests computed at once, a thread each, started as needed\n"
    "                         (default 1024; idle connections cost no thread)\n"
    "  --quiet                no per-request log lines\n";

struct ServeFlags {
  std::string dir;
  server::HttpOptions http;
  LoadOptions load;
  int prefill_chunk = 64;
  double encode_share = kDefaultPacerShare;
  SpeculativeParams speculative;  // --speculate: the engine default
  size_t max_queue = 64;
  int drain_timeout_s = 30;
  std::string allow_files;
  ImageEncoderOptions encoder;  // --video-max-frames, --video-max-fps
};

StatusOr<ServeFlags> ParseFlags(const Args& args) {
  ServeFlags f;
  VLS_ASSIGN_OR_RETURN(const ModelLocation model, ModelFlag(args));
  f.dir = model.dir;
  VLS_RETURN_IF_ERROR(ApplyLoadFlags(args, "bf16", &f.load));
  VLS_ASSIGN_OR_RETURN(long long slots, args.Int("slots", 4, 1, 256));
  VLS_ASSIGN_OR_RETURN(long long capacity, args.Int("capacity", 4096, 16, 1 << 20));
  f.load.slots = static_cast<int>(slots);
  f.load.capacity = static_cast<int>(capacity);
  f.http.host = args.Get("host").value_or("127.0.0.1");
  VLS_ASSIGN_OR_RETURN(long long port, args.Int("port", 8080, 0, 65535));
  f.http.port = static_cast<int>(port);
  std::string name = args.Get("model-name").value_or("");
  if (name.empty()) name = model.name;
  f.http.model_id = name;
  if (auto key = args.Get("api-key")) {
    if (key->empty()) return InvalidArgument("--api-key is empty");
    f.http.api_key = *key;
  } else if (const char* env = std::getenv("VLSTACK_API_KEY"); env != nullptr && *env != 0) {
    f.http.api_key = env;
  }
  VLS_ASSIGN_OR_RETURN(long long queue, args.Int("max-queue", 64, 0, 1 << 20));
  f.max_queue = static_cast<size_t>(queue);
  VLS_ASSIGN_OR_RETURN(long long body_mb, args.Int("max-body-mb", 64, 1, 4096));
  f.http.max_body_bytes = static_cast<size_t>(body_mb) << 20;
  VLS_ASSIGN_OR_RETURN(long long images, args.Int("max-images", 16, 0, 1024));
  f.http.limits.max_images = static_cast<size_t>(images);
  VLS_ASSIGN_OR_RETURN(long long frames, args.Int("video-max-frames", 768, 1, 1 << 16));
  VLS_ASSIGN_OR_RETURN(double fps, args.Double("video-max-fps", 60.0));
  if (!(fps > 0 && fps <= 1000)) {
    return InvalidArgument("--video-max-fps must be in (0, 1000], not " + std::to_string(fps));
  }
  f.encoder.max_video_frames = static_cast<int>(frames);
  f.encoder.max_video_fps = fps;
  f.http.limits.max_video_frames = f.encoder.max_video_frames;
  f.http.limits.max_video_fps = f.encoder.max_video_fps;
  VLS_ASSIGN_OR_RETURN(long long messages, args.Int("max-messages", 1024, 1, 1 << 20));
  f.http.limits.max_messages = static_cast<size_t>(messages);
  VLS_ASSIGN_OR_RETURN(long long drain, args.Int("drain-timeout", 30, 0, 86400));
  f.drain_timeout_s = static_cast<int>(drain);
  VLS_ASSIGN_OR_RETURN(long long chunk, args.Int("prefill-chunk", 64, 0, 1 << 24));
  f.prefill_chunk = static_cast<int>(chunk);
  VLS_ASSIGN_OR_RETURN(f.encode_share, args.Double("encode-share", kDefaultPacerShare));
  if (!(f.encode_share > 0 && f.encode_share <= kMaxPacerShare)) {
    char text[96];
    std::snprintf(text, sizeof(text), "--encode-share must be in (0, %g], not %g", kMaxPacerShare,
                  f.encode_share);
    return InvalidArgument(text);
  }
  VLS_RETURN_IF_ERROR(ApplySpeculativeFlags(args, &f.speculative));
  VLS_ASSIGN_OR_RETURN(long long threads, args.Int("http-threads", 1024, 4, 16384));
  f.http.http_threads = static_cast<int>(threads);
  f.http.log_requests = !args.Has("quiet");
  VLS_ASSIGN_OR_RETURN(long long overload, args.Int("overload-status", 429, 429, 503));
  if (overload != 429 && overload != 503) {
    return InvalidArgument("--overload-status must be 429 or 503, not " + std::to_string(overload));
  }
  f.http.overload_status = static_cast<int>(overload);
  if (auto dir = args.Get("allow-local-files")) {
    if (!std::filesystem::is_directory(*dir)) {
      return InvalidArgument("--allow-local-files: '" + *dir + "' is not a folder");
    }
    f.allow_files = std::filesystem::canonical(*dir).string();
  }
  return f;
}

// The model, its image encoder (when it has a tower), the pipeline and the service.
struct Loaded {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<LoadedModel> draft;  // --draft-model
  std::unique_ptr<ImageEncoder> images;
  std::unique_ptr<ChatPipeline> pipeline;
  std::unique_ptr<server::GenerationService> service;
};

StatusOr<Loaded> LoadAll(const Args& args, const ServeFlags& f, server::ServerMetrics* metrics) {
  Loaded l;
  LoadOptions lo = f.load;
  lo.progress = StderrProgress("serve");
  VLS_ASSIGN_OR_RETURN(l.model, LoadedModel::Load(f.dir, lo));
  VLS_ASSIGN_OR_RETURN(l.draft, LoadDraftModel(args, f.dir, *l.model, lo));
  VLS_RETURN_IF_ERROR(l.model->pacer().SetShare(f.encode_share));
  ChatPipelineOptions po;
  if (!f.allow_files.empty()) {
    po.media.allow_files = true;
    po.media.base_dir = f.allow_files;
    po.media.root_dir = f.allow_files;
  }
  if (l.model->vision_config()) {
    auto enc = ImageEncoder::Load(f.dir, *l.model, f.encoder);
    if (enc.ok()) {
      l.images = std::move(*enc);
      po.images = l.images.get();
    } else {
      po.images_unavailable = enc.status().ToString();
      std::fprintf(stderr, "[serve] images unavailable: %s\n", enc.status().ToString().c_str());
    }
  } else {
    po.images_unavailable = "the model folder has no vision tower";
  }
  VLS_ASSIGN_OR_RETURN(l.pipeline, ChatPipeline::Load(f.dir, *l.model, po));
  EngineOptions eo;
  eo.prefill_chunk = f.prefill_chunk;
  eo.speculative = f.speculative;
  eo.draft_model = l.draft.get();
  server::ServiceOptions so;
  so.max_queue = f.max_queue;
  VLS_ASSIGN_OR_RETURN(l.service,
                       server::GenerationService::Create(*l.model, *l.pipeline, eo, so, metrics));
  return l;
}

int Serve(const Args& args) {
  auto flags = ParseFlags(args);
  if (!flags.ok()) return Fail("serve", flags.status());
  const ServeFlags& f = *flags;

  // SIGTERM/SIGINT are taken by a signal thread (sigwait); every other thread blocks them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);  // the command's own wake-up of the signal thread at exit
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::ServerMetrics metrics;
  server::HttpServer http(f.http, &metrics);
  auto port = http.Bind();
  if (!port.ok()) return Fail("serve", port.status());
  std::atomic<bool> stopping{false};
  std::thread listener([&http] {
    Status s = http.Run();
    if (!s.ok()) std::fprintf(stderr, "[serve] %s\n", s.ToString().c_str());
  });
  std::fprintf(stderr, "[serve] listening on http://%s:%d (loading %s)\n", f.http.host.c_str(),
               *port, f.dir.c_str());
  std::fflush(stderr);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGUSR1) return;  // the server already stopped
    stopping.store(true);
    std::fprintf(stderr, "[serve] %s: draining (up to %d s)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", f.drain_timeout_s);
    const bool clean = http.Drain(std::chrono::seconds(f.drain_timeout_s));
    std::fprintf(stderr, "[serve] %s\n",
                 clean ? "drained: every request finished" : "drain timed out: cancelled the rest");
  });

  auto loaded = LoadAll(args, f, &metrics);
  if (!loaded.ok()) {
    const int rc = Fail("serve", loaded.status());
    http.Stop();
    listener.join();
    pthread_kill(signals.native_handle(), SIGUSR1);
    signals.join();
    return rc;
  }
  const LoadedModel& m = *loaded->model;
  http.SetReady(loaded->service.get(), loaded->pipeline.get(), m.bounds().capacity,
                loaded->images.get());
  std::fprintf(stderr, "[serve] ready: model '%s', %d slots x %d tokens, images %s\n",
               f.http.model_id.c_str(), m.bounds().slots, m.bounds().capacity,
               loaded->images ? "on" : "off");
  const KvShape kv = m.model().kv_shape();
  const uint64_t block = KvPool::BlockBytes(kv, m.kv_block_keys()).value_or(0);
  std::fprintf(stderr, "[serve] KV memory: %lld blocks of %d tokens = %lld tokens, %s (%s)\n",
               static_cast<long long>(m.kv_pool_blocks()), m.kv_block_keys(),
               static_cast<long long>(m.kv_pool_blocks()) * m.kv_block_keys(),
               FormatBytes(block * static_cast<uint64_t>(m.kv_pool_blocks())).c_str(),
               m.kv_pool_reason().c_str());
  std::fflush(stderr);
  listener.join();
  if (!stopping.load()) pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  return 0;
}

}  // namespace

CommandSpec ServeSpec() {
  CommandSpec spec;
  spec.name = "serve";
  spec.usage = std::string(kHelp) + SpeculativeFlagsHelp() + LoadFlagsHelp("bf16") +
               CheckWeightsFlagsHelp() + "  --help               this text\n";
  spec.value_flags = {"model",         "model-name",      "host",
                      "port",          "api-key",         "slots",
                      "capacity",      "max-queue",       "max-body-mb",
                      "max-images",    "max-messages",    "allow-local-files",
                      "drain-timeout", "prefill-chunk",   "encode-share",
                      "http-threads",  "overload-status", "video-max-frames",
                      "video-max-fps"};
  spec.value_flags.insert(LoadFlagNames().begin(), LoadFlagNames().end());
  spec.value_flags.insert(SpeculativeFlagNames().begin(), SpeculativeFlagNames().end());
  spec.bool_flags = {"quiet"};
  spec.bool_flags.insert(LoadBoolFlagNames().begin(), LoadBoolFlagNames().end());
  spec.example =
      "  vlstack serve --model Qwen/Qwen3-VL-2B-Instruct --port 8080 --slots 4\n"
      "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
      "      -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'\n";
  return spec;
}

int RunServe(int argc, char** argv) {
  int rc = 0;
  std::optional<Args> args = ParseCommandLine(ServeSpec(), argc, argv, &rc);
  if (!args) return rc;
  return Serve(*args);
}

}  // namespace vls::cli
