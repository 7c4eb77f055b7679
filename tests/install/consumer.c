/* A program outside the vlstack tree, built against an installed vlstack (pkg-config or
 * find_package) by tests/install/install_test.py. Plain C11 over the public header only.
 *
 * usage: consumer MODEL_DIR
 *
 * Loads the model in MODEL_DIR (a tiny `vlstack make-test-model` checkpoint), prefills five
 * tokens, decodes the greedy token once, and prints, one "key value" per line:
 *   abi N, model H V L, prefill_argmax T, decode_argmax T, length N, bad_path STATUS MESSAGE
 * The last comes from loading MODEL_DIR/no-such-model, which must fail with a message from
 * vls_last_error. Exit status 0 when every call behaved, 1 otherwise (the reason on stderr). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vlstack/vlstack.h>

static int Fail(const char* what, vls_status status) {
  fprintf(stderr, "consumer: %s failed: %s: %s\n", what, vls_status_name(status), vls_last_error());
  return 0;
}

/* The index of the largest logit (the lowest index wins ties); -1 when a logit is not finite. */
static int32_t Argmax(const float* logits, uint64_t count) {
  int32_t best = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!isfinite(logits[i])) return -1;
    if (logits[i] > logits[best]) best = (int32_t)i;
  }
  return best;
}

/* The argmax of the session's current logits into *out; 0 on failure. */
static int LogitsArgmax(const vls_session* session, int32_t vocab, int32_t* out) {
  const float* logits = NULL;
  uint64_t count = 0;
  vls_status status = vls_session_logits(session, &logits, &count);
  if (status != VLS_OK) return Fail("vls_session_logits", status);
  if (logits == NULL || count != (uint64_t)vocab) {
    fprintf(stderr, "consumer: logits count %llu, expected the vocabulary %d\n",
            (unsigned long long)count, vocab);
    return 0;
  }
  *out = Argmax(logits, count);
  if (*out < 0) {
    fprintf(stderr, "consumer: a logit is not finite\n");
    return 0;
  }
  return 1;
}

/* A bad model path: a non-OK status, no model, and a message naming the call. */
static int CheckBadPath(const char* model_dir) {
  char bad[4096];
  int n = snprintf(bad, sizeof bad, "%s/no-such-model", model_dir);
  if (n < 0 || (size_t)n >= sizeof bad) {
    fprintf(stderr, "consumer: the model path is too long\n");
    return 0;
  }
  vls_model* model = NULL;
  vls_status status = vls_model_load(bad, NULL, &model);
  const char* message = vls_last_error();
  if (status == VLS_OK || model != NULL) {
    fprintf(stderr, "consumer: vls_model_load(%s) succeeded\n", bad);
    vls_model_free(model);
    return 0;
  }
  if (message == NULL || strstr(message, "vls_model_load") == NULL) {
    fprintf(stderr, "consumer: vls_last_error() does not name vls_model_load: '%s'\n",
            message == NULL ? "(null)" : message);
    return 0;
  }
  printf("bad_path %s %s\n", vls_status_name(status), message);
  return 1;
}

/* Prefill of five tokens and one greedy decode on a session over `model`. */
static int RunSession(const vls_model* model) {
  vls_model_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  vls_status status = vls_model_info(model, &desc);
  if (status != VLS_OK) return Fail("vls_model_info", status);
  printf("model %d %d %d\n", desc.hidden, desc.vocab, desc.layers);

  vls_session* session = NULL;
  status = vls_session_create(model, &session);
  if (status != VLS_OK) return Fail("vls_session_create", status);
  int ok = 0;
  const int32_t tokens[5] = {1, 2, 3, 4, 5};
  vls_tensor t;
  memset(&t, 0, sizeof t);
  t.data = tokens;
  t.byte_length = sizeof tokens;
  t.dtype = VLS_DTYPE_I32;
  t.rank = 1;
  t.dims[0] = 5;
  int32_t first = -1;
  int32_t second = -1;
  int32_t length = 0;
  /* Positions NULL: 0..S-1 on every axis, in the model's own position mode. */
  status = vls_session_prefill_tokens(session, &t, desc.position_mode, NULL, 0);
  if (status != VLS_OK) {
    Fail("vls_session_prefill_tokens", status);
  } else if (LogitsArgmax(session, desc.vocab, &first)) {
    status = vls_session_decode(session, first);
    if (status != VLS_OK) {
      Fail("vls_session_decode", status);
    } else if (LogitsArgmax(session, desc.vocab, &second)) {
      status = vls_session_length(session, &length);
      if (status != VLS_OK) {
        Fail("vls_session_length", status);
      } else if (length != 6) {
        fprintf(stderr, "consumer: length %d after 5 tokens and a decode\n", length);
      } else {
        printf("prefill_argmax %d\ndecode_argmax %d\nlength %d\n", first, second, length);
        ok = 1;
      }
    }
  }
  vls_session_free(session);
  return ok;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer MODEL_DIR\n");
    return 2;
  }
  printf("abi %u\n", (unsigned)vls_abi_version());
  if (vls_abi_version() != VLS_ABI_VERSION) {
    fprintf(stderr, "consumer: library ABI %u, header ABI %u\n", (unsigned)vls_abi_version(),
            (unsigned)VLS_ABI_VERSION);
    return 1;
  }
  if (!CheckBadPath(argv[1])) return 1;

  vls_model_options options = vls_model_default_options();
  options.capacity = 64;
  options.threads = 1;
  vls_model* model = NULL;
  vls_status status = vls_model_load(argv[1], &options, &model);
  if (status != VLS_OK) {
    Fail("vls_model_load", status);
    return 1;
  }
  int ok = RunSession(model);
  vls_model_free(model);
  return ok ? 0 : 1;
}
