/* The C ABI test's shared part (see capi_test_util.h). */
#include "capi/capi_test_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vlstack/vlstack.h"

int g_passed = 0;
int g_failed = 0;

/* ---- descriptors ------------------------------------------------------------------------ */

vls_tensor Tn(const void* data, int32_t dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2) {
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
vls_tensor T1(const void* d, int32_t dtype, int64_t d0) { return Tn(d, dtype, 1, d0, 0, 0); }
vls_tensor T2(const void* d, int32_t dtype, int64_t d0, int64_t d1) {
  return Tn(d, dtype, 2, d0, d1, 0);
}
vls_tensor T3(const void* d, int32_t dtype, int64_t d0, int64_t d1, int64_t d2) {
  return Tn(d, dtype, 3, d0, d1, d2);
}

/* ---- fixtures --------------------------------------------------------------------------- */

int32_t g_tokens[kCapacity + 8];
float g_emb[16 * kHidden];               /* [16, H] */
int32_t g_pos3[3 * 16];                  /* [3, 16] sequential M-RoPE positions */
float g_feat[3 * (kNmax + 2) * kHidden]; /* up to [3, Nmax+2, H] */
int32_t g_image_token = -1;

void FillFixtures(void) {
  for (int i = 0; i < kCapacity + 8; ++i) g_tokens[i] = (i * 37 + 11) % kVocab;
  for (int i = 0; i < 16 * kHidden; ++i) g_emb[i] = 0.5f * sinf(0.37f * (float)i);
  for (int a = 0; a < 3; ++a) {
    for (int s = 0; s < 16; ++s) g_pos3[a * 16 + s] = s;
  }
  for (int i = 0; i < 3 * (kNmax + 2) * kHidden; ++i) g_feat[i] = 0.25f * cosf(0.11f * (float)i);
}

/* Positions [3, S] for S <= 16, sequential. */
static int32_t g_posbuf[3 * 16];
vls_tensor Positions3(int64_t S) {
  for (int a = 0; a < 3; ++a) {
    for (int s = 0; s < S; ++s) g_posbuf[a * S + s] = s;
  }
  return T2(g_posbuf, VLS_DTYPE_I32, 3, S);
}

int AllFinite(const float* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (!isfinite(p[i])) return 0;
  }
  return 1;
}

int Contains(const char* haystack, const char* needle) {
  return haystack != NULL && strstr(haystack, needle) != NULL;
}

/* Copies the session's logits into out (V floats). */
int CopyLogits(const vls_session* s, float* out) {
  const float* data = NULL;
  uint64_t count = 0;
  if (vls_session_logits(s, &data, &count) != VLS_OK || count != kVocab) return 0;
  memcpy(out, data, sizeof(float) * kVocab);
  return 1;
}

const int32_t kLayerIdx[2] = {0, 2};

/* ---- checks ----------------------------------------------------------------------------- */

/* A rejected call that has no session state to check. */
void RejectedPlain(const char* what, vls_status got, vls_status want, const char* needle) {
  const char* err = vls_last_error();
  CHECK(got == want, "%s: status %s, want %s", what, vls_status_name(got), vls_status_name(want));
  CHECK(err != NULL && err[0] != '\0', "%s: empty last error", what);
  CHECK(Contains(err, needle), "%s: last error lacks '%s'", what, needle);
}

size_t PendingCount(const vls_batch* b) {
  size_t n = 12345;
  vls_batch_pending_count(b, &n);
  return n;
}
uint64_t PendingBytes(const vls_batch* b) {
  uint64_t n = 12345;
  vls_batch_pending_bytes(b, &n);
  return n;
}
size_t ActiveCount(const vls_batch* b) {
  size_t n = 12345;
  vls_batch_active_count(b, &n);
  return n;
}

/* A rejected submit: status, message, no id written, queue and memory unchanged. */
void RejectedSubmit(const vls_batch* b, const char* what, vls_status got, vls_status want,
                    const char* needle, uint64_t id, size_t count0, uint64_t bytes0) {
  RejectedPlain(what, got, want, needle);
  CHECK(id == 777, "%s: a rejected submit wrote the id", what);
  CHECK(PendingCount(b) == count0 && PendingBytes(b) == bytes0,
        "%s: the queue moved (count %zu -> %zu, bytes %llu -> %llu)", what, count0, PendingCount(b),
        (unsigned long long)bytes0, (unsigned long long)PendingBytes(b));
}
