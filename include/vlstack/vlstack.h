/* vlstack C ABI: load a Qwen3 / Qwen3-VL model, prefill (tokens, embeddings or DeepStack
 * embeddings) and decode, from C or any language with a C FFI.
 *
 * Conventions (docs/style.md §5, docs/adr/0002-c-abi.md):
 *
 * - Handles are opaque (vls_model, vls_session, vls_batch). Every handle a vls_*_create /
 *   vls_*_load call returns is owned by the caller and freed with the matching vls_*_free
 *   (NULL is accepted).
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
 * different sessions may run concurrently). A vls_batch may be used from any number of threads
 * at once (see the batch section).
 *
 * Lifetimes: a session or batch refers to its model; free every session and batch of a model
 * before the model.
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

/* Position modes (docs/contracts.md §3): positions are i32 [S] in 1-D mode, i32 [3,S] (t,h,w rows)
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
  int32_t slots;        /* B: batch slots, > 0 (the slots of every vls_batch of the model) */
  int32_t nmax;         /* DeepStack Nmax: 0 = the config's, else the capacity */
  int32_t threads;      /* 0 = all cores */
  /* Since ABI 1.1 (struct_size >= 32); a smaller struct_size means the defaults. */
  int32_t precision;    /* VLS_PRECISION_F32 (exact reference path), _BF16, _INT8 or _INT4 */
  const char* artifact; /* NULL, or a prepared-weights artifact (vls_model_write_artifact,
                         * `vlstack compile`) to map instead of preparing; refused with
                         * VLS_ERR_FAILED_PRECONDITION unless its identity equals this load's */
  /* Since ABI 1.2 (struct_size >= 40); a smaller struct_size means the default. */
  int32_t kv_cache; /* VLS_KV_CACHE_DEFAULT (f32 at F32, BF16 otherwise), _F32 or _BF16; part of
                     * the identity, so an artifact serves only loads with its cache type */
  /* Since ABI 1.3 (struct_size >= 48); a smaller struct_size means the default. 64 bits, so that
   * it begins past the ABI 1.2 struct's tail padding, which an ABI 1.2 caller may leave unset. */
  int64_t artifact_memory; /* how `artifact` is held: VLS_ARTIFACT_MEMORY_COPY (default: read
                            * into huge pages, the faster decode) or _MAP (the file's mapping,
                            * shared through the page cache by processes on one node) */
} vls_model_options;

#define VLS_PRECISION_F32 0
#define VLS_PRECISION_BF16 1
#define VLS_PRECISION_INT8 2 /* Q8 blocked weights, per-call quantized activations */
#define VLS_PRECISION_INT4 3 /* Q4 blocked weights (LM head Q6), per-call quantized activations */

#define VLS_KV_CACHE_DEFAULT 0
#define VLS_KV_CACHE_F32 1
#define VLS_KV_CACHE_BF16 2 /* half the bytes attention streams per decode step */

#define VLS_ARTIFACT_MEMORY_COPY 0
#define VLS_ARTIFACT_MEMORY_MAP 1

/* Defaults: struct_size set, capacity 4096, slots 1, nmax 0, threads 0, precision F32,
 * artifact NULL, kv_cache DEFAULT, artifact_memory COPY. */
vls_model_options vls_model_default_options(void);

/* Loads the Hugging Face checkpoint directory `dir` (config.json, safetensors).
 * `options` may be NULL for the defaults. On success *out owns a new model.
 * REQUIRES: dir and out non-NULL. */
vls_status vls_model_load(const char* dir, const vls_model_options* options, vls_model** out);

