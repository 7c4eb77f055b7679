/* The C ABI test's shared part: the pass/fail counters and the CHECK macros, tensor
 * descriptors, the fixtures, and the rejection checks that more than one part uses. The parts:
 * capi_test_main.c (setup, version, load, info, identity), capi_test_session.c (sessions and
 * their rejections), capi_test_batch.c (batch misuse, the docs/contracts.md §3 example, rejected
 * submits) and capi_test_batch_parity.c (greedy parity with single sessions, the 1-D batch). */
#ifndef VLSTACK_CAPI_CAPI_TEST_UTIL_H_
#define VLSTACK_CAPI_CAPI_TEST_UTIL_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "vlstack/vlstack.h"

extern int g_passed;
extern int g_failed;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (cond) {                                                       \
      ++g_passed;                                                     \
    } else {                                                          \
      ++g_failed;                                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, " [last error: %s]\n", vls_last_error());       \
    }                                                                 \
  } while (0)

/* Fatal setup step: nothing after it can run. */
#define REQUIRE_OK(expr)                                                        \
  do {                                                                          \
    vls_status require_st_ = (expr);                                            \
    if (require_st_ != VLS_OK) {                                                \
      fprintf(stderr, "FATAL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, \
              vls_status_name(require_st_), vls_last_error());                  \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)

enum { kHidden = 64, kVocab = 512, kLayers = 3, kNmax = 8, kCapacity = 128, kS = 8, kDelta = -2 };

/* ---- descriptors ------------------------------------------------------------------------ */

vls_tensor Tn(const void* data, int32_t dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2);
vls_tensor T1(const void* d, int32_t dtype, int64_t d0);
vls_tensor T2(const void* d, int32_t dtype, int64_t d0, int64_t d1);
vls_tensor T3(const void* d, int32_t dtype, int64_t d0, int64_t d1, int64_t d2);

/* ---- fixtures --------------------------------------------------------------------------- */

extern int32_t g_tokens[kCapacity + 8];
extern float g_emb[16 * kHidden];               /* [16, H] */
extern int32_t g_pos3[3 * 16];                  /* [3, 16] sequential M-RoPE positions */
extern float g_feat[3 * (kNmax + 2) * kHidden]; /* up to [3, Nmax+2, H] */
extern int32_t g_image_token;                   /* set from vls_model_info by main */
extern const int32_t kLayerIdx[2];              /* the DeepStack model's target layers */

void FillFixtures(void);
/* Positions [3, S] for S <= 16, sequential (one shared buffer: valid until the next call). */
vls_tensor Positions3(int64_t S);
int AllFinite(const float* p, uint64_t n);
int Contains(const char* haystack, const char* needle);
/* Copies the session's logits into out (V floats). */
int CopyLogits(const vls_session* s, float* out);

/* ---- checks ----------------------------------------------------------------------------- */

/* A rejected call that has no session state to check. */
void RejectedPlain(const char* what, vls_status got, vls_status want, const char* needle);

size_t PendingCount(const vls_batch* b);
uint64_t PendingBytes(const vls_batch* b);
size_t ActiveCount(const vls_batch* b);
/* A rejected submit: status, message, no id written, queue and memory unchanged. */
void RejectedSubmit(const vls_batch* b, const char* what, vls_status got, vls_status want,
                    const char* needle, uint64_t id, size_t count0, uint64_t bytes0);

/* ---- the parts of the test, in the order main runs them ---------------------------------- */

/* Sessions on the DeepStack (M-RoPE) and plain (1-D) models: happy paths, the per-thread last
 * error, and every rejection case. */
void SessionTests(const vls_model* ds, const vls_model* plain);
/* The batch engine through the ABI; loads its own models from the two checkpoints. */
void BatchTests(const char* dir_ds, const char* dir_plain, vls_model_options opts);
/* Greedy parity of batch `b` (3 slots on model `m`) with single sessions. */
void BatchParityTests(const vls_model* m, vls_batch* b);
/* Chat requests (vls_chat_*, vls_batch_submit_chat, vls_batch_take_text) on a model folder with
 * the real tokenizer. */
void ChatTests(const char* dir_chat);
/* A 1-D model with two slots: text parity with deltas; DeepStack is refused. */
void BatchPlainTests(const char* dir_plain, vls_model_options opts);
/* A mixture-of-experts model (capi_test_moe.c): batch parity with sessions, a chat; writes its
 * checkpoints under `root`. */
void MoeTests(const char* root, vls_model_options opts);

#endif /* VLSTACK_CAPI_CAPI_TEST_UTIL_H_ */
