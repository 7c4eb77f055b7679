#!/usr/bin/python3
"""Oracle check of vlstack's image preprocessing against transformers' Python + torchvision.

usage: /usr/bin/python3 tests/oracle/preprocess_cases.py --check PATH_TO_preprocess_oracle_test
                                                         --work WORKDIR [--filter SUBSTR]

preprocess_ref.py writes the cases (deterministic synthetic images, configs and the expected
grids, resized pixels and pixel_values) to WORK/cases; the C++ checker recomputes each case with
PreprocessImages and compares (grids exact, resized pixels within 1 level, pixel_values within
one level after normalising + 1e-6). Its output (PASS/FAIL per case with the measured
differences) is printed; the exit status is the checker's.
"""

import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import preprocess_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", required=True, help="the preprocess_oracle_test binary")
    ap.add_argument("--work", required=True)
    ap.add_argument("--filter", default=None)
    a = ap.parse_args()
    preprocess_ref.selftest()
    cases = os.path.join(a.work, "cases")
    shutil.rmtree(cases, ignore_errors=True)
    preprocess_ref.make_cases(cases, a.filter)
    r = subprocess.run([a.check, cases], timeout=600)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