/* The folder `model` names, for vls_model_load and vls_chat_create: `model` itself when that
 * path exists (VLS_ERR_INVALID_ARGUMENT when it is not a folder); otherwise, when it has the
 * form of a Hugging Face repository id ("Org/Name" or "Org/Name@revision"), that repository's
 * snapshot folder in the local Hugging Face cache, looked up offline in $HF_HUB_CACHE,
 * $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub and
 * ~/.cache/huggingface/hub (refs/<revision> names the commit; a commit prefix of 7 or more hex
 * digits names a snapshot directly); VLS_ERR_NOT_FOUND, naming every place looked, when neither.
 * The folder is written to buf NUL-terminated; *needed (when non-NULL) receives its byte length
 * + 1; VLS_ERR_OUT_OF_RANGE when len is smaller (buf may be NULL when len is 0).
 * REQUIRES: model non-NULL. */
vls_status vls_resolve_model(const char* model, char* buf, size_t len, size_t* needed);

/* Writes the model's prepared weights as an artifact at `path` (through `path`.tmp and a
 * rename) whose header carries the model's identity, so a later vls_model_load with the same
 * checkpoint, precision and bounds can map it via options.artifact.
 * REQUIRES: model and path non-NULL. */
vls_status vls_model_write_artifact(const vls_model* model, const char* path);

/* Frees a model. NULL is a no-op. REQUIRES: every session of the model is freed first. */
void vls_model_free(vls_model* model);

/* Writes the artifact identity (docs/contracts.md §1, lowercase hex SHA-256, NUL-terminated) into
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

/* The DeepStack prefill (docs/contracts.md §2). Refused on a model without DeepStack.
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

/* ---- Batch engine (docs/contracts.md §4)
 * ------------------------------------------------------------
 *
 * A vls_batch runs many requests over one model: B slots (the `slots` of the model's
 * vls_model_options; each slot has its own KV region of the model's capacity C) and a FIFO
 * queue of pending requests. A request is submitted (validated whole, then queued), admitted
 * into a free slot by a step (its own prefill, then its first token), decoded one token per
 * step together with every other active request, and finished by EOS (VLS_FINISH_STOP, which
 * wins over the length limit), by max_new_tokens (VLS_FINISH_LENGTH), by vls_batch_cancel
 * (VLS_FINISH_CANCELLED) or by a failure inside the engine (VLS_FINISH_ERROR, which never
 * disturbs another request).
 *
 * Events. Every token and every finish becomes one vls_token_event, appended in order to a
 * buffer inside the handle; vls_batch_step, vls_batch_admit, vls_batch_poll and vls_batch_wait
 * move events out of it (oldest first, at most `capacity` per call). Events that do not fit
 * stay buffered for the next call: none is ever dropped. A request emits events in order and
 * nothing after its finish event; the finish event of STOP and LENGTH carries the last token,
 * the finish event of CANCELLED and ERROR has token -1.
 *
 * Stepping is synchronous by default: the caller drives the engine with vls_batch_step (or
 * vls_batch_run_until_idle). vls_batch_start instead runs the steps on a thread owned by the
 * handle until vls_batch_stop or vls_batch_free; events are then read with vls_batch_poll or
 * vls_batch_wait, and the synchronous stepping calls are refused (FAILED_PRECONDITION).
 *
 * Submissions copy everything they keep (token ids, embeddings, positions, the DeepStack
 * payload) before they return, so the caller may free its tensors at once. A rejected submit
 * changes nothing: no id is used, the queue, pending_count and pending_bytes stay as they were.
 *
 * Thread safety: every vls_batch_* call may be made from any thread, concurrently with any
 * other on the same handle (the engine serialises steps; the event buffer has its own mutex),
 * except vls_batch_free, which must be the last call on the handle. A batch refers to its
 * model: free every batch of a model before the model. */

typedef struct vls_batch vls_batch;

/* Why a request finished; VLS_FINISH_NONE on the events of a request that goes on. The values
 * mirror the C++ vls::FinishReason. */
