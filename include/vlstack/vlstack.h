/* vlstack C ABI: load a Qwen3 / Qwen3-VL model, prefill (tokens, embeddings or DeepStack
 * embeddings) and decode, from C or any language with a C FFI.
 *
 * Conventions (STYLE §Habits 5, docs/adr/0002-c-abi.md):
 *
 * - Handles are opaque (vls_model, vls_session). Every handle a vls_*_create / vls_*_load call
 *   returns is owned by the caller and freed with the matching vls_*_free (NULL is accepted).
 * - Every call that can fail returns a vls_status. VLS_OK is 0. On failure the call changes
 *   nothing: no output parameter is written, and a session keeps its KV cache, length,
 *   rope_delta and logits exactly as they were.
 * - vls_last_error() returns a message for the most recent failing call on the calling thread.
 *   It names the function, the tensor or field, and the rule that failed, e.g.
 *   "vls_session_prefill_deepstack: deepstack.positions_not_sorted: visual_positions ...".
 * - Tensors cross the ABI as vls_tensor descriptors that the caller owns. The library reads
 *   them only during the call (it copies what it keeps), so they may be freed on return.
 *   Every descriptor is checked before anything runs: non-NULL descriptor, data non-NULL unless
 *   byte_length is 0, data aligned to its element size, dtype, rank in 1..4, every dim >= 0 and
 *   equal to the expected dim, and byte_length exactly product(dims) * element size (computed
 *   with overflow checks). Values are checked too (token ids in the vocabulary, finite
 *   embeddings and features, strictly increasing in-range visual positions, the DeepStack layer
 *   contract). A bad request is rejected whole.
 * - The position mode (1-D or M-RoPE) is a property of the loaded model. Every prefill takes it
 *   explicitly and refuses a mode different from the model's; the mode is never inferred from a
 *   tensor's rank.
 * - Option and description structs begin with struct_size, which the caller sets to
 *   sizeof(the struct) it was compiled with. A struct_size smaller than the first ABI version
 *   of the struct is refused; a larger one is accepted and only the known prefix is used.
 * - No C++ exception, abort or assert caused by input ever crosses this boundary.
 *
 * Thread safety: vls_abi_version, vls_last_error and vls_status_name may be called from any
 * thread at any time. A vls_model is immutable after loading and may be shared by any number
 * of threads and sessions. A vls_session must be used by one thread at a time (calls on
 * different sessions may run concurrently).
 *
 * Lifetimes: a session refers to its model; free every session of a model before the model.
 */
#ifndef VLSTACK_VLSTACK_H_
#define VLSTACK_VLSTACK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes; vls_abi_version() returns the library's. */
#define VLS_ABI_VERSION 1u

/* Bytes vls_model_identity needs: 64 hex digits and a terminating NUL. */
#define VLS_IDENTITY_SIZE 65u

/* Status codes. The values are stable and mirror the C++ vls::StatusCode. */
typedef enum vls_status {
  VLS_OK = 0,
  VLS_ERR_INVALID_ARGUMENT = 1,    /* an argument breaks a documented rule */
  VLS_ERR_NOT_FOUND = 2,           /* a named file, tensor or key is absent */
  VLS_ERR_DATA_LOSS = 3,           /* a file is corrupt, truncated or lies about itself */
  VLS_ERR_OUT_OF_RANGE = 4,        /* an index or size exceeds a static bound (or a buffer) */
  VLS_ERR_FAILED_PRECONDITION = 5, /* the object is in the wrong state for the call */
  VLS_ERR_UNIMPLEMENTED = 6,       /* a recognised but unsupported feature */
  VLS_ERR_INTERNAL = 7,            /* a bug in vlstack; never caused by input */
  VLS_ERR_IO = 8,                  /* the operating system refused a file operation */
  VLS_ERR_RESOURCE_EXHAUSTED = 9,  /* out of memory, slots or capacity */
  VLS_ERR_CANCELLED = 10
} vls_status;

/* Element types of vls_tensor.dtype. */
typedef enum vls_dtype { VLS_DTYPE_F32 = 0, VLS_DTYPE_I32 = 1 } vls_dtype;

/* Position modes (CONTRACTS §3): positions are i32 [S] in 1-D mode, i32 [3,S] (t,h,w rows)
 * in M-RoPE mode. */
typedef enum vls_position_mode { VLS_POSITIONS_1D = 0, VLS_POSITIONS_MROPE = 1 } vls_position_mode;

/* A borrowed, dense, row-major tensor. dims[rank..3] are ignored. */
typedef struct vls_tensor {
  const void* data;     /* NULL only when byte_length is 0; aligned to the element size */
  uint64_t byte_length; /* exactly product(dims[0..rank)) * element size */
  int32_t dtype;        /* a vls_dtype */
  int32_t rank;         /* 1..4 */
  int64_t dims[4];
} vls_tensor;

typedef struct vls_model vls_model;
typedef struct vls_session vls_session;

/* ---- Library ---------------------------------------------------------------------------- */

/* The library's ABI version (VLS_ABI_VERSION of the header it was built with). */
uint32_t vls_abi_version(void);

/* The message of the last failing vls call on this thread, or "" if the last call succeeded.
 * Never NULL. The pointer stays valid until the next vls call on this thread. */
const char* vls_last_error(void);

/* A static name such as "INVALID_ARGUMENT"; "UNKNOWN" for values outside vls_status. */
const char* vls_status_name(int32_t status);

/* ---- Model ------------------------------------------------------------------------------ */

typedef struct vls_model_options {
  uint32_t struct_size; /* sizeof(vls_model_options); at least 20 (ABI 1) */
  int32_t capacity;     /* C: per-session context capacity, > 0 */
  int32_t slots;        /* B: batch slots, > 0 */
  int32_t nmax;         /* DeepStack Nmax: 0 = the config's, else the capacity */
  int32_t threads;      /* 0 = all cores */
} vls_model_options;

