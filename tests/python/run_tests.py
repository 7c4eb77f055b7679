#!/usr/bin/python3
"""Runs the Python binding tests (tests/python/test_*.py, stdlib unittest) as the ctest
python_bindings does: VLSTACK_LIBRARY (libvlstack.so), VLSTACK_BIN (vlstack) and PYTHONPATH
(python/) come from the environment (tests/python/tests.cmake). Exit status 0 when every test
passes, 1 otherwise, 77 (skipped) when NumPy, the Qwen3 tokenizer of tests/tokenizer/setup.sh
or a usable library build is missing."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    sys.path.insert(0, HERE)
    import vls_test_util as util  # pylint: disable=import-outside-toplevel
    if os.environ.get("VLS_PY_SKIP"):
        print("python_bindings: SKIP: " + os.environ["VLS_PY_SKIP"])
        return 77
    try:
        import numpy  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        print("python_bindings: SKIP: NumPy is not installed (python3-numpy)")
        return 77
    if not os.path.isfile(util.TOKENIZER_JSON):
        print("python_bindings: SKIP: %s is missing (run tests/tokenizer/setup.sh)"
              % util.TOKENIZER_JSON)
        return 77
    for var in ("VLSTACK_LIBRARY", "VLSTACK_BIN"):
        if not os.path.isfile(os.environ.get(var, "")):
            print("python_bindings: FAIL: %s=%r is not a file" % (var, os.environ.get(var)))
            return 1
    suite = unittest.defaultTestLoader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