typedef enum vls_finish_reason {
  VLS_FINISH_NONE = 0,
  VLS_FINISH_STOP = 1,      /* an EOS token (the event carries it) */
  VLS_FINISH_LENGTH = 2,    /* max_new_tokens reached (the event carries the last token) */
  VLS_FINISH_CANCELLED = 3, /* vls_batch_cancel; token -1 */
  VLS_FINISH_ERROR = 4      /* a failure inside the engine; token -1; see vls_batch_request_error */
} vls_finish_reason;

typedef struct vls_token_event {
  uint64_t request_id;   /* the id vls_batch_submit_* returned */
  int32_t token;         /* the sampled token, or -1 (a finish without a token) */
  int32_t finish_reason; /* a vls_finish_reason */
} vls_token_event;

/* Per-request generation options (docs/contracts.md §4; sampling as in src/runtime/sampler.h). The
 * engine checks every value at submit: a bad value rejects the submit and names the field. */
typedef struct vls_request_options {
  uint32_t struct_size;     /* sizeof(vls_request_options); at least 56 (ABI 1) */
  int32_t max_new_tokens;   /* > 0, and S + max_new_tokens <= the model's capacity */
  int32_t ignore_eos;       /* 0 or 1: 1 keeps generating through EOS tokens */
  float temperature;        /* finite, >= 0; 0 is greedy (argmax, the lowest index wins ties) */
  int32_t top_k;            /* >= 0; 0 is off */
  float top_p;              /* (0, 1]; 1 is off */
  float min_p;              /* [0, 1]; 0 is off */
  float repetition_penalty; /* > 0; 1 is off (HF style, over prompt and generated tokens) */
  float presence_penalty;   /* finite; 0 is off (OpenAI style, over generated tokens) */
  float frequency_penalty;  /* finite; 0 is off (OpenAI style, over generated tokens) */
  int32_t has_seed;         /* 0 or 1: 0 derives the RNG seed from the request id */
  uint32_t reserved;        /* ignored; set it to 0 */
  uint64_t seed;            /* the RNG seed when has_seed is 1 */
} vls_request_options;

/* Defaults: struct_size set, max_new_tokens 16, ignore_eos 0, greedy (temperature 0), every
 * filter and penalty off, has_seed 0. */
vls_request_options vls_request_default_options(void);

/* A batch engine over `model` with the model's `slots` (vls_model_options.slots, B) slots of
 * its capacity C each; the model must outlive the batch. On success *out owns a new batch. */
vls_status vls_batch_create(const vls_model* model, vls_batch** out);

/* Stops the batch's thread if it runs, then frees the batch, its queue, its slots and its
 * buffered events. NULL is a no-op. No other call on the handle may be running or follow. */
void vls_batch_free(vls_batch* batch);

/* Submissions. Arguments as the matching vls_session_prefill_* (every descriptor is checked
 * the same way, position_mode must equal the model's, positions NULL means 0..S-1, the first
 * decode coordinate S + rope_delta must be representable and non-negative), plus `options`
 * (NULL for vls_request_default_options()). On success *out_id is the request's id (unique in
 * the batch, never 0) and the request is queued; on failure *out_id is not written. */

/* tokens: i32 [S], each in [0, V), 1 <= S <= C. */
vls_status vls_batch_submit_tokens(vls_batch* batch, const vls_tensor* tokens,
                                   int32_t position_mode, const vls_tensor* positions,
                                   int32_t rope_delta, const vls_request_options* options,
                                   uint64_t* out_id);

/* embeddings: f32 [S, H], finite. token_ids: NULL, or the prompt's i32 [S] ids (each in [0, V)),
 * which the repetition penalty then sees. */
vls_status vls_batch_submit_embeddings(vls_batch* batch, const vls_tensor* embeddings,
                                       int32_t position_mode, const vls_tensor* positions,
                                       int32_t rope_delta, const vls_tensor* token_ids,
                                       const vls_request_options* options, uint64_t* out_id);

/* A DeepStack request: the payload as vls_session_prefill_deepstack (docs/contracts.md §2, all four
 * validation layers run before the request is queued). Refused on a model without DeepStack. */
