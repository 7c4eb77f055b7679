/* Chat requests through the C ABI: text in, text out. A model folder with the real Qwen3
 * tokenizer and a ChatML template; requests as JSON; the text taken in pieces while the batch
 * steps; stop strings cut exactly; bad requests refused whole. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void ChatTests(const char* dir_chat) {
  vls_model_options opts = vls_model_default_options();
  opts.capacity = 96;
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
