/* Sessions through the C ABI: the happy paths, the per-thread last error, then every rejection
 * case. After each rejected prefill or decode the session must keep its length and rope_delta,
 * and its next decode must give exactly the logits of a control session that never saw the bad
 * call. */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "capi/capi_test_util.h"
#include "vlstack/vlstack.h"

/* ---- the rejection harness ---------------------------------------------------------------- */

/* A pair of sessions on one model with the same history; `test` receives the bad calls. */
typedef struct Pair {
  const char* name;
  vls_session* test;
  vls_session* control;
  int32_t length; /* expected length of both */
  int32_t delta;
  float logits[kVocab]; /* the test session's logits after its last successful call */
} Pair;

/* Records the test session's logits after a successful call. */
static void Snapshot(Pair* p) {
  CHECK(CopyLogits(p->test, p->logits), "%s: no logits to snapshot", p->name);
}

static int32_t g_decode_token = 7;

/* Checks a rejected call: status, message, unchanged state, and identical next decode. */
static void Rejected(Pair* p, const char* what, vls_status got, vls_status want,
                     const char* needle) {
  const char* err = vls_last_error();
  CHECK(got == want, "%s/%s: status %s, want %s", p->name, what, vls_status_name(got),
        vls_status_name(want));
  CHECK(err != NULL && err[0] != '\0', "%s/%s: empty last error", p->name, what);
  CHECK(Contains(err, needle), "%s/%s: last error lacks '%s'", p->name, what, needle);
  int32_t len = -1, delta = 12345;
  vls_session_length(p->test, &len);
  vls_session_rope_delta(p->test, &delta);
  CHECK(len == p->length && delta == p->delta,
        "%s/%s: state moved to length %d delta %d (want %d, %d)", p->name, what, (int)len,
        (int)delta, (int)p->length, (int)p->delta);
  static float now[kVocab];
  CHECK(CopyLogits(p->test, now) && memcmp(now, p->logits, sizeof(now)) == 0,
        "%s/%s: a rejected call changed the session's logits", p->name, what);
  /* The rejection must not have touched the KV cache either. */
  g_decode_token = (g_decode_token * 13 + 5) % kVocab;
  vls_status a = vls_session_decode(p->test, g_decode_token);
  vls_status b = vls_session_decode(p->control, g_decode_token);
  CHECK(a == VLS_OK && b == VLS_OK, "%s/%s: decode after rejection failed", p->name, what);
  if (a == VLS_OK && b == VLS_OK) {
    static float lt[kVocab], lc[kVocab];
    CHECK(CopyLogits(p->test, lt) && CopyLogits(p->control, lc) && memcmp(lt, lc, sizeof(lt)) == 0,
          "%s/%s: decode logits differ from the control session", p->name, what);
    ++p->length;
    Snapshot(p);
  }
}

/* ---- thread-local last error -------------------------------------------------------------- */

static void* OtherThread(void* arg) {
  int* ok = (int*)arg;
  /* A fresh thread has no error, even though the main thread has one. */
  *ok = vls_last_error()[0] == '\0';
  int32_t out = 0;
  if (vls_session_length(NULL, &out) != VLS_ERR_INVALID_ARGUMENT) *ok = 0;
  if (!Contains(vls_last_error(), "session")) *ok = 0;
  return NULL;
}

/* ---- the sessions --------------------------------------------------------------------------- */

