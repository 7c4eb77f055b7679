/* The batch engine through the C ABI: misuse of the batch calls, the docs/contracts.md §3 batch
 * example, and rejected submits that change nothing (a queued cancel gives memory back); the
 * greedy parity runs are in capi_test_batch_parity.c. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "capi/capi_test_util.h"
#include "vlstack/vlstack.h"

void BatchTests(const char* dir_ds, const char* dir_plain, vls_model_options opts) {
  const int M = VLS_POSITIONS_MROPE;
  const vls_status EINV = VLS_ERR_INVALID_ARGUMENT;
  opts.slots = 3;
  vls_model* m = NULL;
  REQUIRE_OK(vls_model_load(dir_ds, &opts, &m));
  vls_batch* b = NULL;
  REQUIRE_OK(vls_batch_create(m, &b));
  {
    vls_batch* none = NULL;
    RejectedPlain("batch NULL model", vls_batch_create(NULL, &none), EINV, "model");
    RejectedPlain("batch NULL out", vls_batch_create(m, NULL), EINV, "out");
    CHECK(none == NULL, "a refused create writes no handle");
    vls_batch_free(NULL);
    vls_request_options o = vls_request_default_options();
    CHECK(o.struct_size == sizeof(vls_request_options) && sizeof(vls_request_options) == 56 &&
              o.max_new_tokens > 0 && o.temperature == 0.f && o.top_p == 1.f &&
              o.repetition_penalty == 1.f && o.has_seed == 0,
          "request defaults");
    CHECK(PendingCount(b) == 0 && ActiveCount(b) == 0 && PendingBytes(b) == 0, "empty batch");
    size_t n = 99;
    CHECK(vls_batch_step(b, NULL, 0, &n) == VLS_OK && n == 0, "a step on an empty batch");
    RejectedPlain("step NULL count", vls_batch_step(b, NULL, 0, NULL), EINV, "count");
    vls_token_event ev;
    RejectedPlain("poll NULL events", vls_batch_poll(b, NULL, 1, &n), EINV, "events");
    RejectedPlain("poll NULL batch", vls_batch_poll(NULL, &ev, 1, &n), EINV, "batch");
    RejectedPlain("wait negative timeout", vls_batch_wait(b, -1, &ev, 1, &n), EINV, "timeout");
    RejectedPlain("cancel unknown id", vls_batch_cancel(b, 424242), VLS_ERR_NOT_FOUND, "424242");
    int32_t c3[3];
    RejectedPlain("coordinate unknown id", vls_batch_next_coordinate(b, 5, c3), VLS_ERR_NOT_FOUND,
                  "not active");
    char buf[8];
    size_t need = 0;
    RejectedPlain("request_error unknown id",
                  vls_batch_request_error(b, 5, buf, sizeof(buf), &need), VLS_ERR_NOT_FOUND,
                  "error");
    RejectedPlain("request_error NULL buf", vls_batch_request_error(b, 5, NULL, 8, &need), EINV,
                  "buf");
  }

  /* -- docs/contracts.md §3: S=4 with deltas -1, +2, 0 decode first at 3, 6, 4; cancel the +2 and a
   *    4-token text request admitted into its slot gives 4 -- */
  {
    vls_request_options o = vls_request_default_options();
    o.max_new_tokens = 8;
    o.ignore_eos = 1;
    vls_tensor t4 = T1(g_tokens, VLS_DTYPE_I32, 4);
    uint64_t a = 0, bb = 0, c = 0, d = 0;
    REQUIRE_OK(vls_batch_submit_tokens(b, &t4, M, NULL, -1, &o, &a));
    REQUIRE_OK(vls_batch_submit_tokens(b, &t4, M, NULL, 2, &o, &bb));
    REQUIRE_OK(vls_batch_submit_tokens(b, &t4, M, NULL, 0, &o, &c));
    CHECK(a != 0 && bb == a + 1 && c == a + 2, "ids %llu %llu %llu", (unsigned long long)a,
          (unsigned long long)bb, (unsigned long long)c);
    CHECK(PendingCount(b) == 3 && ActiveCount(b) == 0 && PendingBytes(b) > 0, "three queued");
    vls_token_event ev[8];
    size_t n = 0;
    REQUIRE_OK(vls_batch_admit(b, ev, 8, &n));
    CHECK(n == 3 && PendingCount(b) == 0 && ActiveCount(b) == 3 && PendingBytes(b) == 0,
          "admit: %zu events", n);
    int32_t ca[3] = {-9, -9, -9}, cb[3] = {-9, -9, -9}, cc[3] = {-9, -9, -9}, cd[3] = {-9, -9, -9};
    REQUIRE_OK(vls_batch_next_coordinate(b, a, ca));
    REQUIRE_OK(vls_batch_next_coordinate(b, bb, cb));
    REQUIRE_OK(vls_batch_next_coordinate(b, c, cc));
    CHECK(ca[0] == 3 && ca[1] == 3 && ca[2] == 3, "delta -1 -> 3, got %d,%d,%d", ca[0], ca[1],
          ca[2]);
    CHECK(cb[0] == 6 && cb[1] == 6 && cb[2] == 6, "delta +2 -> 6, got %d", cb[0]);
    CHECK(cc[0] == 4 && cc[1] == 4 && cc[2] == 4, "delta 0 -> 4, got %d", cc[0]);
    int32_t slot_b = -1, slot_d = -2;
    REQUIRE_OK(vls_batch_slot_of(b, bb, &slot_b));
    REQUIRE_OK(vls_batch_cancel(b, bb));
    CHECK(ActiveCount(b) == 2, "cancel frees the slot");
    RejectedPlain("coordinate of a cancelled request", vls_batch_next_coordinate(b, bb, cd),
                  VLS_ERR_NOT_FOUND, "not active");
    CHECK(cd[0] == -9, "a refused coordinate call writes nothing");
    RejectedPlain("cancel twice", vls_batch_cancel(b, bb), VLS_ERR_NOT_FOUND, "not queued");
    CHECK(vls_batch_poll(b, ev, 8, &n) == VLS_OK && n == 1 && ev[0].request_id == bb &&
              ev[0].finish_reason == VLS_FINISH_CANCELLED && ev[0].token == -1,
          "the cancel is one CANCELLED event");
    REQUIRE_OK(vls_batch_submit_tokens(b, &t4, M, NULL, 0, &o, &d));
    REQUIRE_OK(vls_batch_admit(b, ev, 8, &n));
    CHECK(n == 1 && ev[0].request_id == d && ev[0].finish_reason == VLS_FINISH_NONE,
          "d's first token");
    REQUIRE_OK(vls_batch_next_coordinate(b, d, cd));
    CHECK(cd[0] == 4 && cd[1] == 4 && cd[2] == 4, "reused slot with delta 0 -> 4, got %d", cd[0]);
    CHECK(vls_batch_slot_of(b, d, &slot_d) == VLS_OK && slot_d == slot_b,
          "d reuses the cancelled slot (%d vs %d)", (int)slot_d, (int)slot_b);
    /* One step decodes every active row: each coordinate moves by one. */
    REQUIRE_OK(vls_batch_step(b, ev, 8, &n));
    CHECK(n == 3, "one step, three tokens (%zu)", n);
    REQUIRE_OK(vls_batch_next_coordinate(b, a, ca));
    CHECK(ca[0] == 4, "a decoded once -> 4, got %d", ca[0]);
    REQUIRE_OK(vls_batch_cancel(b, a));
    REQUIRE_OK(vls_batch_cancel(b, c));
    REQUIRE_OK(vls_batch_cancel(b, d));
    CHECK(ActiveCount(b) == 0, "all cancelled");
    CHECK(vls_batch_poll(b, ev, 8, &n) == VLS_OK && n == 3, "three cancel events");
    RejectedPlain("request_error of a cancelled request",
                  vls_batch_request_error(b, a, NULL, 0, NULL), VLS_ERR_NOT_FOUND, "error");
  }

  /* -- rejected submits change nothing; a queued DeepStack cancel gives its bytes back -- */
  {
    vls_request_options o = vls_request_default_options();
    o.max_new_tokens = 4;
    vls_tensor t8 = T1(g_tokens, VLS_DTYPE_I32, kS);
    uint64_t q0 = 0;
    REQUIRE_OK(vls_batch_submit_tokens(b, &t8, M, NULL, 0, &o, &q0)); /* something queued */
    const size_t count0 = PendingCount(b);
    const uint64_t bytes0 = PendingBytes(b);
    CHECK(count0 == 1 && bytes0 >= kS * 4, "one queued request: %zu, %llu bytes", count0,
          (unsigned long long)bytes0);
    vls_tensor emb = T2(g_emb, VLS_DTYPE_F32, kS, kHidden);
    const int32_t vp[2] = {1, 4};
    vls_tensor V = T1(vp, VLS_DTYPE_I32, 2);
    vls_tensor F = T3(g_feat, VLS_DTYPE_F32, 2, 2, kHidden);
    vls_tensor L = T1(kLayerIdx, VLS_DTYPE_I32, 2);
    vls_tensor x;
    uint64_t id = 777;
#define DSUB(mode, vv, ff, ll, opt) \
  vls_batch_submit_deepstack(b, &emb, (mode), NULL, 0, (vv), (ff), (ll), NULL, (opt), &id)
#define REJ(what, call, want, needle) \
  RejectedSubmit(b, what, (call), (want), needle, id, count0, bytes0)
    REJ("submit ds wrong mode", DSUB(VLS_POSITIONS_1D, &V, &F, &L, &o), EINV,
        "deepstack.position_mode");
    REJ("submit tokens wrong mode",
        vls_batch_submit_tokens(b, &t8, VLS_POSITIONS_1D, NULL, 0, &o, &id), EINV, "position_mode");
    REJ("submit embeddings wrong mode",
        vls_batch_submit_embeddings(b, &emb, VLS_POSITIONS_1D, NULL, 0, NULL, &o, &id), EINV,
        "position_mode");
    const int32_t unsorted[2] = {4, 1};
    x = T1(unsorted, VLS_DTYPE_I32, 2);
    REJ("submit ds unsorted positions", DSUB(M, &x, &F, &L, &o), EINV,
        "deepstack.positions_not_sorted");
    const int32_t past[2] = {2, kS};
    x = T1(past, VLS_DTYPE_I32, 2);
    REJ("submit ds position >= S", DSUB(M, &x, &F, &L, &o), EINV,
        "deepstack.position_out_of_range");
    x = F;
    x.byte_length -= 1;
    REJ("submit ds features byte_length -1", DSUB(M, &V, &x, &L, &o), EINV, "deepstack.byte_count");
    x = V;
    x.byte_length += 1;
    REJ("submit ds positions byte_length +1", DSUB(M, &x, &F, &L, &o), EINV,
        "deepstack.byte_count");
    x = T1(g_tokens, VLS_DTYPE_I32, kS);
    x.byte_length += 1;
    REJ("submit tokens byte_length +1", vls_batch_submit_tokens(b, &x, M, NULL, 0, &o, &id), EINV,
        "byte_length");
    x = T2(g_emb, VLS_DTYPE_F32, kS, kHidden);
    x.byte_length -= 1;
    REJ("submit embeddings byte_length -1",
        vls_batch_submit_embeddings(b, &x, M, NULL, 0, NULL, &o, &id), EINV, "byte_length");
    vls_tensor pos = Positions3(kS);
    pos.byte_length += 1;
    REJ("submit positions byte_length +1", vls_batch_submit_tokens(b, &t8, M, &pos, 0, &o, &id),
        EINV, "byte_length");
    x = T1((const char*)g_tokens + 2, VLS_DTYPE_I32, kS);
    REJ("submit tokens misaligned", vls_batch_submit_tokens(b, &x, M, NULL, 0, &o, &id), EINV,
        "aligned");
    REJ("submit tokens NULL", vls_batch_submit_tokens(b, NULL, M, NULL, 0, &o, &id), EINV,
        "tokens");
    static float nanf_[2 * 2 * kHidden];
    memcpy(nanf_, g_feat, sizeof(nanf_));
    nanf_[kHidden + 3] = NAN;
    x = T3(nanf_, VLS_DTYPE_F32, 2, 2, kHidden);
    REJ("submit ds NaN feature", DSUB(M, &V, &x, &L, &o), EINV, "deepstack.non_finite_feature");
    const int32_t wrong[2] = {0, 1};
    x = T1(wrong, VLS_DTYPE_I32, 2);
    REJ("submit ds layer contract", DSUB(M, &V, &F, &x, &o), EINV, "deepstack.layer_contract");
    {
      static float en[kS * kHidden];
      memcpy(en, g_emb, sizeof(en));
      en[5] = INFINITY;
      vls_tensor et = T2(en, VLS_DTYPE_F32, kS, kHidden);
      REJ("submit embeddings Inf", vls_batch_submit_embeddings(b, &et, M, NULL, 0, NULL, &o, &id),
          EINV, "not finite");
      int32_t bad[kS];
      memcpy(bad, g_tokens, sizeof(bad));
      bad[2] = kVocab;
      vls_tensor bt = T1(bad, VLS_DTYPE_I32, kS);
      REJ("submit token id >= V", vls_batch_submit_tokens(b, &bt, M, NULL, 0, &o, &id), EINV,
          "vocabulary");
      REJ("submit embeddings token id >= V",
          vls_batch_submit_embeddings(b, &emb, M, NULL, 0, &bt, &o, &id), EINV, "vocabulary");
      bt = T1(g_tokens, VLS_DTYPE_I32, kS - 1);
      REJ("submit embeddings token_ids shape",
          vls_batch_submit_embeddings(b, &emb, M, NULL, 0, &bt, &o, &id), EINV, "token_ids");
      int32_t ids[kS];
      for (int i = 0; i < kS; ++i) ids[i] = (i == 1 || i == 5) ? g_image_token : (int32_t)(i + 1);
      vls_tensor it = T1(ids, VLS_DTYPE_I32, kS);
      REJ("submit ds pads differ from positions",
          vls_batch_submit_deepstack(b, &emb, M, NULL, 0, &V, &F, &L, &it, &o, &id), EINV,
          "deepstack.visual_count_mismatch");
    }
    vls_request_options bo = o;
    bo.max_new_tokens = kCapacity - kS + 1;
    REJ("submit prompt + max_new_tokens > capacity",
        vls_batch_submit_tokens(b, &t8, M, NULL, 0, &bo, &id), VLS_ERR_OUT_OF_RANGE,
        "max_new_tokens");
    REJ("submit ds prompt + max_new_tokens > capacity", DSUB(M, &V, &F, &L, &bo),
        VLS_ERR_OUT_OF_RANGE, "max_new_tokens");
    bo = o;
    bo.max_new_tokens = 0;
    REJ("submit max_new_tokens 0", vls_batch_submit_tokens(b, &t8, M, NULL, 0, &bo, &id), EINV,
        "max_new_tokens");
    bo = o;
    bo.temperature = NAN;
    REJ("submit temperature NaN", vls_batch_submit_tokens(b, &t8, M, NULL, 0, &bo, &id), EINV,
        "sampling.temperature");
    bo = o;
    bo.top_p = 0.f;
    REJ("submit top_p 0", vls_batch_submit_tokens(b, &t8, M, NULL, 0, &bo, &id), EINV,
        "sampling.top_p");
    bo = o;
    bo.ignore_eos = 2;
    REJ("submit ignore_eos 2", vls_batch_submit_tokens(b, &t8, M, NULL, 0, &bo, &id), EINV,
        "ignore_eos");
    bo = o;
    bo.struct_size = 52;
    REJ("submit options struct_size 52", vls_batch_submit_tokens(b, &t8, M, NULL, 0, &bo, &id),
        EINV, "struct_size");
    REJ("submit negative decode coordinate",
        vls_batch_submit_tokens(b, &t8, M, NULL, -100, &o, &id), VLS_ERR_OUT_OF_RANGE,
        "rope_delta");
    REJ("submit NULL batch", vls_batch_submit_tokens(NULL, &t8, M, NULL, 0, &o, &id), EINV,
        "batch");
    REJ("submit NULL out_id", vls_batch_submit_tokens(b, &t8, M, NULL, 0, &o, NULL), EINV,
        "out_id");
    REJ("submit ds NULL features", DSUB(M, &V, NULL, &L, &o), EINV, "layer_features");
#undef REJ
#undef DSUB
    /* A larger options struct from a newer caller: the known prefix is used. */
    struct {
      vls_request_options base;
      int64_t future;
    } big;
    memset(&big, 0, sizeof(big));
    big.base = o;
    big.base.struct_size = (uint32_t)sizeof(big);
    big.future = -1;
    uint64_t q1 = 0;
    CHECK(vls_batch_submit_tokens(b, &t8, M, NULL, 0, &big.base, &q1) == VLS_OK && q1 == q0 + 1,
          "no rejected submit used an id (%llu after %llu)", (unsigned long long)q1,
          (unsigned long long)q0);
    REQUIRE_OK(vls_batch_cancel(b, q1));
    CHECK(PendingCount(b) == count0 && PendingBytes(b) == bytes0, "cancel restores the queue");

    /* Cancelling a queued DeepStack request gives its payload bytes back at once. */
    uint64_t dsid = 0;
    REQUIRE_OK(vls_batch_submit_deepstack(b, &emb, M, NULL, 0, &V, &F, &L, NULL, &o, &dsid));
    const uint64_t bytes1 = PendingBytes(b);
    const uint64_t payload = 2 * 4 + 2 * 2 * kHidden * 4 + 2 * 4; /* positions, features, layers */
    CHECK(PendingCount(b) == count0 + 1 && bytes1 >= bytes0 + payload + kS * kHidden * 4,
          "a queued DeepStack request owns its payload (%llu -> %llu)", (unsigned long long)bytes0,
          (unsigned long long)bytes1);
    REQUIRE_OK(vls_batch_cancel(b, dsid));
    CHECK(PendingCount(b) == count0 && PendingBytes(b) == bytes0,
          "cancelling the queued DeepStack request frees its bytes (%llu, want %llu)",
          (unsigned long long)PendingBytes(b), (unsigned long long)bytes0);
    REQUIRE_OK(vls_batch_cancel(b, q0));
    CHECK(PendingCount(b) == 0 && PendingBytes(b) == 0, "queue empty");
    size_t n = 0;
    vls_token_event ev[4];
    CHECK(vls_batch_poll(b, ev, 4, &n) == VLS_OK && n == 3 &&
              ev[0].finish_reason == VLS_FINISH_CANCELLED && ev[1].request_id == dsid &&
              ev[2].request_id == q0,
          "three cancel events in order");
  }

  BatchParityTests(m, b);
  vls_batch_free(b);

  BatchPlainTests(dir_plain, opts);
  vls_model_free(m);
}