/* Defaults: struct_size set, capacity 4096, slots 1, nmax 0, threads 0. */
vls_model_options vls_model_default_options(void);

/* Loads the Hugging Face checkpoint directory `dir` (config.json, safetensors).
 * `options` may be NULL for the defaults. On success *out owns a new model.
 * REQUIRES: dir and out non-NULL. */
vls_status vls_model_load(const char* dir, const vls_model_options* options, vls_model** out);

/* Frees a model. NULL is a no-op. REQUIRES: every session of the model is freed first. */
void vls_model_free(vls_model* model);

/* Writes the artifact identity (CONTRACTS §1, lowercase hex SHA-256, NUL-terminated) into
 * buf. Fails with VLS_ERR_OUT_OF_RANGE, writing nothing, when len < VLS_IDENTITY_SIZE.
 * The first call hashes every weight (seconds for a 2B model); later calls are cheap. */
vls_status vls_model_identity(const vls_model* model, char* buf, size_t len);

typedef struct vls_model_desc {
  uint32_t struct_size; /* set by the caller: sizeof(vls_model_desc); at least 64 (ABI 1) */
  int32_t hidden;       /* H */
  int32_t vocab;        /* V */
  int32_t layers;       /* L */
  int32_t heads;
  int32_t kv_heads;
  int32_t head_dim;
  int32_t position_mode;         /* a vls_position_mode */
  int32_t has_deepstack;         /* 1 when the DeepStack prefill entry exists */
  int32_t deepstack_layer_count; /* K; 0 without DeepStack */
  int32_t nmax;                  /* DeepStack Nmax; 0 without DeepStack */
  int32_t capacity;              /* C */
  int32_t slots;                 /* B */
  int32_t image_token_id;        /* -1 when the config has none */
  int32_t video_token_id;        /* -1 when the config has none */
  int32_t reserved;              /* 0 */
} vls_model_desc;

/* Fills the first out->struct_size bytes of *out (at most sizeof(vls_model_desc)).
 * REQUIRES: out->struct_size set by the caller. */
vls_status vls_model_info(const vls_model* model, vls_model_desc* out);

/* The DeepStack target layers: *count = K always (0 without DeepStack); layers[0..K) are
 * written when capacity >= K, else the call fails with VLS_ERR_OUT_OF_RANGE and writes only
 * *count. layers may be NULL when capacity is 0. */
vls_status vls_model_deepstack_layers(const vls_model* model, int32_t* layers, size_t capacity,
                                      size_t* count);

/* ---- Session ---------------------------------------------------------------------------- */

/* A single sequence over `model` with the model's context capacity. The model must outlive
 * the session. On success *out owns a new session. */
vls_status vls_session_create(const vls_model* model, vls_session** out);

/* Frees a session. NULL is a no-op. */
void vls_session_free(vls_session* session);

/* Every prefill replaces the session's sequence. On success the logits of the last row
 * (f32 [V]) are available from vls_session_logits, length becomes S and rope_delta becomes
 * `rope_delta` (the first decode RoPE coordinate is S + rope_delta, which must be
 * representable and non-negative). On failure nothing changes.
 *
 * position_mode must equal the model's. positions: i32 [S] (1-D) or i32 [3,S] (M-RoPE), or
 * NULL for 0..S-1 on every axis. */

/* tokens: i32 [S], each in [0, V); 1 <= S <= capacity. */
vls_status vls_session_prefill_tokens(vls_session* session, const vls_tensor* tokens,
                                      int32_t position_mode, const vls_tensor* positions,
                                      int32_t rope_delta);

/* embeddings: f32 [S, H], every value finite. */
vls_status vls_session_prefill_embeddings(vls_session* session, const vls_tensor* embeddings,
                                          int32_t position_mode, const vls_tensor* positions,
                                          int32_t rope_delta);

/* The DeepStack prefill (CONTRACTS §2). Refused on a model without DeepStack.
 * visual_positions: i32 [Nv], strictly increasing, each in [0, S), Nv <= Nmax (Nv = 0 is valid)
 * layer_features:   f32 [K, Nv, H], every value finite, H the model's hidden size
 * layer_indices:    i32 [K], equal element for element to the model's target layers
 * token_ids:        NULL, or the request's i32 [S] ids; then visual_positions must be exactly
 *                   the positions of its image/video pad tokens. */
vls_status vls_session_prefill_deepstack(vls_session* session, const vls_tensor* embeddings,
                                         int32_t position_mode, const vls_tensor* positions,
                                         int32_t rope_delta, const vls_tensor* visual_positions,
                                         const vls_tensor* layer_features,
                                         const vls_tensor* layer_indices,
                                         const vls_tensor* token_ids);

/* Appends `token` (in [0, V)) at physical index length with RoPE coordinate
 * length + rope_delta. REQUIRES: a successful prefill; length < capacity. */
vls_status vls_session_decode(vls_session* session, int32_t token);

/* The logits (f32 [V]) of the last successful prefill or decode. *data stays valid, and owned
 * by the session, until the next successful prefill or decode on the session or its free.
 * Fails with VLS_ERR_FAILED_PRECONDITION before any successful call. */
vls_status vls_session_logits(const vls_session* session, const float** data, uint64_t* count);

/* The physical KV length (0 before any prefill). */
vls_status vls_session_length(const vls_session* session, int32_t* out);

/* The committed rope_delta (0 before any prefill). */
vls_status vls_session_rope_delta(const vls_session* session, int32_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* VLSTACK_VLSTACK_H_ */
