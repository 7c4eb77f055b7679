/* Greedy parity of the batch engine with single sessions: more requests than slots, mixed
 * kinds, stepped with a one-event array, run until idle, and on the handle's own thread; then a
 * 1-D model with two slots. */
#define _XOPEN_SOURCE 700

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "capi/capi_test_util.h"
#include "vlstack/vlstack.h"

enum { kMaxReq = 16, kMaxGen = 16 };

/* One request of a parity run; the same arguments go to the batch and to a single session. */
typedef struct Req {
  int kind; /* 0 tokens, 1 embeddings, 2 DeepStack */
  int64_t S;
  int32_t delta;
  int32_t max_new;
  const int32_t* tokens; /* kind 0: [S]; kinds 1, 2: optional ids [S] */
  const float* emb;      /* [S, H] */
  const int32_t* pos;    /* NULL, or [S] (1-D) / [3, S] (M-RoPE) */
  int64_t nv;
  const int32_t* vp; /* [nv] */
  const float* feat; /* [2, nv, H] */
  float presence;    /* presence penalty: 1000 makes every later token a new one */
} Req;

static vls_status SubmitReq(vls_batch* b, const Req* r, int32_t mode, uint64_t* id) {
  vls_request_options o = vls_request_default_options();
  o.max_new_tokens = r->max_new;
  o.ignore_eos = 1;
  o.presence_penalty = r->presence;
  vls_tensor pos;
  const vls_tensor* pp = NULL;
  if (r->pos != NULL) {
    pos = mode == VLS_POSITIONS_MROPE ? T2(r->pos, VLS_DTYPE_I32, 3, r->S)
                                      : T1(r->pos, VLS_DTYPE_I32, r->S);
    pp = &pos;
  }
  if (r->kind == 0) {
    vls_tensor t = T1(r->tokens, VLS_DTYPE_I32, r->S);
    return vls_batch_submit_tokens(b, &t, mode, pp, r->delta, &o, id);
  }
  vls_tensor e = T2(r->emb, VLS_DTYPE_F32, r->S, kHidden);
  vls_tensor ids = T1(r->tokens, VLS_DTYPE_I32, r->S);
  const vls_tensor* ip = r->tokens != NULL ? &ids : NULL;
  if (r->kind == 1) return vls_batch_submit_embeddings(b, &e, mode, pp, r->delta, ip, &o, id);
  vls_tensor v = T1(r->vp, VLS_DTYPE_I32, r->nv);
  vls_tensor f = T3(r->feat, VLS_DTYPE_F32, 2, r->nv, kHidden);
  vls_tensor l = T1(kLayerIdx, VLS_DTYPE_I32, 2);
  return vls_batch_submit_deepstack(b, &e, mode, pp, r->delta, &v, &f, &l, ip, &o, id);
}

/* Greedy over the session's logits with the engine's presence penalty: each token already
 * generated loses `presence` (lowest index wins ties, as the engine's argmax). */
static int32_t GreedyToken(const vls_session* s, float presence, const int32_t* gen, int ngen) {
  const float* lp = NULL;
  uint64_t n = 0;
  if (vls_session_logits(s, &lp, &n) != VLS_OK || n != kVocab) return -1;
  static float l[kVocab];
  memcpy(l, lp, sizeof(l));
  if (presence != 0.f) {
    for (int32_t t = 0; t < kVocab; ++t) {
      for (int g = 0; g < ngen; ++g) {
        if (gen[g] == t) {
          l[t] -= presence;
          break;
        }
      }
    }
  }
  int32_t best = 0;
  for (int32_t i = 1; i < kVocab; ++i) {
    if (l[i] > l[best]) best = i;
  }
  return best;
}

