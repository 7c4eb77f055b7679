/* Chat requests through the C ABI: text in, text out. A model folder with the real Qwen3
 * tokenizer and a ChatML template; requests as JSON; the text taken in pieces while the batch
 * steps; stop strings cut exactly; bad requests refused whole. */
#define _XOPEN_SOURCE 700

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi/capi_test_support.h"
#include "capi/capi_test_util.h"
#include "vlstack/vlstack.h"

enum { kTextCap = 1 << 16 };

/* Runs a chat request to its end on a synchronously stepped batch, taking the text after every
 * step. Returns the finish reason (-1 on failure); the whole text goes to `text`. */
static int32_t RunChat(vls_batch* b, const vls_chat* chat, const char* json, char* text) {
  uint64_t id = 0;
  text[0] = '\0';
  if (vls_batch_submit_chat(b, chat, json, &id) != VLS_OK) {
    fprintf(stderr, "submit_chat failed: %s\n", vls_last_error());
    return -1;
  }
  int32_t finish = -1;
  int32_t finished = 0;
  size_t used = 0;
  for (int step = 0; step < 1000 && !finished; ++step) {
    vls_token_event ev[8];
    size_t n = 0;
    if (vls_batch_step(b, ev, 8, &n) != VLS_OK) return -1;
    for (size_t i = 0; i < n; ++i) {
      if (ev[i].request_id == id && ev[i].finish_reason != VLS_FINISH_NONE) {
        finish = ev[i].finish_reason;
      }
    }
    size_t needed = 0;
    if (vls_batch_take_text(b, id, text + used, kTextCap - used, &needed, &finished) != VLS_OK) {
      return -1;
    }
    used += needed - 1;
  }
  return finished ? finish : -1;
}

/* Whether s is three digits, '-', then "yes" or "no" (the structured-output test's regex). */
static int IsDigitsThenYesNo(const char* s) {
  for (int i = 0; i < 3; ++i) {
    if (s[i] < '0' || s[i] > '9') return 0;
  }
  return s[3] == '-' && (strcmp(s + 4, "yes") == 0 || strcmp(s + 4, "no") == 0);
}

/* s as the inside of a JSON string: quotes, backslashes and control bytes escaped, UTF-8 kept. */
static void JsonEscape(const char* s, char* out, size_t cap) {
  size_t o = 0;
  for (; *s != '\0' && o + 7 < cap; ++s) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
}

/* Length of the longest prefix of s that ends on a UTF-8 character boundary and is at most n. */
static size_t Utf8Floor(const char* s, size_t n) {
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) --n;
  return n;
}

/* vls_chat_tokenize, _detokenize and _render on the real Qwen3 tokenizer: known ids, round
 * trips (NUL bytes and invalid UTF-8 included), the size protocol, and every refusal. */
