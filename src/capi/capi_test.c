/* The C ABI driven from C11: the happy paths, then every rejection case. After each rejected
 * prefill or decode the session must keep its length and rope_delta, and its next decode must
 * give exactly the logits of a control session that never saw the bad call.
 * The batch engine: the CONTRACTS §3 batch example, rejected submits that change nothing,
 * queued cancels that give memory back, and greedy parity with single sessions (stepped with a
 * one-event array, run until idle, and on the handle's own thread).
 *
 * Usage: capi_test [WORKDIR]   (the tiny test checkpoints go to a fresh directory under it,
 * default $TMPDIR or /tmp, and are removed at the end). */
#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi/capi_test_support.h"
#include "vlstack/vlstack.h"

static int g_passed = 0;
static int g_failed = 0;

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

static vls_tensor Tn(const void* data, int32_t dtype, int32_t rank, int64_t d0, int64_t d1,
                     int64_t d2) {
  vls_tensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.rank = rank;
  t.dims[0] = d0;
  t.dims[1] = d1;
  t.dims[2] = d2;
  uint64_t n = 4;
  for (int32_t i = 0; i < rank && i < 4; ++i) n *= (uint64_t)t.dims[i];
  t.byte_length = n;
  return t;
}
static vls_tensor T1(const void* d, int32_t dtype, int64_t d0) { return Tn(d, dtype, 1, d0, 0, 0); }
static vls_tensor T2(const void* d, int32_t dtype, int64_t d0, int64_t d1) {
  return Tn(d, dtype, 2, d0, d1, 0);
}
static vls_tensor T3(const void* d, int32_t dtype, int64_t d0, int64_t d1, int64_t d2) {
  return Tn(d, dtype, 3, d0, d1, d2);
}

/* ---- fixtures --------------------------------------------------------------------------- */

static int32_t g_tokens[kCapacity + 8];
static float g_emb[16 * kHidden];               /* [16, H] */
static int32_t g_pos3[3 * 16];                  /* [3, 16] sequential M-RoPE positions */
static float g_feat[3 * (kNmax + 2) * kHidden]; /* up to [3, Nmax+2, H] */
static int32_t g_image_token = -1;

static void FillFixtures(void) {
  for (int i = 0; i < kCapacity + 8; ++i) g_tokens[i] = (i * 37 + 11) % kVocab;
  for (int i = 0; i < 16 * kHidden; ++i) g_emb[i] = 0.5f * sinf(0.37f * (float)i);
  for (int a = 0; a < 3; ++a) {
    for (int s = 0; s < 16; ++s) g_pos3[a * 16 + s] = s;
  }
  for (int i = 0; i < 3 * (kNmax + 2) * kHidden; ++i) g_feat[i] = 0.25f * cosf(0.11f * (float)i);
}

/* Positions [3, S] for S <= 16, sequential. */
static int32_t g_posbuf[3 * 16];
static vls_tensor Positions3(int64_t S) {
  for (int a = 0; a < 3; ++a) {
    for (int s = 0; s < S; ++s) g_posbuf[a * S + s] = s;
  }
  return T2(g_posbuf, VLS_DTYPE_I32, 3, S);
}

static int AllFinite(const float* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (!isfinite(p[i])) return 0;
  }
  return 1;
}

static int Contains(const char* haystack, const char* needle) {
  return haystack != NULL && strstr(haystack, needle) != NULL;
}

/* Copies the session's logits into out (V floats). */
static int CopyLogits(const vls_session* s, float* out) {
  const float* data = NULL;
  uint64_t count = 0;
  if (vls_session_logits(s, &data, &count) != VLS_OK || count != kVocab) return 0;
  memcpy(out, data, sizeof(float) * kVocab);
  return 1;
}

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

