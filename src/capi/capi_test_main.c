/* The C ABI driven from C11: the happy paths, then every rejection case. After each rejected
 * prefill or decode the session must keep its length and rope_delta, and its next decode must
 * give exactly the logits of a control session that never saw the bad call.
 * The batch engine: the docs/contracts.md §3 batch example, rejected submits that change nothing,
 * queued cancels that give memory back, and greedy parity with single sessions (stepped with a
 * one-event array, run until idle, and on the handle's own thread).
 *
 * Usage: capi_test [WORKDIR]   (the tiny test checkpoints go to a fresh directory under it,
 * default $TMPDIR or /tmp, and are removed at the end).
 *
 * This file: setup, the version and options, load, info and identity; the sessions are in
 * capi_test_session.c, the batch engine in capi_test_batch*.c, the counters and shared
 * checks in capi_test_util.c. */
#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi/capi_test_support.h"
#include "capi/capi_test_util.h"
#include "vlstack/vlstack.h"

/* ---- cleanup ---------------------------------------------------------------------------- */

static int RemoveEntry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* Whether models a and b (the same checkpoint and bounds) give bit-identical logits over a
 * prefill of kS tokens and four greedy decode steps (1-D positions). */
static int SameGreedyTokens(const vls_model* a, const vls_model* b) {
  vls_session* sa = NULL;
  vls_session* sb = NULL;
  REQUIRE_OK(vls_session_create(a, &sa));
  REQUIRE_OK(vls_session_create(b, &sb));
  const vls_tensor tok = T1(g_tokens, VLS_DTYPE_I32, kS);
  REQUIRE_OK(vls_session_prefill_tokens(sa, &tok, VLS_POSITIONS_1D, NULL, 0));
  REQUIRE_OK(vls_session_prefill_tokens(sb, &tok, VLS_POSITIONS_1D, NULL, 0));
  int same = 1;
  for (int step = 0; step < 5 && same; ++step) {
    static float la[kVocab], lb[kVocab];
    same = CopyLogits(sa, la) && CopyLogits(sb, lb) && memcmp(la, lb, sizeof(la)) == 0;
    int32_t next = 0;
    for (int32_t v = 1; v < kVocab; ++v) next = la[v] > la[next] ? v : next;
    if (same && step < 4) {
      REQUIRE_OK(vls_session_decode(sa, next));
      REQUIRE_OK(vls_session_decode(sb, next));
    }
  }
  vls_session_free(sa);
  vls_session_free(sb);
  return same;
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
    bad.precision = 7;
    RejectedPlain("precision 7", vls_model_load(dir_plain, &bad, &none), VLS_ERR_INVALID_ARGUMENT,
                  "precision");
    bad = opts;
    bad.kv_cache = 9;
    RejectedPlain("kv_cache 9", vls_model_load(dir_plain, &bad, &none), VLS_ERR_INVALID_ARGUMENT,
                  "kv_cache");
    bad = opts;
    bad.artifact_memory = 2;
    RejectedPlain("artifact_memory 2", vls_model_load(dir_plain, &bad, &none),
                  VLS_ERR_INVALID_ARGUMENT, "artifact_memory");
    /* Sizes are checked against their maxima and against memory before anything is
       allocated: an error, never an abort. */
    bad = opts;
    bad.threads = 100000;
    RejectedPlain("threads 100000", vls_model_load(dir_plain, &bad, &none),
                  VLS_ERR_INVALID_ARGUMENT, "threads 100000 is outside [0, 1024]");
    bad = opts;
    bad.capacity = (1 << 24) + 1;
    RejectedPlain("capacity past the maximum", vls_model_load(dir_plain, &bad, &none),
                  VLS_ERR_INVALID_ARGUMENT, "capacity 16777217 is outside");
    bad = opts;
    bad.slots = 4097;
    RejectedPlain("slots past the maximum", vls_model_load(dir_plain, &bad, &none),
                  VLS_ERR_INVALID_ARGUMENT, "slots 4097 is outside");
    bad = opts;
    bad.capacity = 1 << 24;
    bad.slots = 4096; /* within the maxima: far more KV cache than any machine holds */
    RejectedPlain("KV caches beyond memory", vls_model_load(dir_plain, &bad, &none),
                  VLS_ERR_RESOURCE_EXHAUSTED, "of memory but");
    bad = opts;
    bad.kv_cache = VLS_KV_CACHE_BF16; /* a BF16 cache at F32 precision is allowed */
    CHECK(vls_model_load(dir_plain, &bad, &m) == VLS_OK && m != NULL, "kv_cache BF16 at F32");
    vls_model_free(m);
    /* An ABI 1.2 caller (40 bytes: its struct's tail padding ends where artifact_memory
       begins) gets the default artifact memory, whatever lies past its struct. */
    CHECK(offsetof(vls_model_options, artifact_memory) == 40, "artifact_memory at byte 40");
    bad = opts;
    bad.struct_size = 40;
    bad.artifact_memory = 9;
    CHECK(vls_model_load(dir_plain, &bad, &m) == VLS_OK && m != NULL, "ABI 1.2 struct_size");
    vls_model_free(m);
    /* An ABI 1.1 caller (32 bytes) gets the default cache type. */
    bad = opts;
    bad.struct_size = 32;
    bad.kv_cache = 9;
    CHECK(vls_model_load(dir_plain, &bad, &m) == VLS_OK && m != NULL, "ABI 1.1 struct_size");
    vls_model_free(m);
    /* An old caller (ABI 1.0 struct, 20 bytes) gets the defaults for the newer fields. */
    bad = opts;
    bad.struct_size = 20;
    bad.precision = 7;
    bad.artifact = "/nonexistent";
    CHECK(vls_model_load(dir_plain, &bad, &m) == VLS_OK && m != NULL, "ABI 1.0 struct_size");
    vls_model_free(m);
    {
      /* A prepared-weights artifact maps back only into a load with the same identity. */
      char art[4300];
      snprintf(art, sizeof(art), "%s/plain.vlsp", root);
      vls_model_options bf = opts;
      bf.precision = VLS_PRECISION_BF16;
      vls_model* src = NULL;
      REQUIRE_OK(vls_model_load(dir_plain, &bf, &src));
      RejectedPlain("write_artifact NULL path", vls_model_write_artifact(src, NULL),
                    VLS_ERR_INVALID_ARGUMENT, "path");
      REQUIRE_OK(vls_model_write_artifact(src, art));
      char id1[VLS_IDENTITY_SIZE], id2[VLS_IDENTITY_SIZE];
      REQUIRE_OK(vls_model_identity(src, id1, sizeof(id1)));
      bf.artifact = art;
      vls_model* mapped = NULL;
      REQUIRE_OK(vls_model_load(dir_plain, &bf, &mapped));
      REQUIRE_OK(vls_model_identity(mapped, id2, sizeof(id2)));
      CHECK(strcmp(id1, id2) == 0, "artifact load keeps the identity");
      vls_model_free(mapped);
      /* Served from the file's mapping instead of a copy: the same identity and outputs. */
      bf.artifact_memory = VLS_ARTIFACT_MEMORY_MAP;
      mapped = NULL;
      REQUIRE_OK(vls_model_load(dir_plain, &bf, &mapped));
      REQUIRE_OK(vls_model_identity(mapped, id2, sizeof(id2)));
      CHECK(strcmp(id1, id2) == 0, "mapped artifact keeps the identity");
      CHECK(SameGreedyTokens(src, mapped), "mapped artifact decodes as the prepared model");
      vls_model_free(mapped);
      bf.artifact_memory = VLS_ARTIFACT_MEMORY_COPY;
      bf.capacity = kCapacity + 1;
      RejectedPlain("artifact with other bounds", vls_model_load(dir_plain, &bf, &none),
                    VLS_ERR_FAILED_PRECONDITION, "compile");
      bf.capacity = kCapacity;
      bf.kv_cache = VLS_KV_CACHE_F32; /* the artifact was compiled for the BF16 cache */
      RejectedPlain("artifact with another KV cache type", vls_model_load(dir_plain, &bf, &none),
                    VLS_ERR_FAILED_PRECONDITION, "compile");
      bf.kv_cache = VLS_KV_CACHE_DEFAULT;
      bf.precision = VLS_PRECISION_F32;
      RejectedPlain("artifact with other precision", vls_model_load(dir_plain, &bf, &none),
                    VLS_ERR_INVALID_ARGUMENT, "precision");
      vls_model_free(src);
    }
    bad = opts;
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

  /* -- sessions -- */
  SessionTests(ds, plain);

  /* -- the batch engine -- */
  BatchTests(dir_ds, dir_plain, opts);
  {
    char dir_chat[4200];
    snprintf(dir_chat, sizeof(dir_chat), "%s/chat", root);
    if (vls_test_write_chat_model(dir_chat, 7) != 0) return 2;
    ChatTests(dir_chat);
  }
  MoeTests(root, opts);

  vls_model_free(ds);
  vls_model_free(plain);
  nftw(root, RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);

  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