void SessionTests(const vls_model* ds, const vls_model* plain) {
  /* -- sessions: happy paths -- */
  vls_session* s = NULL;
  REQUIRE_OK(vls_session_create(ds, &s));
  RejectedPlain("session NULL model", vls_session_create(NULL, &s), VLS_ERR_INVALID_ARGUMENT,
                "model");
  RejectedPlain("session NULL out", vls_session_create(ds, NULL), VLS_ERR_INVALID_ARGUMENT, "out");
  {
    const float* lp = NULL;
    uint64_t n = 0;
    RejectedPlain("logits before any call", vls_session_logits(s, &lp, &n),
                  VLS_ERR_FAILED_PRECONDITION, "no prefill");
    RejectedPlain("decode before prefill", vls_session_decode(s, 1), VLS_ERR_FAILED_PRECONDITION,
                  "prefill");
    int32_t len = -1, delta = -1;
    CHECK(vls_session_length(s, &len) == VLS_OK && len == 0 &&
              vls_session_rope_delta(s, &delta) == VLS_OK && delta == 0,
          "fresh session");
    RejectedPlain("length NULL out", vls_session_length(s, NULL), VLS_ERR_INVALID_ARGUMENT, "out");
    RejectedPlain("logits NULL data", vls_session_logits(s, NULL, &n), VLS_ERR_INVALID_ARGUMENT,
                  "NULL");

    vls_tensor tok = T1(g_tokens, VLS_DTYPE_I32, kS);
    REQUIRE_OK(vls_session_prefill_tokens(s, &tok, VLS_POSITIONS_MROPE, NULL, kDelta));
    CHECK(vls_session_logits(s, &lp, &n) == VLS_OK && n == kVocab && AllFinite(lp, n),
          "prefill logits");
    static float seq[kVocab];
    memcpy(seq, lp, sizeof(seq));
    CHECK(vls_session_length(s, &len) == VLS_OK && len == kS &&
              vls_session_rope_delta(s, &delta) == VLS_OK && delta == kDelta,
          "length %d delta %d after prefill", (int)len, (int)delta);
    REQUIRE_OK(vls_session_decode(s, 5));
    CHECK(vls_session_logits(s, &lp, &n) == VLS_OK && n == kVocab && AllFinite(lp, n),
          "decode logits");
    CHECK(vls_session_length(s, &len) == VLS_OK && len == kS + 1, "length after decode");

    /* Explicit sequential positions equal the NULL default. */
    vls_tensor pos = Positions3(kS);
    REQUIRE_OK(vls_session_prefill_tokens(s, &tok, VLS_POSITIONS_MROPE, &pos, 0));
    CHECK(vls_session_logits(s, &lp, &n) == VLS_OK && memcmp(lp, seq, sizeof(seq)) == 0,
          "explicit sequential positions give the default's logits");

    /* Embeddings prefill, then DeepStack with Nv = 0 gives the same logits. */
    vls_tensor emb = T2(g_emb, VLS_DTYPE_F32, kS, kHidden);
    REQUIRE_OK(vls_session_prefill_embeddings(s, &emb, VLS_POSITIONS_MROPE, &pos, 1));
    static float plain_emb[kVocab];
    CHECK(vls_session_logits(s, &lp, &n) == VLS_OK && n == kVocab && AllFinite(lp, n),
          "embeddings logits");
    memcpy(plain_emb, lp, sizeof(plain_emb));
    const int32_t li[2] = {0, 2};
    vls_tensor layers = T1(li, VLS_DTYPE_I32, 2);
    vls_tensor vp0 = T1(NULL, VLS_DTYPE_I32, 0);
    vls_tensor f0 = T3(NULL, VLS_DTYPE_F32, 2, 0, kHidden);
    CHECK(vls_session_prefill_deepstack(s, &emb, VLS_POSITIONS_MROPE, &pos, 1, &vp0, &f0, &layers,
                                        NULL) == VLS_OK,
          "Nv = 0 accepted");
    CHECK(vls_session_logits(s, &lp, &n) == VLS_OK && memcmp(lp, plain_emb, sizeof(plain_emb)) == 0,
          "Nv = 0 equals the embeddings prefill");
    CHECK(vls_session_length(s, &len) == VLS_OK && len == kS &&
              vls_session_rope_delta(s, &delta) == VLS_OK && delta == 1,
          "deepstack commits length and delta");

    /* Nv = 2 with features changes the logits; with the request's ids naming the pads. */
    const int32_t vp[2] = {2, 5};
    vls_tensor vpos = T1(vp, VLS_DTYPE_I32, 2);
    vls_tensor feat = T3(g_feat, VLS_DTYPE_F32, 2, 2, kHidden);
    int32_t ids[kS];
    for (int i = 0; i < kS; ++i) ids[i] = (i == 2 || i == 5) ? g_image_token : (int32_t)(i + 1);
    vls_tensor idt = T1(ids, VLS_DTYPE_I32, kS);
    CHECK(vls_session_prefill_deepstack(s, &emb, VLS_POSITIONS_MROPE, &pos, 0, &vpos, &feat,
                                        &layers, &idt) == VLS_OK,
          "deepstack prefill with pad-token ids");
    CHECK(vls_session_logits(s, &lp, &n) == VLS_OK && n == kVocab && AllFinite(lp, n) &&
              memcmp(lp, plain_emb, sizeof(plain_emb)) != 0,
          "the features reach the logits");
    CHECK(vls_session_decode(s, 3) == VLS_OK && vls_session_logits(s, &lp, &n) == VLS_OK &&
              AllFinite(lp, n),
          "decode after deepstack");
  }
  vls_session_free(s);
  vls_session_free(NULL);

  /* -- last error is per thread -- */
  {
    RejectedPlain("main thread error", vls_session_decode(NULL, 1), VLS_ERR_INVALID_ARGUMENT,
                  "session");
    char before[512];
    snprintf(before, sizeof(before), "%s", vls_last_error());
    pthread_t th;
    int ok = 0;
    CHECK(pthread_create(&th, NULL, OtherThread, &ok) == 0 && pthread_join(th, NULL) == 0 && ok,
          "other thread sees its own last error");
    CHECK(strcmp(before, vls_last_error()) == 0,
          "other thread's failure leaves this thread's error");
  }

  /* -- rejections on the DeepStack (M-RoPE) model -- */
  static Pair p = {"ds", NULL, NULL, kS, kDelta, {0}};
  REQUIRE_OK(vls_session_create(ds, &p.test));
  REQUIRE_OK(vls_session_create(ds, &p.control));
  {
    vls_tensor tok = T1(g_tokens, VLS_DTYPE_I32, kS);
    REQUIRE_OK(vls_session_prefill_tokens(p.test, &tok, VLS_POSITIONS_MROPE, NULL, kDelta));
    REQUIRE_OK(vls_session_prefill_tokens(p.control, &tok, VLS_POSITIONS_MROPE, NULL, kDelta));
    Snapshot(&p);
  }
  const int M = VLS_POSITIONS_MROPE;
  const vls_status EINV = VLS_ERR_INVALID_ARGUMENT;
  {
    /* Token prefill. */
    vls_tensor t = T1(g_tokens, VLS_DTYPE_I32, kS);
    Rejected(&p, "tokens NULL session", vls_session_prefill_tokens(NULL, &t, M, NULL, 0), EINV,
             "session");
    Rejected(&p, "tokens NULL descriptor", vls_session_prefill_tokens(p.test, NULL, M, NULL, 0),
             EINV, "tokens");
    t.dtype = VLS_DTYPE_F32;
    Rejected(&p, "tokens wrong dtype", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "dtype");
    t.dtype = 9;
    Rejected(&p, "tokens unknown dtype", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "dtype");
    t = T2(g_tokens, VLS_DTYPE_I32, 2, 4);
    Rejected(&p, "tokens rank 2", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV, "rank");
    t = T1(g_tokens, VLS_DTYPE_I32, kS);
    t.rank = 0;
    Rejected(&p, "tokens rank 0", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV, "rank");
    t.rank = 5;
    Rejected(&p, "tokens rank 5", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV, "rank");
    t = T1(g_tokens, VLS_DTYPE_I32, kS);
    t.byte_length += 1;
    Rejected(&p, "tokens byte_length +1", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "byte_length");
    t.byte_length -= 2;
    Rejected(&p, "tokens byte_length -1", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "byte_length");
    t = T1(g_tokens, VLS_DTYPE_I32, kS);
    t.dims[0] = -3;
    Rejected(&p, "tokens negative dim", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "negative");
    t.dims[0] = (int64_t)1 << 62; /* 2^62 elements x 4 bytes overflows 64 bits */
    t.byte_length = 0;
    Rejected(&p, "tokens overflow dims", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "overflow");
    t = T1(NULL, VLS_DTYPE_I32, kS);
    Rejected(&p, "tokens NULL data", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "NULL");
    t = T1((const char*)g_tokens + 1, VLS_DTYPE_I32, kS);
    Rejected(&p, "tokens misaligned", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "aligned");
    t = T1(g_tokens, VLS_DTYPE_I32, 0);
    Rejected(&p, "tokens S = 0", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV, "empty");
    t = T1(g_tokens, VLS_DTYPE_I32, kCapacity + 1);
    Rejected(&p, "tokens S > capacity", vls_session_prefill_tokens(p.test, &t, M, NULL, 0),
             VLS_ERR_OUT_OF_RANGE, "capacity");
    int32_t bad_ids[kS];
    memcpy(bad_ids, g_tokens, sizeof(bad_ids));
    bad_ids[3] = kVocab;
    t = T1(bad_ids, VLS_DTYPE_I32, kS);
    Rejected(&p, "token id >= V", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "vocabulary");
    bad_ids[3] = -1;
    Rejected(&p, "token id < 0", vls_session_prefill_tokens(p.test, &t, M, NULL, 0), EINV,
             "vocabulary");
    t = T1(g_tokens, VLS_DTYPE_I32, kS);
    Rejected(&p, "tokens 1-D mode on M-RoPE model",
             vls_session_prefill_tokens(p.test, &t, VLS_POSITIONS_1D, NULL, 0), EINV,
             "position_mode");
    Rejected(&p, "tokens unknown mode", vls_session_prefill_tokens(p.test, &t, 7, NULL, 0), EINV,
             "position_mode");
    vls_tensor pos = T1(g_pos3, VLS_DTYPE_I32, kS);
    Rejected(&p, "positions [S] on M-RoPE", vls_session_prefill_tokens(p.test, &t, M, &pos, 0),
             EINV, "positions");
    pos = T2(g_pos3, VLS_DTYPE_I32, 3, kS - 1);
    Rejected(&p, "positions [3,S-1]", vls_session_prefill_tokens(p.test, &t, M, &pos, 0), EINV,
             "positions");
    pos = Positions3(kS);
    pos.dtype = VLS_DTYPE_F32;
    Rejected(&p, "positions dtype", vls_session_prefill_tokens(p.test, &t, M, &pos, 0), EINV,
             "positions");
    pos = Positions3(kS);
    pos.byte_length -= 1;
    Rejected(&p, "positions byte_length -1", vls_session_prefill_tokens(p.test, &t, M, &pos, 0),
             EINV, "byte_length");
    Rejected(&p, "rope_delta makes the decode coordinate negative",
             vls_session_prefill_tokens(p.test, &t, M, NULL, -100), VLS_ERR_OUT_OF_RANGE,
             "rope_delta");
    /* docs/contracts.md §3 pinned example: a failed prefill with +5 leaves the committed delta. */
    bad_ids[3] = kVocab;
    t = T1(bad_ids, VLS_DTYPE_I32, kS);
    Rejected(&p, "failed prefill with delta +5", vls_session_prefill_tokens(p.test, &t, M, NULL, 5),
             EINV, "tokens");

    /* Embeddings prefill. */
    static float e[kS * kHidden];
    memcpy(e, g_emb, sizeof(e));
    vls_tensor et = T2(e, VLS_DTYPE_F32, kS, kHidden);
    e[3 * kHidden + 7] = NAN;
    Rejected(&p, "NaN in embeddings", vls_session_prefill_embeddings(p.test, &et, M, NULL, 0), EINV,
             "not finite");
    e[3 * kHidden + 7] = INFINITY;
    Rejected(&p, "Inf in embeddings", vls_session_prefill_embeddings(p.test, &et, M, NULL, 0), EINV,
             "not finite");
    e[3 * kHidden + 7] = 0.f;
    et = T2(e, VLS_DTYPE_F32, kS * 2, kHidden / 2);
    Rejected(&p, "embeddings hidden mismatch",
             vls_session_prefill_embeddings(p.test, &et, M, NULL, 0), EINV, "embeddings: dims[1]");
    et = T2(e, VLS_DTYPE_I32, kS, kHidden);
    Rejected(&p, "embeddings dtype", vls_session_prefill_embeddings(p.test, &et, M, NULL, 0), EINV,
             "dtype");
    et = T3(e, VLS_DTYPE_F32, 1, kS, kHidden);
    Rejected(&p, "embeddings rank 3", vls_session_prefill_embeddings(p.test, &et, M, NULL, 0), EINV,
             "rank");
    et = T2(e, VLS_DTYPE_F32, kS, kHidden);
    et.byte_length += 1;
    Rejected(&p, "embeddings byte_length +1",
             vls_session_prefill_embeddings(p.test, &et, M, NULL, 0), EINV, "byte_length");
    et = T2(e, VLS_DTYPE_F32, (int64_t)1 << 60, kHidden);
    Rejected(&p, "embeddings overflow dims",
             vls_session_prefill_embeddings(p.test, &et, M, NULL, 0), EINV, "overflow");
    et = T2(e, VLS_DTYPE_F32, kS, kHidden);
    Rejected(&p, "embeddings wrong mode",
             vls_session_prefill_embeddings(p.test, &et, VLS_POSITIONS_1D, NULL, 0), EINV,
             "position_mode");
    Rejected(&p, "embeddings NULL", vls_session_prefill_embeddings(p.test, NULL, M, NULL, 0), EINV,
             "embeddings");

    /* Decode. */
    Rejected(&p, "decode token -1", vls_session_decode(p.test, -1), EINV, "vocabulary");
    Rejected(&p, "decode token V", vls_session_decode(p.test, kVocab), EINV, "vocabulary");
    Rejected(&p, "decode NULL session", vls_session_decode(NULL, 1), EINV, "session");

    /* DeepStack prefill: every rule of the four layers. */
    const int32_t li[2] = {0, 2};
    const int32_t vp[2] = {1, 4};
    vls_tensor emb = T2(g_emb, VLS_DTYPE_F32, kS, kHidden);
    vls_tensor L = T1(li, VLS_DTYPE_I32, 2);
    vls_tensor V = T1(vp, VLS_DTYPE_I32, 2);
    vls_tensor F = T3(g_feat, VLS_DTYPE_F32, 2, 2, kHidden);
    vls_tensor x;
#define DS(vv, ff, ll) \
  vls_session_prefill_deepstack(p.test, &emb, M, NULL, 0, (vv), (ff), (ll), NULL)
    Rejected(&p, "ds NULL session",
             vls_session_prefill_deepstack(NULL, &emb, M, NULL, 0, &V, &F, &L, NULL), EINV,
             "session");
    Rejected(&p, "ds NULL visual_positions", DS(NULL, &F, &L), EINV, "visual_positions");
    Rejected(&p, "ds NULL layer_features", DS(&V, NULL, &L), EINV, "layer_features");
    Rejected(&p, "ds NULL layer_indices", DS(&V, &F, NULL), EINV, "layer_indices");
    x = V;
    x.dtype = VLS_DTYPE_F32;
    Rejected(&p, "ds visual_positions dtype", DS(&x, &F, &L), EINV, "deepstack.dtype");
    x = L;
    x.dtype = VLS_DTYPE_F32;
    Rejected(&p, "ds layer_indices dtype", DS(&V, &F, &x), EINV, "deepstack.dtype");
    x = F;
    x.dtype = VLS_DTYPE_I32;
    Rejected(&p, "ds layer_features dtype", DS(&V, &x, &L), EINV, "deepstack.dtype");
    x = T2(g_feat, VLS_DTYPE_F32, 2, 2 * kHidden);
    Rejected(&p, "ds layer_features rank 2", DS(&V, &x, &L), EINV, "deepstack.rank");
    x = T2(vp, VLS_DTYPE_I32, 1, 2);
    Rejected(&p, "ds visual_positions rank 2", DS(&x, &F, &L), EINV, "deepstack.rank");
    x = T1(li, VLS_DTYPE_I32, 0);
    Rejected(&p, "ds empty layer set", DS(&V, &F, &x), EINV, "deepstack.empty_layer_set");
    x = T3(g_feat, VLS_DTYPE_F32, 2, 3, kHidden);
    Rejected(&p, "ds features Nv mismatch", DS(&V, &x, &L), EINV, "deepstack.shape");
    x = T3(g_feat, VLS_DTYPE_F32, 2, 2, 0);
    Rejected(&p, "ds features H = 0", DS(&V, &x, &L), EINV, "deepstack.shape");
    x = F;
    x.byte_length -= 1;
    Rejected(&p, "ds features byte_length -1", DS(&V, &x, &L), EINV, "deepstack.byte_count");
    x = V;
    x.byte_length += 1;
    Rejected(&p, "ds positions byte_length +1", DS(&x, &F, &L), EINV, "deepstack.byte_count");
    x = T3(NULL, VLS_DTYPE_F32, 2, 2, kHidden);
    Rejected(&p, "ds features NULL data", DS(&V, &x, &L), EINV, "NULL");
    {
      const int32_t unsorted[2] = {4, 1};
      x = T1(unsorted, VLS_DTYPE_I32, 2);
      Rejected(&p, "ds unsorted positions", DS(&x, &F, &L), EINV, "deepstack.positions_not_sorted");
      const int32_t dup[2] = {3, 3};
      x = T1(dup, VLS_DTYPE_I32, 2);
      Rejected(&p, "ds duplicate positions", DS(&x, &F, &L), EINV,
               "deepstack.positions_not_sorted");
      const int32_t past[2] = {2, kS};
      x = T1(past, VLS_DTYPE_I32, 2);
      Rejected(&p, "ds position >= S", DS(&x, &F, &L), EINV, "deepstack.position_out_of_range");
      const int32_t neg[2] = {-1, 2};
      x = T1(neg, VLS_DTYPE_I32, 2);
      Rejected(&p, "ds position < 0", DS(&x, &F, &L), EINV, "deepstack.position_out_of_range");
      const int32_t negl[2] = {-1, 2};
      x = T1(negl, VLS_DTYPE_I32, 2);
      Rejected(&p, "ds negative layer", DS(&V, &F, &x), EINV, "deepstack.negative_layer");
      const int32_t wrong[2] = {0, 1};
      x = T1(wrong, VLS_DTYPE_I32, 2);
      Rejected(&p, "ds layer contract mismatch", DS(&V, &F, &x), EINV, "deepstack.layer_contract");
      const int32_t three[3] = {0, 1, 2};
      vls_tensor f3 = T3(g_feat, VLS_DTYPE_F32, 3, 2, kHidden);
      x = T1(three, VLS_DTYPE_I32, 3);
      Rejected(&p, "ds K differs from the model's", DS(&V, &f3, &x), EINV,
               "deepstack.layer_contract");
      static float nanf_[2 * 2 * kHidden];
      memcpy(nanf_, g_feat, sizeof(nanf_));
      nanf_[kHidden + 5] = NAN;
      x = T3(nanf_, VLS_DTYPE_F32, 2, 2, kHidden);
      Rejected(&p, "ds NaN feature", DS(&V, &x, &L), EINV, "deepstack.non_finite_feature");
      nanf_[kHidden + 5] = -INFINITY;
      Rejected(&p, "ds Inf feature", DS(&V, &x, &L), EINV, "deepstack.non_finite_feature");
      /* Nv > Nmax needs S > Nmax. */
      int32_t many[kNmax + 1];
      for (int i = 0; i < kNmax + 1; ++i) many[i] = i;
      vls_tensor vm = T1(many, VLS_DTYPE_I32, kNmax + 1);
      vls_tensor fm = T3(g_feat, VLS_DTYPE_F32, 2, kNmax + 1, kHidden);
      vls_tensor e12 = T2(g_emb, VLS_DTYPE_F32, 12, kHidden);
      Rejected(&p, "ds Nv > Nmax",
               vls_session_prefill_deepstack(p.test, &e12, M, NULL, 0, &vm, &fm, &L, NULL), EINV,
               "deepstack.static_max_overflow");
      x = T3(g_feat, VLS_DTYPE_F32, 2, 2, kHidden / 2);
      Rejected(&p, "ds hidden mismatch", DS(&V, &x, &L), EINV, "deepstack.hidden_mismatch");
      Rejected(
          &p, "ds wrong position mode",
          vls_session_prefill_deepstack(p.test, &emb, VLS_POSITIONS_1D, NULL, 0, &V, &F, &L, NULL),
          EINV, "deepstack.position_mode");
      vls_tensor p1 = T1(g_pos3, VLS_DTYPE_I32, kS);
      Rejected(&p, "ds 1-D positions on M-RoPE",
               vls_session_prefill_deepstack(p.test, &emb, M, &p1, 0, &V, &F, &L, NULL), EINV,
               "positions");
      static float en[kS * kHidden];
      memcpy(en, g_emb, sizeof(en));
      en[kHidden * 2] = NAN;
      vls_tensor ent = T2(en, VLS_DTYPE_F32, kS, kHidden);
      Rejected(&p, "ds NaN in embeddings",
               vls_session_prefill_deepstack(p.test, &ent, M, NULL, 0, &V, &F, &L, NULL), EINV,
               "not finite");
      /* The request's ids must put pad tokens exactly at the visual positions. */
      int32_t ids[kS];
      for (int i = 0; i < kS; ++i) ids[i] = (i == 1 || i == 5) ? g_image_token : (int32_t)(i + 1);
      vls_tensor it = T1(ids, VLS_DTYPE_I32, kS);
      Rejected(&p, "ds positions differ from pad tokens",
               vls_session_prefill_deepstack(p.test, &emb, M, NULL, 0, &V, &F, &L, &it), EINV,
               "deepstack.visual_count_mismatch");
      ids[4] = g_image_token;
      Rejected(&p, "ds pad count differs from Nv",
               vls_session_prefill_deepstack(p.test, &emb, M, NULL, 0, &V, &F, &L, &it), EINV,
               "deepstack.visual_count_mismatch");
      it = T1(ids, VLS_DTYPE_I32, kS - 1);
      Rejected(&p, "ds token_ids shape",
               vls_session_prefill_deepstack(p.test, &emb, M, NULL, 0, &V, &F, &L, &it), EINV,
               "token_ids");
      Rejected(&p, "ds rope_delta negative coordinate",
               vls_session_prefill_deepstack(p.test, &emb, M, NULL, -100, &V, &F, &L, NULL),
               VLS_ERR_OUT_OF_RANGE, "rope_delta");
    }
#undef DS
    /* The same valid payload is still accepted afterwards (the rejections left no residue). */
    CHECK(vls_session_prefill_deepstack(p.test, &emb, M, NULL, 0, &V, &F, &L, NULL) == VLS_OK,
          "valid deepstack after the rejections");
  }
  vls_session_free(p.test);
  vls_session_free(p.control);

  /* -- rejections on the plain (1-D, no DeepStack) model -- */
  static Pair q = {"plain", NULL, NULL, kS, 3, {0}};
  REQUIRE_OK(vls_session_create(plain, &q.test));
  REQUIRE_OK(vls_session_create(plain, &q.control));
  {
    vls_tensor tok = T1(g_tokens, VLS_DTYPE_I32, kS);
    REQUIRE_OK(vls_session_prefill_tokens(q.test, &tok, VLS_POSITIONS_1D, NULL, 3));
    REQUIRE_OK(vls_session_prefill_tokens(q.control, &tok, VLS_POSITIONS_1D, NULL, 3));
    Snapshot(&q);
    const int32_t li[2] = {0, 1};
    const int32_t vp[2] = {1, 4};
    vls_tensor emb = T2(g_emb, VLS_DTYPE_F32, kS, kHidden);
    vls_tensor L = T1(li, VLS_DTYPE_I32, 2);
    vls_tensor V = T1(vp, VLS_DTYPE_I32, 2);
    vls_tensor F = T3(g_feat, VLS_DTYPE_F32, 2, 2, kHidden);
    Rejected(
        &q, "DeepStack on a model without DeepStack",
        vls_session_prefill_deepstack(q.test, &emb, VLS_POSITIONS_1D, NULL, 0, &V, &F, &L, NULL),
        EINV, "deepstack.not_declared");
    Rejected(&q, "M-RoPE mode on a 1-D model", vls_session_prefill_tokens(q.test, &tok, M, NULL, 0),
             EINV, "position_mode");
    vls_tensor pos = Positions3(kS);
    Rejected(&q, "positions [3,S] on a 1-D model",
             vls_session_prefill_tokens(q.test, &tok, VLS_POSITIONS_1D, &pos, 0), EINV,
             "positions");
    vls_tensor p1 = T1(g_pos3, VLS_DTYPE_I32, kS);
    CHECK(vls_session_prefill_tokens(q.test, &tok, VLS_POSITIONS_1D, &p1, 3) == VLS_OK &&
              vls_session_prefill_tokens(q.control, &tok, VLS_POSITIONS_1D, NULL, 3) == VLS_OK,
          "1-D explicit positions accepted");
    q.length = kS;
    Snapshot(&q);
    Rejected(&q, "after re-prefill: bad token", vls_session_decode(q.test, kVocab), EINV,
             "vocabulary");
  }
  vls_session_free(q.test);
  vls_session_free(q.control);
}