static void TokenizerTests(const vls_chat* chat) {
  enum { kIds = 256 };
  int32_t ids[kIds];
  size_t count = 12345;
  /* The size query, then the ids: "Hello world" is 9707 (Hello) 1879 (" world"). */
  CHECK(vls_chat_tokenize(chat, "Hello world", 11, NULL, 0, &count) == VLS_ERR_OUT_OF_RANGE &&
            count == 2,
        "a size query reports 2 ids (count %zu)", count);
  CHECK(Contains(vls_last_error(), "vls_chat_tokenize") && Contains(vls_last_error(), "2 tokens"),
        "the short-buffer message names the call and the size");
  ids[0] = ids[1] = -7;
  CHECK(vls_chat_tokenize(chat, "Hello world", 11, ids, 1, &count) == VLS_ERR_OUT_OF_RANGE &&
            count == 2 && ids[0] == -7,
        "a short buffer gets no ids");
  CHECK(vls_chat_tokenize(chat, "Hello world", 11, ids, kIds, &count) == VLS_OK && count == 2 &&
            ids[0] == 9707 && ids[1] == 1879,
        "\"Hello world\" is [9707, 1879] (got %zu ids: %d %d)", count, ids[0], ids[1]);
  /* Special tokens written in the text are recognised. */
  static const char kTurn[] = "<|im_start|>user\nHi<|im_end|>";
  CHECK(vls_chat_tokenize(chat, kTurn, sizeof(kTurn) - 1, ids, kIds, &count) == VLS_OK &&
            count >= 4 && ids[0] == 151644 && ids[count - 1] == 151645,
        "the special tokens are single ids (count %zu, first %d)", count, ids[0]);
  char text[1024];
  size_t needed = 0;
  CHECK(vls_chat_detokenize(chat, ids, count, 0, text, sizeof(text), &needed) == VLS_OK &&
            needed == sizeof(kTurn) && strcmp(text, kTurn) == 0,
        "detokenize gives the text back ('%s')", text);
  CHECK(vls_chat_detokenize(chat, ids, count, 1, text, sizeof(text), &needed) == VLS_OK &&
            strcmp(text, "user\nHi") == 0 && needed == 8,
        "skip_special leaves the special tokens out ('%s')", text);
  /* Empty text (NULL allowed); a NUL byte inside the text; invalid UTF-8 becomes U+FFFD. */
  CHECK(vls_chat_tokenize(chat, NULL, 0, NULL, 0, &count) == VLS_OK && count == 0,
        "empty text has no ids");
  CHECK(vls_chat_detokenize(chat, NULL, 0, 0, text, sizeof(text), &needed) == VLS_OK &&
            needed == 1 && text[0] == '\0',
        "no ids are the empty text");
  CHECK(vls_chat_tokenize(chat, "a\0b", 3, ids, kIds, &count) == VLS_OK && count >= 2,
        "a NUL byte is text (count %zu)", count);
  CHECK(vls_chat_detokenize(chat, ids, count, 0, text, sizeof(text), &needed) == VLS_OK &&
            needed == 4 && memcmp(text, "a\0b", 4) == 0,
        "and comes back: needed %zu", needed);
  CHECK(vls_chat_tokenize(chat, "x\xff", 2, ids, kIds, &count) == VLS_OK &&
            vls_chat_detokenize(chat, ids, count, 0, text, sizeof(text), &needed) == VLS_OK &&
            strcmp(text, "x\xEF\xBF\xBD") == 0,
        "invalid UTF-8 comes back as U+FFFD ('%s')", text);
  /* Random bytes always tokenize; random in-range ids always detokenize; printable ASCII
   * round-trips exactly. */
  uint32_t rng = 12345;
  for (int round = 0; round < 200; ++round) {
    char in[64];
    const size_t n = (size_t)(round % 63) + 1;
    for (size_t i = 0; i < n; ++i) {
      rng = rng * 1664525u + 1013904223u;
      in[i] = round % 2 == 0 ? (char)(rng >> 24) : (char)(' ' + (rng >> 24) % 95);
    }
    const vls_status st = vls_chat_tokenize(chat, in, n, ids, kIds, &count);
    CHECK(st == VLS_OK && count <= 3 * n, "random bytes tokenize (round %d: %s)", round,
          vls_status_name(st));
    if (st != VLS_OK) continue;
    CHECK(vls_chat_detokenize(chat, ids, count, round % 3 == 0, text, sizeof(text), &needed) ==
              VLS_OK,
          "their ids detokenize (round %d)", round);
    if (round % 2 == 1) {
      CHECK(needed == n + 1 && memcmp(text, in, n) == 0, "printable ASCII round-trips (round %d)",
            round);
    }
    for (size_t i = 0; i < 16; ++i) {
      rng = rng * 1664525u + 1013904223u;
      ids[i] = (int32_t)(rng % 151936u);
    }
    CHECK(vls_chat_detokenize(chat, ids, 16, round % 2, text, sizeof(text), &needed) == VLS_OK,
          "random in-range ids detokenize (round %d)", round);
  }

  /* Refusals: nothing written. */
  count = 777;
  RejectedPlain("tokenize NULL chat", vls_chat_tokenize(NULL, "x", 1, ids, kIds, &count),
                VLS_ERR_INVALID_ARGUMENT, "chat is NULL");
  RejectedPlain("tokenize NULL text", vls_chat_tokenize(chat, NULL, 3, ids, kIds, &count),
                VLS_ERR_INVALID_ARGUMENT, "text is NULL");
  RejectedPlain("tokenize NULL ids", vls_chat_tokenize(chat, "x", 1, NULL, 4, &count),
                VLS_ERR_INVALID_ARGUMENT, "ids is NULL");
  RejectedPlain("tokenize NULL count", vls_chat_tokenize(chat, "x", 1, ids, kIds, NULL),
                VLS_ERR_INVALID_ARGUMENT, "count is NULL");
  CHECK(count == 777, "a refused tokenize writes no count (%zu)", count);
  const int32_t bad[3] = {9707, -1, 151936};
  const int32_t big[2] = {9707, 151936};
  memcpy(text, "sentinel", 9);
  needed = 777;
  RejectedPlain("detokenize negative id",
                vls_chat_detokenize(chat, bad, 3, 0, text, sizeof(text), &needed),
                VLS_ERR_INVALID_ARGUMENT, "ids[1] = -1");
  RejectedPlain("detokenize id past V",
                vls_chat_detokenize(chat, big, 2, 0, text, sizeof(text), &needed),
                VLS_ERR_INVALID_ARGUMENT, "ids[1] = 151936");
  RejectedPlain("detokenize skip_special 2",
                vls_chat_detokenize(chat, bad, 1, 2, text, sizeof(text), &needed),
                VLS_ERR_INVALID_ARGUMENT, "skip_special");
  RejectedPlain("detokenize NULL ids", vls_chat_detokenize(chat, NULL, 2, 0, text, 16, &needed),
                VLS_ERR_INVALID_ARGUMENT, "ids is NULL");
  RejectedPlain("detokenize NULL buf", vls_chat_detokenize(chat, bad, 1, 0, NULL, 16, &needed),
                VLS_ERR_INVALID_ARGUMENT, "buf is NULL");
  RejectedPlain("detokenize NULL chat", vls_chat_detokenize(NULL, bad, 1, 0, text, 16, &needed),
                VLS_ERR_INVALID_ARGUMENT, "chat is NULL");
  CHECK(needed == 777 && strcmp(text, "sentinel") == 0, "a refused detokenize writes nothing");
  const int32_t hello[2] = {9707, 1879};
  CHECK(vls_chat_detokenize(chat, hello, 2, 0, text, 11, &needed) == VLS_ERR_OUT_OF_RANGE &&
            needed == 12 && strcmp(text, "sentinel") == 0,
        "a short buffer reports the size (%zu) and gets no text", needed);

  /* Render: the prompt vls_batch_submit_chat tokenizes. */
  const char* req =
      "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],"
      "\"max_tokens\":4}";
  static const char kPrompt[] = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n";
  CHECK(vls_chat_render(chat, req, text, sizeof(text), &needed) == VLS_OK &&
            needed == sizeof(kPrompt) && strcmp(text, kPrompt) == 0,
        "render gives the template's prompt ('%s')", text);
  CHECK(vls_chat_render(chat, req, NULL, 0, &needed) == VLS_ERR_OUT_OF_RANGE &&
            needed == sizeof(kPrompt),
        "a render size query reports %zu", needed);
  CHECK(vls_chat_render(chat,
                        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                        "\"image\":\"data:image/png;base64,AAAA\"}]}]}",
                        text, sizeof(text), &needed) == VLS_OK &&
            Contains(text, "<|vision_start|><|image_pad|><|vision_end|>"),
        "an image part renders as one pad, the image not decoded ('%s')", text);
  RejectedPlain("render not JSON", vls_chat_render(chat, "{messages", text, sizeof(text), NULL),
                VLS_ERR_INVALID_ARGUMENT, "JSON");
  RejectedPlain("render unknown field",
                vls_chat_render(chat, "{\"messages\":[],\"temp\":1}", text, sizeof(text), NULL),
                VLS_ERR_INVALID_ARGUMENT, "temp");
  RejectedPlain("render NULL json", vls_chat_render(chat, NULL, text, sizeof(text), NULL),
                VLS_ERR_INVALID_ARGUMENT, "request_json");
  RejectedPlain("render NULL buf", vls_chat_render(chat, req, NULL, 8, NULL),
                VLS_ERR_INVALID_ARGUMENT, "buf is NULL");
  RejectedPlain("render NULL chat", vls_chat_render(NULL, req, text, sizeof(text), NULL),
                VLS_ERR_INVALID_ARGUMENT, "chat is NULL");
}

