/* A mixture-of-experts model through the C ABI (issue 32): a tiny qwen3-vl-moe loads, its batch
 * gives every request the greedy tokens of a single session while several requests share the
 * experts of one pass, and a chat request answers (the same text twice). */
#define _XOPEN_SOURCE 700

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "capi/capi_test_support.h"
#include "capi/capi_test_util.h"
#include "vlstack/vlstack.h"

enum { kMoeRequests = 3, kMoeGen = 8, kMoeTextCap = 1 << 14 };

/* The greedy tokens of `ids` [S] alone on a session (sequential positions, delta 0). */
static int MoeGreedyAlone(const vls_model* m, const int32_t* ids, int64_t S, int32_t* out) {
  vls_session* s = NULL;
  if (vls_session_create(m, &s) != VLS_OK) return 0;
  vls_tensor t = T1(ids, VLS_DTYPE_I32, S);
  int ok = vls_session_prefill_tokens(s, &t, VLS_POSITIONS_MROPE, NULL, 0) == VLS_OK;
  for (int i = 0; ok && i < kMoeGen; ++i) {
    const float* l = NULL;
    uint64_t n = 0;
    ok = vls_session_logits(s, &l, &n) == VLS_OK && n == kVocab;
    int32_t best = 0;
    for (int32_t v = 1; ok && v < kVocab; ++v) {
      if (l[v] > l[best]) best = v;
    }
    out[i] = best;
    if (ok && i + 1 < kMoeGen) ok = vls_session_decode(s, best) == VLS_OK;
  }
  vls_session_free(s);
  return ok;
}

/* A chat request's whole text on a batch run until idle; the finish reason, -1 on failure. */
static int32_t MoeChat(vls_batch* b, const vls_chat* chat, const char* json, char* text) {
  uint64_t id = 0;
  if (vls_batch_submit_chat(b, chat, json, &id) != VLS_OK) return -1;
  if (vls_batch_run_until_idle(b) != VLS_OK) return -1;
  int32_t finish = -1;
  vls_token_event ev[32];
  size_t n = 32;
  while (n == 32) {
    if (vls_batch_poll(b, ev, 32, &n) != VLS_OK) return -1;
    for (size_t i = 0; i < n; ++i) {
      if (ev[i].request_id == id && ev[i].finish_reason != VLS_FINISH_NONE) {
        finish = ev[i].finish_reason;
      }
    }
  }
  size_t needed = 0;
  int32_t finished = 0;
  if (vls_batch_take_text(b, id, text, kMoeTextCap, &needed, &finished) != VLS_OK || !finished) {
    return -1;
  }
  return finish;
}

void MoeTests(const char* root, vls_model_options opts) {
  char dir[4200], dir_chat[4200];
  snprintf(dir, sizeof(dir), "%s/moe", root);
  snprintf(dir_chat, sizeof(dir_chat), "%s/moe_chat", root);
  /* Every layer sparse: 8 experts, top 2. */
  if (vls_test_write_checkpoint(dir, "qwen3-vl-moe", kHidden, kLayers, kLayerIdx, 2, kNmax, 5)) {
    CHECK(0, "the MoE checkpoint was not written");
    return;
  }
  opts.slots = kMoeRequests;
  vls_model* m = NULL;
  REQUIRE_OK(vls_model_load(dir, &opts, &m));
  vls_model_desc d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  REQUIRE_OK(vls_model_info(m, &d));
  CHECK(d.hidden == kHidden && d.vocab == kVocab && d.layers == kLayers, "moe info");

  static const int32_t prompts[kMoeRequests][6] = {
      {11, 12, 13, 14, 15, 16}, {100, 90, 80, 70, 60, 50}, {7, 7, 7, 300, 301, 302}};
  int32_t want[kMoeRequests][kMoeGen];
  for (int r = 0; r < kMoeRequests; ++r) {
    CHECK(MoeGreedyAlone(m, prompts[r], 6, want[r]), "moe session %d", r);
  }
  CHECK(memcmp(want[0], want[1], sizeof(want[0])) != 0, "different prompts, different replies");
  vls_batch* b = NULL;
  REQUIRE_OK(vls_batch_create(m, &b));
  vls_request_options o = vls_request_default_options();
  o.max_new_tokens = kMoeGen;
  o.ignore_eos = 1;
  uint64_t ids[kMoeRequests];
  for (int r = 0; r < kMoeRequests; ++r) {
    vls_tensor t = T1(prompts[r], VLS_DTYPE_I32, 6);
    REQUIRE_OK(vls_batch_submit_tokens(b, &t, VLS_POSITIONS_MROPE, NULL, 0, &o, &ids[r]));
  }
  REQUIRE_OK(vls_batch_run_until_idle(b));
  int32_t got[kMoeRequests][kMoeGen];
  int count[kMoeRequests] = {0};
  vls_token_event ev[64];
  size_t n = 64;
  while (n == 64) {
    REQUIRE_OK(vls_batch_poll(b, ev, 64, &n));
    for (size_t i = 0; i < n; ++i) {
      for (int r = 0; r < kMoeRequests; ++r) {
        if (ev[i].request_id == ids[r] && ev[i].token >= 0 && count[r] < kMoeGen) {
          got[r][count[r]++] = ev[i].token;
        }
      }
    }
  }
  for (int r = 0; r < kMoeRequests; ++r) {
    CHECK(count[r] == kMoeGen && memcmp(got[r], want[r], sizeof(want[r])) == 0,
          "moe batch request %d: %d tokens, equal to the session's: %d", r, count[r],
          count[r] == kMoeGen && memcmp(got[r], want[r], sizeof(want[r])) == 0);
  }
  vls_batch_free(b);
  vls_model_free(m);

  /* A chat on a MoE model with the real tokenizer. */
  if (vls_test_write_moe_chat_model(dir_chat, 9) != 0) {
    CHECK(0, "the MoE chat model was not written");
    return;
  }
  vls_model_options co = vls_model_default_options();
  co.capacity = 256;
  REQUIRE_OK(vls_model_load(dir_chat, &co, &m));
  vls_chat* chat = NULL;
  REQUIRE_OK(vls_chat_create(m, dir_chat, &chat));
  REQUIRE_OK(vls_batch_create(m, &b));
  static char a[kMoeTextCap], again[kMoeTextCap];
  const char* json =
      "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story.\"}],\"max_tokens\":12}";
  const int32_t f1 = MoeChat(b, chat, json, a);
  const int32_t f2 = MoeChat(b, chat, json, again);
  CHECK((f1 == VLS_FINISH_LENGTH || f1 == VLS_FINISH_STOP) && f2 == f1, "moe chat finish %d %d",
        (int)f1, (int)f2);
  CHECK(f1 != VLS_FINISH_LENGTH || a[0] != '\0', "moe chat: no text from 12 tokens");
  CHECK(strcmp(a, again) == 0, "moe chat: greedy replies differ: '%s' vs '%s'", a, again);
  vls_batch_free(b);
  vls_chat_free(chat);
  vls_model_free(m);
}