vls_status vls_batch_submit_deepstack(vls_batch* batch, const vls_tensor* embeddings,
                                      int32_t position_mode, const vls_tensor* positions,
                                      int32_t rope_delta, const vls_tensor* visual_positions,
                                      const vls_tensor* layer_features,
                                      const vls_tensor* layer_indices, const vls_tensor* token_ids,
                                      const vls_request_options* options, uint64_t* out_id);

/* Cancels a queued request (its buffers are freed now) or an active one (its slot is freed
 * now and the next admitted request reuses it). Buffers one VLS_FINISH_CANCELLED event; the
 * request emits nothing after it. VLS_ERR_NOT_FOUND when the id is unknown or finished. */
vls_status vls_batch_cancel(vls_batch* batch, uint64_t id);

/* Runs one engine step on the calling thread (admit pending requests into free slots and
 * sample their first tokens, then one shared decode over every active request), then moves up
 * to `capacity` buffered events, oldest first, into events[0..*count). Events that do not fit
 * (and events buffered earlier, such as cancellations) stay buffered. events may be NULL when
 * capacity is 0. FAILED_PRECONDITION while the batch's thread runs. */
vls_status vls_batch_step(vls_batch* batch, vls_token_event* events, size_t capacity,
                          size_t* count);

/* The admission half of a step alone (prefill + first token, no shared decode), so that tools
 * and tests can look at newly admitted requests (vls_batch_next_coordinate) before they decode.
 * Events as vls_batch_step. */
vls_status vls_batch_admit(vls_batch* batch, vls_token_event* events, size_t capacity,
                           size_t* count);

/* Steps until nothing is queued or active. Every event stays buffered for vls_batch_poll.
 * FAILED_PRECONDITION while the batch's thread runs. */
vls_status vls_batch_run_until_idle(vls_batch* batch);

/* Moves up to `capacity` buffered events, oldest first, into events[0..*count) without
 * stepping (*count is 0 when none is buffered). events may be NULL when capacity is 0. */
vls_status vls_batch_poll(vls_batch* batch, vls_token_event* events, size_t capacity,
                          size_t* count);

/* As vls_batch_poll, but first waits up to timeout_ms (>= 0) milliseconds for an event when
 * none is buffered. For a batch whose thread runs. */
vls_status vls_batch_wait(vls_batch* batch, int32_t timeout_ms, vls_token_event* events,
                          size_t capacity, size_t* count);

/* Starts the batch's own stepping thread (a no-op when it already runs); it steps while any
 * request is queued or active and sleeps otherwise. */
vls_status vls_batch_start(vls_batch* batch);

/* Stops and joins the batch's thread after its current step (a no-op when none runs).
 * Queued and active requests stay; synchronous stepping may resume. */
vls_status vls_batch_stop(vls_batch* batch);

/* Queued requests, active (admitted, unfinished) requests, and the bytes of token ids,
 * embeddings, positions and DeepStack payloads that queued requests own (cancelling a queued
 * request gives them back at once). */
vls_status vls_batch_pending_count(const vls_batch* batch, size_t* out);
vls_status vls_batch_active_count(const vls_batch* batch, size_t* out);
vls_status vls_batch_pending_bytes(const vls_batch* batch, uint64_t* out);

/* Events buffered in the handle and not yet moved out. */
vls_status vls_batch_buffered_count(const vls_batch* batch, size_t* out);

/* The RoPE coordinate (t, h, w) of an active request's next decode (physical length +
 * rope_delta on every axis), and the slot in [0, B) it occupies. VLS_ERR_NOT_FOUND, writing
 * nothing, when the request is not active (queued, finished or unknown). */
vls_status vls_batch_next_coordinate(const vls_batch* batch, uint64_t id, int32_t out[3]);
vls_status vls_batch_slot_of(const vls_batch* batch, uint64_t id, int32_t* out);