/* vls_resolve_model: a folder as given, a repository id in a Hugging Face cache laid out here
 * (refs/main -> snapshots/<commit>, the snapshot a link to the chat folder), and refusals. */
static void ResolveTests(const char* dir_chat) {
  char buf[8192];
  size_t needed = 0;
  REQUIRE_OK(vls_resolve_model(dir_chat, buf, sizeof(buf), &needed));
  CHECK(strcmp(buf, dir_chat) == 0 && needed == strlen(dir_chat) + 1,
        "an existing folder resolves to itself ('%s')", buf);
  RejectedPlain("resolve short buffer", vls_resolve_model(dir_chat, buf, 3, &needed),
                VLS_ERR_OUT_OF_RANGE, "needs");
  CHECK(needed == strlen(dir_chat) + 1, "a short buffer still reports the size needed");
  RejectedPlain("resolve NULL", vls_resolve_model(NULL, buf, sizeof(buf), NULL),
                VLS_ERR_INVALID_ARGUMENT, "model");
  RejectedPlain("resolve NULL buf", vls_resolve_model(dir_chat, NULL, 8, NULL),
                VLS_ERR_INVALID_ARGUMENT, "buf");
  RejectedPlain("resolve missing",
                vls_resolve_model("/nonexistent/vls_model", buf, sizeof(buf), NULL),
                VLS_ERR_NOT_FOUND, "does not exist");
  char file[4200];
  snprintf(file, sizeof(file), "%s/config.json", dir_chat);
  RejectedPlain("resolve a file", vls_resolve_model(file, buf, sizeof(buf), NULL),
                VLS_ERR_INVALID_ARGUMENT, "not a folder");

  char cache[4200], cmd[20000], ref[4300], snapshot[4400];
  snprintf(cache, sizeof(cache), "%s_hf_cache", dir_chat);
  snprintf(snapshot, sizeof(snapshot), "%s/models--test-org--chat/snapshots/abc1234def", cache);
  snprintf(cmd, sizeof(cmd),
           "mkdir -p '%s/models--test-org--chat/refs' '%s/models--test-org--chat/snapshots' && ln "
           "-s '%s' '%s'",
           cache, cache, dir_chat, snapshot);
  CHECK(system(cmd) == 0, "laying out the cache");
  snprintf(ref, sizeof(ref), "%s/models--test-org--chat/refs/main", cache);
  FILE* f = fopen(ref, "w");
  CHECK(f != NULL, "writing refs/main");
  if (f == NULL) return;
  fputs("abc1234def\n", f);
  fclose(f);
  const char* old = getenv("HF_HUB_CACHE");
  char saved[4200] = "";
  if (old != NULL) snprintf(saved, sizeof(saved), "%s", old);
  setenv("HF_HUB_CACHE", cache, 1);
  REQUIRE_OK(vls_resolve_model("test-org/chat", buf, sizeof(buf), NULL));
  CHECK(strcmp(buf, snapshot) == 0, "a repository id resolves to its snapshot ('%s')", buf);
  REQUIRE_OK(vls_resolve_model("test-org/chat@abc1234", buf, sizeof(buf), NULL));
  CHECK(strcmp(buf, snapshot) == 0, "a commit prefix resolves to its snapshot ('%s')", buf);
  RejectedPlain("resolve uncached id", vls_resolve_model("test-org/absent", buf, sizeof(buf), NULL),
                VLS_ERR_NOT_FOUND, "models--test-org--absent: absent");
  RejectedPlain("resolve missing revision",
                vls_resolve_model("test-org/chat@v9", buf, sizeof(buf), NULL), VLS_ERR_NOT_FOUND,
                "no refs/v9 file");
  if (old != NULL) {
    setenv("HF_HUB_CACHE", saved, 1);
  } else {
    unsetenv("HF_HUB_CACHE");
  }
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache);
  CHECK(system(cmd) == 0, "removing the cache");
}

