#!/usr/bin/env python3
"""The frontends use the runtime's public headers only (docs/style.md §1).

The frontends (src/cli, src/server, src/capi) include, from the layers below them, the runtime's
public headers (src/runtime/*.h but the runtime's own: entries.h and the *_test_util.h
fixtures) and the utility layers base/, io/ and tokenizer/, which those headers expose. They do
not reach past the runtime into tensor/, kernels/, model/, vision/, image/, video/ or grammar/.

KNOWN lists, header by header, the includes that still do, with the reason; any other include of
a layer below the runtime, or of a runtime internal, fails this test, and so does a KNOWN entry
that no longer occurs (so that the list only shrinks). Tests beside the code (*_test.cc, the C
ABI's capi_test_*) may use what they test and are not checked.

Usage: frontend_includes_test.py [REPO_ROOT]
"""
import os
import re
import sys

FRONTENDS = ("src/cli", "src/server", "src/capi")
BELOW_RUNTIME = ("tensor/", "kernels/", "model/", "vision/", "image/", "video/", "grammar/")
RUNTIME_INTERNAL = re.compile(r"^runtime/(entries\.h|.*_test_util\.h)$")

# (file, included header) -> why it is still there.
KNOWN = {
    # `vlstack vision` runs the vision tower on its own (docs/contracts.md §6): the vision
    # layer is what it checks.
    ("src/cli/vision_command.cc", "image/decode.h"): "the vision command",
    ("src/cli/vision_command.cc", "kernels/dispatch.h"): "the vision command",
    ("src/cli/vision_command.cc", "model/qwen3_config.h"): "the vision command",
    ("src/cli/vision_command.cc", "video/video_decode.h"): "the vision command",
    ("src/cli/vision_command.cc", "vision/image_processor_config.h"): "the vision command",
    ("src/cli/vision_command.cc", "vision/preprocess.h"): "the vision command",
    ("src/cli/vision_command.cc", "vision/video_preprocess.h"): "the vision command",
    ("src/cli/vision_command.cc", "vision/vision_config.h"): "the vision command",
    ("src/cli/vision_command.cc", "vision/vision_model.h"): "the vision command",
    # `vlstack make-test-model` writes a checkpoint with the model layer's test writer.
    ("src/cli/make_test_model.cc", "model/test_checkpoint.h"): "the test-model writer",
    # Still to move behind runtime/image_encoder.h: forward's and batch's image and video files
    # are decoded and preprocessed by the CLI itself.
    ("src/cli/image_request.cc", "image/decode.h"): "to move behind ImageEncoder",
    ("src/cli/image_request.cc", "vision/image_processor_config.h"): "to move behind ImageEncoder",
    ("src/cli/image_request.cc", "vision/smart_resize.h"): "to move behind ImageEncoder",
    ("src/cli/image_request.cc", "vision/video_processor_config.h"): "to move behind ImageEncoder",
    # `vlstack bench` reads a config without loading the model, and counts the vision FLOPs.
    ("src/cli/bench_command.cc", "model/qwen3_config.h"): "LoadQwen3Config",
    ("src/cli/bench_scenarios.cc", "vision/vision_flops.h"): "VisionEncodeFlops",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def is_test(name):
    return name.endswith("_test.cc") or name.startswith("capi_test_")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = {}
    for folder in FRONTENDS:
        for name in sorted(os.listdir(os.path.join(root, folder))):
            if not name.endswith((".cc", ".h", ".c")) or is_test(name):
                continue
            path = f"{folder}/{name}"
            with open(os.path.join(root, path), encoding="utf-8") as f:
                for line in f:
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    header = m.group(1)
                    if header.startswith(BELOW_RUNTIME) or RUNTIME_INTERNAL.match(header):
                        found[(path, header)] = True
    errors = []
    for key in sorted(found):
        if key not in KNOWN:
            errors.append(f"{key[0]} includes {key[1]}: a frontend uses the runtime's public "
                          "headers only (docs/style.md §1); put what it needs behind one")
    for key in sorted(KNOWN):
        if key not in found:
            errors.append(f"{key[0]} no longer includes {key[1]}: remove it from KNOWN in "
                          f"{os.path.relpath(__file__, root)}")
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"frontend_includes_test: {len(found)} known exceptions, no new ones")
    return 0


if __name__ == "__main__":
    sys.exit(main())