/* The error message of a request that finished with VLS_FINISH_ERROR. *needed (when non-NULL)
 * receives strlen(message) + 1; the NUL-terminated message is written into buf when
 * len >= that, else the call fails with VLS_ERR_OUT_OF_RANGE and writes only *needed (buf may
 * be NULL when len is 0). VLS_ERR_NOT_FOUND when the request has no error. Messages are kept
 * until the batch is freed. */
vls_status vls_batch_request_error(const vls_batch* batch, uint64_t id, char* buf, size_t len,
                                   size_t* needed);

/* ---- Chat requests: text in, text out (the request pipeline) -------------------------------
 *
 * A vls_chat is a model's front end, read from its model folder: tokenizer.json, the chat
 * template (chat_template.jinja, chat_template.json or tokenizer_config.json), the end-of-turn
 * ids (config.json, generation_config.json, tokenizer_config.json) and, when the folder has a
 * vision tower (model.visual.* weights and preprocessor_config.json), the image encoder with
 * its cache. It is immutable: one vls_chat may serve any number of batches of its model from
 * any thread.
 *
 * Image parts ({"type": "image", "image": URL} or {"type": "image_url", "image_url": {"url":
 * URL}}) must carry the image as a data: URL (data:image/png;base64,...; JPEG, PNG or WebP):
 * the library never reads files or fetches URLs a request names. Each image is decoded,
 * preprocessed and encoded on the submitting thread (once per distinct image: the encoder
 * cache), its pad expanded and its rows and DeepStack features placed. Video parts
 * ({"type": "video", "video": URL}, the form the Qwen3-VL chat template places, optionally with
 * "fps", "max_frames" or "num_frames"; URL a data:video/...;base64, URL of an MP4, WebM, ...
 * clip) are decoded, their frames sampled (2 per second within 4..768 frames by default) and
 * encoded the same way, each pair of frames a timestamped group of the prompt (docs/video.md);
 * a clip that does not decode is refused naming its message part. vLLM's {"type": "video_url",
 * "video_url": {"url": URL}} is taken too: it is given the "video" form before the template
 * renders (as vLLM does).
 *
 * vls_batch_submit_chat renders chat messages through the template, tokenizes them and queues
 * the request like any other submission. Its events are the usual vls_token_event stream, with
 * one difference: when the text reaches one of the request's stop strings, the request finishes
 * with VLS_FINISH_STOP on the event of the token that completed it (the engine's request is
 * cancelled; nothing follows). vls_batch_take_text moves out the request's text produced so far:
 * UTF-8 that never ends inside a character, special tokens (and the EOS or stop token that
 * ended the request) left out, stop strings and everything after them cut, and no text that a
 * stop string could still claim. */

typedef struct vls_chat vls_chat;

/* Reads the front end of `model` from `model_dir` (the folder the model was loaded from). The
 * model must outlive the chat. On success *out owns a new vls_chat. VLS_ERR_NOT_FOUND names a
 * missing tokenizer.json or chat template. */
vls_status vls_chat_create(const vls_model* model, const char* model_dir, vls_chat** out);

/* Frees the chat. NULL is a no-op. Free it after every batch it submitted to is done with it. */
void vls_chat_free(vls_chat* chat);

/* Submits a chat request given as one UTF-8 JSON object:
 *   {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": "..." or [parts]}],
 *    "tools": [...], "add_generation_prompt": true, "enable_thinking": bool,
 *    "chat_template_kwargs": {...}, "max_tokens": N, "temperature": T, "top_p": P, "top_k": K,
 *    "min_p": M, "repetition_penalty": R, "presence_penalty": X, "frequency_penalty": Y,
 *    "seed": S, "stop": "..." or ["...", ...], "stop_token_ids": [...], "ignore_eos": bool,
 *    "logprobs": -1..20, "logit_bias": {"<token id>": bias}}
 * Only "messages" is required. Absent sampling fields take the model's generation_config.json
 * defaults (greedy without one); max_tokens defaults to the rest of the context. Unknown
 * fields, wrong types, image or video parts the model cannot take and images or videos that do
 * not decode are refused (VLS_ERR_INVALID_ARGUMENT or VLS_ERR_DATA_LOSS) naming the field or
 * message part. The
 * chat must belong to the batch's model. On success *out_id is the request's id. */