/* A video clip as a data: URL (vLLM's video_url part and transformers' video part): its frames
 * sampled at 2 per second, each pair of frames a timestamped group of the prompt; a part's own
 * num_frames changes the prompt. `first` is the reply to the same text without the clip. */
static void VideoChats(vls_batch* b, const vls_chat* chat, const char* clip, const char* first) {
  const size_t video_cap = strlen(clip) + 512;
  char* video_req = (char*)malloc(video_cap);
  if (video_req == NULL) {
    CHECK(0, "malloc");
    return;
  }
  static char with_video[kTextCap], with_video_again[kTextCap], with_two_frames[kTextCap];
  snprintf(video_req, video_cap,
           "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video_url\",\"video_url\":"
           "{\"url\":\"%s\"}},{\"type\":\"text\",\"text\":\"Hello there\"}]}],"
           "\"max_tokens\":16,\"ignore_eos\":true}",
           clip);
  const int32_t f5 = RunChat(b, chat, video_req, with_video);
  CHECK(f5 == VLS_FINISH_LENGTH, "a chat request with a video runs to its limit (finish %d)", f5);
  const int32_t f6 = RunChat(b, chat, video_req, with_video_again);
  CHECK(f6 == VLS_FINISH_LENGTH && strcmp(with_video, with_video_again) == 0,
        "the same video request gives the same text ('%s' vs '%s')", with_video, with_video_again);
  snprintf(video_req, video_cap,
           "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\",\"video\":"
           "\"%s\",\"num_frames\":2},{\"type\":\"text\",\"text\":\"Hello there\"}]}],"
           "\"max_tokens\":16,\"ignore_eos\":true}",
           clip);
  const int32_t f7 = RunChat(b, chat, video_req, with_two_frames);
  CHECK(f7 == VLS_FINISH_LENGTH, "a video part with num_frames runs (finish %d)", f7);
  CHECK(strcmp(with_video, first) != 0, "the video changes the reply ('%s')", with_video);
  free(video_req);
}