/* The greedy tokens of `r` run alone on a single session: prefill, then argmax and decode. */
static int RefRun(const vls_model* m, const Req* r, int32_t mode, int32_t* out) {
  vls_session* s = NULL;
  if (vls_session_create(m, &s) != VLS_OK) return 0;
  vls_tensor pos;
  const vls_tensor* pp = NULL;
  if (r->pos != NULL) {
    pos = mode == VLS_POSITIONS_MROPE ? T2(r->pos, VLS_DTYPE_I32, 3, r->S)
                                      : T1(r->pos, VLS_DTYPE_I32, r->S);
    pp = &pos;
  }
  vls_status st;
  vls_tensor e = T2(r->emb, VLS_DTYPE_F32, r->S, kHidden);
  vls_tensor ids = T1(r->tokens, VLS_DTYPE_I32, r->S);
  if (r->kind == 0) {
    st = vls_session_prefill_tokens(s, &ids, mode, pp, r->delta);
  } else if (r->kind == 1) {
    st = vls_session_prefill_embeddings(s, &e, mode, pp, r->delta);
  } else {
    vls_tensor v = T1(r->vp, VLS_DTYPE_I32, r->nv);
    vls_tensor f = T3(r->feat, VLS_DTYPE_F32, 2, r->nv, kHidden);
    vls_tensor l = T1(kLayerIdx, VLS_DTYPE_I32, 2);
    st = vls_session_prefill_deepstack(s, &e, mode, pp, r->delta, &v, &f, &l,
                                       r->tokens != NULL ? &ids : NULL);
  }
  int ok = st == VLS_OK;
  for (int32_t i = 0; ok && i < r->max_new; ++i) {
    out[i] = GreedyToken(s, r->presence, out, i);
    if (i + 1 < r->max_new) ok = vls_session_decode(s, out[i]) == VLS_OK;
  }
  vls_session_free(s);
  return ok;
}

/* Collected events of a run, per request index. */
typedef struct Streams {
  uint64_t ids[kMaxReq];
  int n;
  int32_t tokens[kMaxReq][kMaxGen];
  int count[kMaxReq];
  int32_t finish[kMaxReq]; /* the finish reason seen, or -1 */
  int after_finish;        /* events seen after a request's finish event */
  int unknown;             /* events of ids not in `ids` */
  int finished;            /* requests with a finish event */
} Streams;

static void StreamsInit(Streams* s, int n) {
  memset(s, 0, sizeof(*s));
  s->n = n;
  for (int i = 0; i < kMaxReq; ++i) s->finish[i] = -1;
}

static void Record(Streams* s, const vls_token_event* e) {
  for (int i = 0; i < s->n; ++i) {
    if (s->ids[i] != e->request_id) continue;
    if (s->finish[i] >= 0) {
      ++s->after_finish;
      return;
    }
    if (e->token >= 0 && s->count[i] < kMaxGen) s->tokens[i][s->count[i]++] = e->token;
    if (e->finish_reason != VLS_FINISH_NONE) {
      s->finish[i] = e->finish_reason;
      ++s->finished;
    }
    return;
  }
  ++s->unknown;
}

/* Checks every stream against the single-session reference. */
static void CheckStreams(const char* what, const Streams* s, const Req* reqs,
                         int32_t ref[][kMaxGen]) {
  CHECK(s->after_finish == 0 && s->unknown == 0, "%s: %d events after a finish, %d unknown", what,
        s->after_finish, s->unknown);
  for (int i = 0; i < s->n; ++i) {
    CHECK(s->finish[i] == VLS_FINISH_LENGTH && s->count[i] == reqs[i].max_new,
          "%s: request %d finished %d with %d tokens (want LENGTH, %d)", what, i, (int)s->finish[i],
          s->count[i], (int)reqs[i].max_new);
    int same = s->count[i] == reqs[i].max_new;
    for (int t = 0; same && t < s->count[i]; ++t) same = s->tokens[i][t] == ref[i][t];
    CHECK(same, "%s: request %d (kind %d): batch tokens differ from the single session", what, i,
          reqs[i].kind);
  }
}

/* Drains every buffered event into `s`, one at a time. */
static void PollAll(vls_batch* b, Streams* s) {
  vls_token_event e;
  size_t n = 1;
  while (n == 1) {
    if (vls_batch_poll(b, &e, 1, &n) != VLS_OK) break;
    if (n == 1) Record(s, &e);
  }
}

typedef struct SubmitArg {
  vls_batch* batch;
  const Req* reqs;
  int first, step, n;
  uint64_t* ids;
  int ok;
} SubmitArg;

static void* SubmitThread(void* p) {
  SubmitArg* a = (SubmitArg*)p;
  a->ok = 1;
  for (int i = a->first; i < a->n; i += a->step) {
    if (SubmitReq(a->batch, &a->reqs[i], VLS_POSITIONS_MROPE, &a->ids[i]) != VLS_OK) a->ok = 0;
  }
  return NULL;
}

/* ---- the parity runs ------------------------------------------------------------------------ */