vls_status vls_batch_submit_chat(vls_batch* batch, const vls_chat* chat, const char* request_json,
                                 uint64_t* out_id);

/* Moves the text chat request `id` produced since the last call into buf, NUL-terminated.
 * *needed (when non-NULL) receives its byte length + 1; when len is smaller the call fails with
 * VLS_ERR_OUT_OF_RANGE and moves nothing (buf may be NULL when len is 0). *finished (when
 * non-NULL) receives 1 once the request has finished and this was the last of its text. The
 * text of a finished request is forgotten once it has all been taken; VLS_ERR_NOT_FOUND after
 * that, and for ids that are not chat requests of this batch. */
vls_status vls_batch_take_text(vls_batch* batch, uint64_t id, char* buf, size_t len, size_t* needed,
                               int32_t* finished);

/* The chat's tokenizer and template on their own (added in ABI 1; the version stays 1). Like
 * every vls_chat call they may run on any thread at once. */

/* The token ids of text[0..text_len) (UTF-8; it need not be NUL-terminated and may hold NUL
 * bytes; bytes that are not valid UTF-8 are first replaced by U+FFFD) as the model folder's
 * tokenizer.json encodes it, exactly as Hugging Face tokenizers does: special tokens written in
 * the text (such as "<|im_start|>") are recognised, and nothing is added around the text.
 * *count receives the number of ids N; ids[0..N) are written when capacity >= N, else the
 * call fails with VLS_ERR_OUT_OF_RANGE and writes only *count. text may be NULL when
 * text_len is 0; ids may be NULL when capacity is 0. An id the model's vocabulary does not
 * hold (the tokenizer is larger than the model's V) fails with VLS_ERR_INVALID_ARGUMENT.
 * REQUIRES: chat and count non-NULL. */
vls_status vls_chat_tokenize(const vls_chat* chat, const char* text, size_t text_len, int32_t* ids,
                             size_t capacity, size_t* count);

/* The text of ids[0..n) (each in [0, V), V the model's vocabulary; an id outside it fails with
 * VLS_ERR_INVALID_ARGUMENT naming its index): UTF-8, byte sequences that do not form valid
 * UTF-8 become U+FFFD, ids in range that name no token are skipped (as tokenizers does), and
 * special tokens are left out when skip_special is 1 (0 keeps them; any other value is
 * refused). *needed (when non-NULL) receives the text's byte length + 1; the NUL-terminated
 * text is written into buf when len >= that, else the call fails with VLS_ERR_OUT_OF_RANGE and
 * writes only *needed (buf may be NULL when len is 0). The text may itself hold NUL bytes (a
 * token of byte 0): its length is *needed - 1, not strlen(buf). ids may be NULL when n is 0.
 * REQUIRES: chat non-NULL. */
vls_status vls_chat_detokenize(const vls_chat* chat, const int32_t* ids, size_t n,
                               int32_t skip_special, char* buf, size_t len, size_t* needed);

/* The prompt text vls_batch_submit_chat would tokenize for `request_json` (the same JSON
 * object, parsed and checked the same way; its sampling and limit fields are checked and
 * otherwise unused): the messages rendered through the chat template, an image part as the
 * template writes it (one pad token, not yet expanded to the image's rows; the image is not
 * decoded).
 * Output as vls_chat_detokenize (*needed, VLS_ERR_OUT_OF_RANGE when len is too small).
 * REQUIRES: chat and request_json non-NULL. */
vls_status vls_chat_render(const vls_chat* chat, const char* request_json, char* buf, size_t len,
                           size_t* needed);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* VLSTACK_VLSTACK_H_ */