void ChatTests(const char* dir_chat) {
  ResolveTests(dir_chat);
  vls_model_options opts = vls_model_default_options();
  opts.capacity = 256;
  opts.slots = 2;
  vls_model* m = NULL;
  REQUIRE_OK(vls_model_load(dir_chat, &opts, &m));
  vls_chat* chat = NULL;
  vls_chat* none = NULL;
  RejectedPlain("chat NULL dir", vls_chat_create(m, NULL, &none), VLS_ERR_INVALID_ARGUMENT,
                "model_dir");
  RejectedPlain("chat missing dir", vls_chat_create(m, "/nonexistent/vls", &none),
                VLS_ERR_NOT_FOUND, "tokenizer");
  CHECK(none == NULL, "a refused vls_chat_create writes no handle");
  REQUIRE_OK(vls_chat_create(m, dir_chat, &chat));
  TokenizerTests(chat);
  vls_batch* b = NULL;
  REQUIRE_OK(vls_batch_create(m, &b));

  static char first[kTextCap], again[kTextCap], cut[kTextCap];
  const char* req =
      "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],"
      "\"max_tokens\":24,\"ignore_eos\":true}";
  const int32_t f1 = RunChat(b, chat, req, first);
  CHECK(f1 == VLS_FINISH_LENGTH, "a chat request runs to its length limit (finish %d)", f1);
  CHECK(strlen(first) > 0, "a chat request produces text");
  const int32_t f2 = RunChat(b, chat, req, again);
  CHECK(f2 == VLS_FINISH_LENGTH && strcmp(first, again) == 0,
        "the same greedy request gives the same text ('%s' vs '%s')", first, again);

  /* A stop string from the middle of the first text: the text stops right before it. */
  const size_t len = strlen(first);
  if (len >= 4) {
    const size_t start = Utf8Floor(first, len / 2);
    size_t end = Utf8Floor(first, start + 3 > len ? len : start + 3);
    if (end <= start) end = Utf8Floor(first, len);
    char stop[64];
    const size_t sl = end - start < sizeof(stop) - 1 ? end - start : sizeof(stop) - 1;
    memcpy(stop, first + start, sl);
    stop[sl] = '\0';
    char json[1024];
    char escaped[512];
    JsonEscape(stop, escaped, sizeof(escaped));
    snprintf(json, sizeof(json),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],"
             "\"max_tokens\":24,\"ignore_eos\":true,\"stop\":[\"%s\"]}",
             escaped);
    const int32_t f3 = RunChat(b, chat, json, cut);
    const char* at = strstr(first, stop);
    const size_t want = at == NULL ? len : (size_t)(at - first);
    CHECK(f3 == VLS_FINISH_STOP, "a stop string finishes with STOP (finish %d)", f3);
    CHECK(strlen(cut) == want && strncmp(cut, first, want) == 0,
          "the text is cut right before the stop string '%s': got '%s'", stop, cut);
  }

  /* Structured output: the reply follows the regex whatever the random model prefers. */
  static char constrained[kTextCap];
  const int32_t f5 = RunChat(b, chat,
                             "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],"
                             "\"max_tokens\":24,\"temperature\":1,\"seed\":3,"
                             "\"regex\":\"[0-9]{3}-(yes|no)\"}",
                             constrained);
  CHECK(f5 == VLS_FINISH_STOP, "a regex-constrained reply ends where the regex does (finish %d)",
        f5);
  CHECK(IsDigitsThenYesNo(constrained), "the reply matches [0-9]{3}-(yes|no): '%s'", constrained);
  static char object[kTextCap];
  const int32_t f6 = RunChat(b, chat,
                             "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],"
                             "\"max_tokens\":40,\"response_format\":{\"type\":\"json_schema\","
                             "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":"
                             "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},"
                             "\"required\":[\"ok\"]}}}}",
                             object);
  CHECK(f6 == VLS_FINISH_STOP || f6 == VLS_FINISH_LENGTH, "a schema reply finishes (finish %d)",
        f6);
  CHECK(object[0] == '{' && (f6 != VLS_FINISH_STOP || strstr(object, "\"ok\"") != NULL),
        "the schema reply is the object: '%s'", object);

  /* An image as a data: URL: a 24 x 16 PNG (grid 1 x 4 x 4 after smart_resize: 4 tokens). */
  static const char kPng[] =
      "iVBORw0KGgoAAAANSUhEUgAAABgAAAAQCAIAAACDRijCAAAAKUlEQVR42mNkYGDgogZiYeBnoAoYUgb9xyHOOPS9NmoQ"
      "H"
      "Q1iHA0jCAAA3CADBqShQtMAAAAASUVORK5CYII=";
  static char with_image[kTextCap];
  char image_req[1024];
  snprintf(image_req, sizeof(image_req),
           "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"image\":"
           "\"data:image/png;base64,%s\"},{\"type\":\"text\",\"text\":\"Hello there\"}]}],"
           "\"max_tokens\":24,\"ignore_eos\":true}",
           kPng);
  const int32_t f4 = RunChat(b, chat, image_req, with_image);
  CHECK(f4 == VLS_FINISH_LENGTH, "a chat request with an image runs to its limit (finish %d)", f4);
  CHECK(strcmp(with_image, first) != 0, "the image changes the reply ('%s')", with_image);

  char* clip = vls_test_video_data_url();
  CHECK(clip != NULL, "the video fixture tests/video/fixtures/h264_yuv420p.mp4 is readable");
  if (clip != NULL) VideoChats(b, chat, clip, first);
  free(clip);

  /* Refused whole: nothing queued, no id. */
  const size_t count0 = PendingCount(b);
  const uint64_t bytes0 = PendingBytes(b);
  uint64_t id = 777; /* the sentinel RejectedSubmit expects to stay unwritten */
  RejectedSubmit(b, "chat not JSON", vls_batch_submit_chat(b, chat, "{messages", &id),
                 VLS_ERR_INVALID_ARGUMENT, "JSON", id, count0, bytes0);
  RejectedSubmit(
      b, "chat unknown field",
      vls_batch_submit_chat(
          b, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temp\":1}", &id),
      VLS_ERR_INVALID_ARGUMENT, "temp", id, count0, bytes0);
  RejectedSubmit(
      b, "chat wrong type",
      vls_batch_submit_chat(
          b, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"8\"}",
          &id),
      VLS_ERR_INVALID_ARGUMENT, "max_tokens", id, count0, bytes0);
  RejectedSubmit(b, "chat image part",
                 vls_batch_submit_chat(b, chat,
                                       "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                       "\"image\",\"image\":\"a.png\"}]}]}",
                                       &id),
                 VLS_ERR_INVALID_ARGUMENT, "file paths are not accepted", id, count0, bytes0);
  RejectedSubmit(b, "chat video part",
                 vls_batch_submit_chat(b, chat,
                                       "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                       "\"video_url\",\"video_url\":{\"url\":\"a.mp4\"}}]}]}",
                                       &id),
                 VLS_ERR_INVALID_ARGUMENT, "file paths are not accepted", id, count0, bytes0);
  RejectedSubmit(b, "chat video not a video",
                 vls_batch_submit_chat(b, chat,
                                       "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                                       "\"text\",\"text\":\"x\"},{\"type\":\"video\",\"video\":"
                                       "\"data:video/mp4;base64,AAAAGGZ0eXBtcDQy\"}]}]}",
                                       &id),
                 VLS_ERR_DATA_LOSS, "messages[0].content[1]", id, count0, bytes0);
  RejectedSubmit(
      b, "chat bad regex",
      vls_batch_submit_chat(
          b, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"regex\":\"(a)\\\\1\"}",
          &id),
      VLS_ERR_INVALID_ARGUMENT, "regex", id, count0, bytes0);
  RejectedSubmit(b, "chat two constraints",
                 vls_batch_submit_chat(b, chat,
                                       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                       "\"regex\":\"a\",\"grammar\":\"root ::= \\\"a\\\"\"}",
                                       &id),
                 VLS_ERR_INVALID_ARGUMENT, "cannot be combined", id, count0, bytes0);
  RejectedSubmit(
      b, "chat too long",
      vls_batch_submit_chat(
          b, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":500}",
          &id),
      VLS_ERR_INVALID_ARGUMENT, "capacity", id, count0, bytes0);
  RejectedSubmit(b, "chat NULL json", vls_batch_submit_chat(b, chat, NULL, &id),
                 VLS_ERR_INVALID_ARGUMENT, "request_json", id, count0, bytes0);

  /* take_text: unknown ids, a buffer too small moves nothing. */
  size_t needed = 0;
  int32_t finished = 0;
  RejectedPlain("take_text unknown id", vls_batch_take_text(b, 999999, NULL, 0, &needed, NULL),
                VLS_ERR_NOT_FOUND, "999999");
  REQUIRE_OK(vls_batch_submit_chat(b, chat, req, &id));
  REQUIRE_OK(vls_batch_run_until_idle(b));
  CHECK(vls_batch_take_text(b, id, NULL, 0, &needed, &finished) == VLS_ERR_OUT_OF_RANGE &&
            needed == strlen(first) + 1,
        "a short buffer reports the size (%zu) and moves nothing", needed);
  CHECK(vls_batch_take_text(b, id, again, kTextCap, &needed, &finished) == VLS_OK &&
            strcmp(again, first) == 0 && finished == 1,
        "then the whole text comes out at once");
  RejectedPlain("take_text after the last piece", vls_batch_take_text(b, id, again, 16, NULL, NULL),
                VLS_ERR_NOT_FOUND, "taken");

  /* On the batch's own thread: submit, wait for the finish, take the text. */
  REQUIRE_OK(vls_batch_start(b));
  REQUIRE_OK(vls_batch_submit_chat(b, chat, req, &id));
  int done = 0;
  for (int i = 0; i < 2000 && !done; ++i) {
    vls_token_event ev[16];
    size_t n = 0;
    REQUIRE_OK(vls_batch_wait(b, 10, ev, 16, &n));
    for (size_t k = 0; k < n; ++k) {
      done = done || (ev[k].request_id == id && ev[k].finish_reason != VLS_FINISH_NONE);
    }
  }
  REQUIRE_OK(vls_batch_stop(b));
  CHECK(done && vls_batch_take_text(b, id, again, kTextCap, &needed, &finished) == VLS_OK &&
            strcmp(again, first) == 0 && finished == 1,
        "the threaded batch gives the same text");

  vls_batch_free(b);
  vls_chat_free(chat);
  vls_model_free(m);
}