void BatchParityTests(const vls_model* m, vls_batch* b) {
  const int M = VLS_POSITIONS_MROPE;
  /* -- greedy parity: more requests than slots, mixed kinds, events read one at a time -- */
  static int32_t ids_ds[12], pos_img[3 * 12];
  for (int i = 0; i < 12; ++i) ids_ds[i] = (i == 3 || i == 4 || i == 7) ? g_image_token : 20 + i;
  {
    /* An image-like M-RoPE layout: t/h/w differ inside the image rows. */
    const int32_t t[12] = {0, 1, 2, 3, 3, 3, 3, 5, 6, 7, 8, 9};
    const int32_t h[12] = {0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 9};
    const int32_t w[12] = {0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 9};
    memcpy(pos_img, t, sizeof(t));
    memcpy(pos_img + 12, h, sizeof(h));
    memcpy(pos_img + 24, w, sizeof(w));
  }
  static const int32_t vp2[2] = {1, 4}, vp3[3] = {3, 4, 7};
  const Req reqs[7] = {
      {0, 4, -1, 5, g_tokens, NULL, NULL, 0, NULL, NULL, 1000.f},
      {2, 8, 0, 4, NULL, g_emb, NULL, 2, vp2, g_feat, 1000.f},
      {0, 9, 3, 6, g_tokens + 5, NULL, NULL, 0, NULL, NULL, 1000.f},
      {1, 6, 0, 3, NULL, g_emb + 3 * kHidden, NULL, 0, NULL, NULL, 0.f},
      {2, 12, -2, 5, ids_ds, g_emb + kHidden, pos_img, 3, vp3, g_feat + 7, 1000.f},
      {0, 12, 0, 4, g_tokens + 20, NULL, NULL, 0, NULL, NULL, 0.f},
      {1, 5, 1, 2, g_tokens + 40, g_emb + 8 * kHidden, NULL, 0, NULL, NULL, 1000.f},
  };
  const int nreq = 7;
  static int32_t ref[kMaxReq][kMaxGen];
  for (int i = 0; i < nreq; ++i) {
    CHECK(RefRun(m, &reqs[i], M, ref[i]), "reference run of request %d: %s", i, vls_last_error());
  }
  {
    static Streams s;
    StreamsInit(&s, nreq);
    for (int i = 0; i < nreq; ++i) REQUIRE_OK(SubmitReq(b, &reqs[i], M, &s.ids[i]));
    CHECK(PendingCount(b) == (size_t)nreq, "all queued");
    vls_token_event ev;
    int steps = 0;
    size_t max_buffered = 0;
    while ((PendingCount(b) > 0 || ActiveCount(b) > 0) && steps < 100) {
      size_t n = 0;
      REQUIRE_OK(vls_batch_step(b, &ev, 1, &n));
      if (n == 1) Record(&s, &ev);
      CHECK(ActiveCount(b) <= 3, "never more active requests than slots");
      size_t buffered = 0;
      vls_batch_buffered_count(b, &buffered);
      if (buffered > max_buffered) max_buffered = buffered;
      ++steps;
    }
    CHECK(max_buffered > 1, "a capacity-1 caller left events buffered (%zu)", max_buffered);
    PollAll(b, &s);
    size_t left = 99;
    CHECK(vls_batch_buffered_count(b, &left) == VLS_OK && left == 0, "buffer drained");
    CheckStreams("step, capacity 1", &s, reqs, ref);
  }
  {
    /* run_until_idle, then one big poll. */
    static Streams s;
    StreamsInit(&s, nreq);
    for (int i = 0; i < nreq; ++i) REQUIRE_OK(SubmitReq(b, &reqs[i], M, &s.ids[i]));
    REQUIRE_OK(vls_batch_run_until_idle(b));
    CHECK(PendingCount(b) == 0 && ActiveCount(b) == 0, "idle");
    static vls_token_event ev[256];
    size_t n = 0;
    REQUIRE_OK(vls_batch_poll(b, ev, 256, &n));
    for (size_t i = 0; i < n; ++i) Record(&s, &ev[i]);
    CheckStreams("run_until_idle", &s, reqs, ref);
  }
  {
    /* The batch's own thread, with two submitting threads. */
    static Streams s;
    StreamsInit(&s, nreq);
    REQUIRE_OK(vls_batch_start(b));
    REQUIRE_OK(vls_batch_start(b)); /* a no-op */
    size_t n = 0;
    vls_token_event ev[4];
    RejectedPlain("step while the thread runs", vls_batch_step(b, ev, 4, &n),
                  VLS_ERR_FAILED_PRECONDITION, "thread");
    RejectedPlain("run_until_idle while the thread runs", vls_batch_run_until_idle(b),
                  VLS_ERR_FAILED_PRECONDITION, "thread");
    SubmitArg args[2] = {{b, reqs, 0, 2, nreq, s.ids, 0}, {b, reqs, 1, 2, nreq, s.ids, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; ++i) pthread_create(&th[i], NULL, SubmitThread, &args[i]);
    for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
    CHECK(args[0].ok && args[1].ok, "concurrent submits accepted");
    for (int waits = 0; s.finished < nreq && waits < 600; ++waits) {
      if (vls_batch_wait(b, 100, ev, 4, &n) != VLS_OK) break;
      for (size_t i = 0; i < n; ++i) Record(&s, &ev[i]);
    }
    REQUIRE_OK(vls_batch_stop(b));
    REQUIRE_OK(vls_batch_stop(b)); /* a no-op */
    PollAll(b, &s);
    CheckStreams("engine thread", &s, reqs, ref);
    CHECK(vls_batch_step(b, ev, 4, &n) == VLS_OK && n == 0, "stepping resumes after stop");
  }
  {
    /* Free while the thread runs and requests are queued and active. */
    vls_batch* b2 = NULL;
    REQUIRE_OK(vls_batch_create(m, &b2));
    REQUIRE_OK(vls_batch_start(b2));
    uint64_t id = 0;
    for (int i = 0; i < nreq; ++i) REQUIRE_OK(SubmitReq(b2, &reqs[i], M, &id));
    vls_batch_free(b2);
    CHECK(1, "free with a running thread returns");
  }
}

void BatchPlainTests(const char* dir_plain, vls_model_options opts) {
  const vls_status EINV = VLS_ERR_INVALID_ARGUMENT;
  vls_model* pm = NULL;
  opts.slots = 2;
  REQUIRE_OK(vls_model_load(dir_plain, &opts, &pm));
  vls_batch* pb = NULL;
  REQUIRE_OK(vls_batch_create(pm, &pb));
  static int32_t pos1[10];
  for (int i = 0; i < 10; ++i) pos1[i] = i < 5 ? i : i + 3;
  const Req preqs[5] = {
      {0, 10, 3, 4, g_tokens + 2, NULL, pos1, 0, NULL, NULL, 1000.f},
      {0, 4, -2, 6, g_tokens + 30, NULL, NULL, 0, NULL, NULL, 1000.f},
      {1, 7, 0, 3, g_tokens + 50, g_emb + 2 * kHidden, NULL, 0, NULL, NULL, 1000.f},
      {0, 6, 0, 5, g_tokens + 60, NULL, NULL, 0, NULL, NULL, 0.f},
      {0, 3, 1, 2, g_tokens + 70, NULL, NULL, 0, NULL, NULL, 1000.f},
  };
  static int32_t pref[kMaxReq][kMaxGen];
  for (int i = 0; i < 5; ++i) {
    CHECK(RefRun(pm, &preqs[i], VLS_POSITIONS_1D, pref[i]), "1-D reference %d", i);
  }
  static Streams s;
  StreamsInit(&s, 5);
  for (int i = 0; i < 5; ++i) REQUIRE_OK(SubmitReq(pb, &preqs[i], VLS_POSITIONS_1D, &s.ids[i]));
  vls_token_event ev;
  for (int steps = 0; (PendingCount(pb) > 0 || ActiveCount(pb) > 0) && steps < 100; ++steps) {
    size_t n = 0;
    REQUIRE_OK(vls_batch_step(pb, &ev, 1, &n));
    if (n == 1) Record(&s, &ev);
    CHECK(ActiveCount(pb) <= 2, "two slots at most");
  }
  PollAll(pb, &s);
  CheckStreams("1-D batch", &s, preqs, pref);
  const size_t c0 = PendingCount(pb);
  const uint64_t b0 = PendingBytes(pb);
  uint64_t id = 777;
  vls_tensor emb = T2(g_emb, VLS_DTYPE_F32, kS, kHidden);
  const int32_t vp[2] = {1, 4};
  vls_tensor V = T1(vp, VLS_DTYPE_I32, 2);
  vls_tensor F = T3(g_feat, VLS_DTYPE_F32, 2, 2, kHidden);
  vls_tensor L = T1(kLayerIdx, VLS_DTYPE_I32, 2);
  RejectedSubmit(
      pb, "submit ds on a model without DeepStack",
      vls_batch_submit_deepstack(pb, &emb, VLS_POSITIONS_1D, NULL, 0, &V, &F, &L, NULL, NULL, &id),
      EINV, "deepstack.not_declared", id, c0, b0);
  vls_tensor t8 = T1(g_tokens, VLS_DTYPE_I32, kS);
  vls_tensor p3 = Positions3(kS);
  RejectedSubmit(pb, "submit [3,S] positions on a 1-D model",
                 vls_batch_submit_tokens(pb, &t8, VLS_POSITIONS_1D, &p3, 0, NULL, &id), EINV,
                 "positions", id, c0, b0);
  vls_batch_free(pb);
  vls_model_free(pm);
}