/* A rejected call that has no session state to check. */
static void RejectedPlain(const char* what, vls_status got, vls_status want, const char* needle) {
  const char* err = vls_last_error();
  CHECK(got == want, "%s: status %s, want %s", what, vls_status_name(got), vls_status_name(want));
  CHECK(err != NULL && err[0] != '\0', "%s: empty last error", what);
  CHECK(Contains(err, needle), "%s: last error lacks '%s'", what, needle);
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

/* ---- cleanup ---------------------------------------------------------------------------- */

static int RemoveEntry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* ---- the batch engine through the ABI ---------------------------------------------------------
 */

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

static const int32_t kLayerIdx[2] = {0, 2};

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

static size_t PendingCount(const vls_batch* b) {
  size_t n = 12345;
  vls_batch_pending_count(b, &n);
  return n;
}
static uint64_t PendingBytes(const vls_batch* b) {
  uint64_t n = 12345;
  vls_batch_pending_bytes(b, &n);
  return n;
}
static size_t ActiveCount(const vls_batch* b) {
  size_t n = 12345;
  vls_batch_active_count(b, &n);
  return n;
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

/* A rejected submit: status, message, no id written, queue and memory unchanged. */
static void RejectedSubmit(const vls_batch* b, const char* what, vls_status got, vls_status want,
                           const char* needle, uint64_t id, size_t count0, uint64_t bytes0) {
  RejectedPlain(what, got, want, needle);
  CHECK(id == 777, "%s: a rejected submit wrote the id", what);
  CHECK(PendingCount(b) == count0 && PendingBytes(b) == bytes0,
        "%s: the queue moved (count %zu -> %zu, bytes %llu -> %llu)", what, count0, PendingCount(b),
        (unsigned long long)bytes0, (unsigned long long)PendingBytes(b));
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

static void BatchTests(const char* dir_ds, const char* dir_plain, vls_model_options opts) {
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

  /* -- CONTRACTS §3: S=4 with deltas -1, +2, 0 decode first at 3, 6, 4; cancel the +2 and a
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
  vls_batch_free(b);

  /* -- a 1-D model with two slots: text parity with deltas; DeepStack is refused -- */
  {
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
    RejectedSubmit(pb, "submit ds on a model without DeepStack",
                   vls_batch_submit_deepstack(pb, &emb, VLS_POSITIONS_1D, NULL, 0, &V, &F, &L, NULL,
                                              NULL, &id),
                   EINV, "deepstack.not_declared", id, c0, b0);
    vls_tensor t8 = T1(g_tokens, VLS_DTYPE_I32, kS);
    vls_tensor p3 = Positions3(kS);
    RejectedSubmit(pb, "submit [3,S] positions on a 1-D model",
                   vls_batch_submit_tokens(pb, &t8, VLS_POSITIONS_1D, &p3, 0, NULL, &id), EINV,
                   "positions", id, c0, b0);
    vls_batch_free(pb);
    vls_model_free(pm);
  }
  vls_model_free(m);
}

/* ---- the test ----------------------------------------------------------------------------- */

int main(int argc, char** argv) {
  FillFixtures();
  const char* base = argc > 1 ? argv[1] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (argc > 1) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", base);
    if (system(cmd) != 0) return 2;
  }
  char root[4096];
  snprintf(root, sizeof(root), "%s/vls_capi_XXXXXX", base);
  if (mkdtemp(root) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  char dir_ds[4200], dir_ds2[4200], dir_plain[4200];
  snprintf(dir_ds, sizeof(dir_ds), "%s/ds", root);
  snprintf(dir_ds2, sizeof(dir_ds2), "%s/ds2", root);
  snprintf(dir_plain, sizeof(dir_plain), "%s/plain", root);
  const int32_t ds_layers[2] = {0, 2};
  const int32_t ds2_layers[2] = {0, 1};
  if (vls_test_write_checkpoint(dir_ds, "qwen3-vl", kHidden, kLayers, ds_layers, 2, kNmax, 1) ||
      vls_test_write_checkpoint(dir_ds2, "qwen3-vl", kHidden, kLayers, ds2_layers, 2, kNmax, 1) ||
      vls_test_write_checkpoint(dir_plain, "qwen3", kHidden, 2, NULL, 0, 0, 2)) {
    return 2;
  }

  /* -- version and options -- */
  CHECK(vls_abi_version() == VLS_ABI_VERSION && VLS_ABI_VERSION == 1u, "abi version %u",
        (unsigned)vls_abi_version());
  CHECK(strcmp(vls_status_name(VLS_ERR_INVALID_ARGUMENT), "INVALID_ARGUMENT") == 0 &&
            strcmp(vls_status_name(99), "UNKNOWN") == 0,
        "status names");
  vls_model_options opts = vls_model_default_options();
  CHECK(opts.struct_size == sizeof(vls_model_options) && opts.capacity > 0 && opts.slots == 1,
        "defaults");
  opts.capacity = kCapacity;

  /* -- load -- */
  vls_model* ds = NULL;
  REQUIRE_OK(vls_model_load(dir_ds, &opts, &ds));
  CHECK(vls_last_error()[0] == '\0', "a successful call clears the last error");
  vls_model* plain = NULL;
  REQUIRE_OK(vls_model_load(dir_plain, &opts, &plain));

  vls_model* none = NULL;
  RejectedPlain("load NULL dir", vls_model_load(NULL, &opts, &none), VLS_ERR_INVALID_ARGUMENT,
                "dir");
  RejectedPlain("load NULL out", vls_model_load(dir_ds, &opts, NULL), VLS_ERR_INVALID_ARGUMENT,
                "out");
  {
    vls_model_options small = opts;
    small.struct_size = 0;
    RejectedPlain("options struct_size 0", vls_model_load(dir_ds, &small, &none),
                  VLS_ERR_INVALID_ARGUMENT, "struct_size");
    small.struct_size = 19;
    RejectedPlain("options struct_size 19", vls_model_load(dir_ds, &small, &none),
                  VLS_ERR_INVALID_ARGUMENT, "struct_size");
    CHECK(none == NULL, "a refused load writes no handle");
    /* A newer caller's larger struct: the known prefix is used. */
    struct {
      vls_model_options base;
      int64_t future_field;
    } big;
    memset(&big, 0, sizeof(big));
    big.base = opts;
    big.base.struct_size = (uint32_t)sizeof(big);
    big.future_field = -1;
    vls_model* m = NULL;
    CHECK(vls_model_load(dir_plain, &big.base, &m) == VLS_OK && m != NULL,
          "larger struct_size accepted");
    vls_model_desc d;
    memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    CHECK(m != NULL && vls_model_info(m, &d) == VLS_OK && d.capacity == kCapacity, "prefix read");
    vls_model_free(m);
    vls_model_options bad = opts;
    bad.capacity = 0;
    RejectedPlain("capacity 0", vls_model_load(dir_ds, &bad, &none), VLS_ERR_INVALID_ARGUMENT,
                  "capacity");
    bad = opts;
    bad.nmax = 5;
    RejectedPlain("nmax contradicts the config", vls_model_load(dir_ds, &bad, &none),
                  VLS_ERR_INVALID_ARGUMENT, "nmax");
    bad = opts;
    bad.nmax = 4;
    RejectedPlain("nmax on a model without DeepStack", vls_model_load(dir_plain, &bad, &none),
                  VLS_ERR_INVALID_ARGUMENT, "nmax");
    char missing[4300];
    snprintf(missing, sizeof(missing), "%s/missing", root);
    vls_status st = vls_model_load(missing, &opts, &none);
    CHECK(st != VLS_OK && vls_last_error()[0] != '\0' && none == NULL, "missing dir refused: %s",
          vls_status_name(st));
  }
  vls_model_free(NULL);
  {
    /* A success after a failure clears the last error. */
    CHECK(vls_last_error()[0] != '\0', "the refused load left an error");
    size_t count = 0;
    CHECK(
        vls_model_deepstack_layers(plain, NULL, 0, &count) == VLS_OK && vls_last_error()[0] == '\0',
        "a successful call after a failure clears the last error");
  }

  /* -- info -- */
  vls_model_desc info;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  REQUIRE_OK(vls_model_info(ds, &info));
  CHECK(info.hidden == kHidden && info.vocab == kVocab && info.layers == kLayers, "info dims");
  CHECK(info.position_mode == VLS_POSITIONS_MROPE && info.has_deepstack == 1 &&
            info.deepstack_layer_count == 2 && info.nmax == kNmax && info.capacity == kCapacity,
        "info deepstack");
  g_image_token = info.image_token_id;
  CHECK(g_image_token >= 0 && g_image_token < kVocab, "image token id %d", (int)g_image_token);
  {
    vls_model_desc p;
    memset(&p, 0, sizeof(p));
    p.struct_size = sizeof(p);
    CHECK(vls_model_info(plain, &p) == VLS_OK && p.position_mode == VLS_POSITIONS_1D &&
              p.has_deepstack == 0 && p.nmax == 0,
          "plain info");
    p.struct_size = 8;
    RejectedPlain("info struct_size 8", vls_model_info(plain, &p), VLS_ERR_INVALID_ARGUMENT,
                  "struct_size");
    RejectedPlain("info NULL model", vls_model_info(NULL, &p), VLS_ERR_INVALID_ARGUMENT, "model");
    RejectedPlain("info NULL out", vls_model_info(plain, NULL), VLS_ERR_INVALID_ARGUMENT, "out");
    int32_t layers[4] = {-1, -1, -1, -1};
    size_t count = 99;
    CHECK(vls_model_deepstack_layers(ds, layers, 4, &count) == VLS_OK && count == 2 &&
              layers[0] == 0 && layers[1] == 2,
          "deepstack layers");
    count = 99;
    RejectedPlain("deepstack layers buffer too small",
                  vls_model_deepstack_layers(ds, layers, 1, &count), VLS_ERR_OUT_OF_RANGE, "K=2");
    CHECK(count == 2, "count reported with a small buffer");
    CHECK(vls_model_deepstack_layers(plain, NULL, 0, &count) == VLS_OK && count == 0,
          "plain has K=0");
  }

  /* -- identity -- */
  {
    char id[VLS_IDENTITY_SIZE], id2[VLS_IDENTITY_SIZE], id3[VLS_IDENTITY_SIZE],
        id4[VLS_IDENTITY_SIZE];
    REQUIRE_OK(vls_model_identity(ds, id, sizeof(id)));
    int hex = strlen(id) == 64;
    for (int i = 0; i < 64 && hex; ++i)
      hex = strchr("0123456789abcdef", id[i]) != NULL && id[i] != '\0';
    CHECK(hex, "identity is 64 lowercase hex digits: %s", id);
    char small[64];
    memset(small, 'x', sizeof(small));
    RejectedPlain("identity buffer of 64", vls_model_identity(ds, small, sizeof(small)),
                  VLS_ERR_OUT_OF_RANGE, "65");
    CHECK(small[0] == 'x' && small[63] == 'x', "a refused identity call writes nothing");
    RejectedPlain("identity NULL buf", vls_model_identity(ds, NULL, 65), VLS_ERR_INVALID_ARGUMENT,
                  "buf");
    RejectedPlain("identity NULL model", vls_model_identity(NULL, id2, sizeof(id2)),
                  VLS_ERR_INVALID_ARGUMENT, "model");
    vls_model* again = NULL;
    vls_model* other = NULL;
    REQUIRE_OK(vls_model_load(dir_ds, &opts, &again));
    REQUIRE_OK(vls_model_load(dir_ds2, &opts, &other));
    REQUIRE_OK(vls_model_identity(again, id2, sizeof(id2)));
    REQUIRE_OK(vls_model_identity(other, id3, sizeof(id3)));
    REQUIRE_OK(vls_model_identity(plain, id4, sizeof(id4)));
    CHECK(strcmp(id, id2) == 0, "the same model and bounds give the same identity");
    CHECK(strcmp(id, id3) != 0, "different DeepStack target layers give a different identity");
    CHECK(strcmp(id, id4) != 0, "a different model gives a different identity");
    vls_model_free(again);
    vls_model_free(other);
    vls_model_options o64 = opts;
    o64.capacity = 64;
    REQUIRE_OK(vls_model_load(dir_ds, &o64, &again));
    REQUIRE_OK(vls_model_identity(again, id2, sizeof(id2)));
    CHECK(strcmp(id, id2) != 0, "a different capacity gives a different identity");
    vls_model_free(again);
  }

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
    /* CONTRACTS §3 pinned example: a failed prefill with +5 leaves the committed delta. */
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

  /* -- the batch engine -- */
  BatchTests(dir_ds, dir_plain, opts);

  vls_model_free(ds);
  vls_model_free(plain);
  nftw(root, RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);

  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
