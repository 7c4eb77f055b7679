"""Finding and loading libvlstack.so: VLSTACK_LIBRARY, the loader's search path, a clear error
naming where it looked, the ABI version check; status names and error classes."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import vlstack
from vlstack import errors

import vls_test_util as util

PYTHONPATH = os.path.join(util.REPO, "python")


def python(code, env):
    """Runs `code` in a fresh interpreter (a process loads one library) with `env`."""
    env = dict(env, PYTHONPATH=PYTHONPATH)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=60)


def env_without_library():
    env = {k: v for k, v in os.environ.items() if k not in ("VLSTACK_LIBRARY", "LD_LIBRARY_PATH")}
    return env


class LibraryTest(unittest.TestCase):

    def test_loaded_from_the_variable(self):
        self.assertEqual(vlstack.abi_version(), 1)
        self.assertEqual(vlstack.ABI_VERSION, 1)
        self.assertEqual(vlstack.library_path(), os.environ["VLSTACK_LIBRARY"])

    def test_status_names_and_classes(self):
        self.assertEqual(vlstack.status_name(0), "OK")
        self.assertEqual(vlstack.status_name(1), "INVALID_ARGUMENT")
        self.assertEqual(vlstack.status_name(9), "RESOURCE_EXHAUSTED")
        self.assertEqual(vlstack.status_name(99), "UNKNOWN")
        for code in range(1, 11):
            e = errors.error_for(code, "m")
            self.assertIsInstance(e, vlstack.VlsError)
            self.assertEqual((e.code, e.status, e.message), (code, vlstack.status_name(code), "m"))
            self.assertEqual(type(e).status, e.status, "the class's status matches the library's")
        self.assertIsInstance(errors.error_for(1, "m"), ValueError)

    def test_a_failing_call_raises_with_the_last_error(self):
        with self.assertRaises(vlstack.VlsError) as cm:
            vlstack.Model(os.path.join(util.work_dir(), "no-such-model"))
        e = cm.exception
        self.assertIn(e.status, ("NOT_FOUND", "IO_ERROR", "INVALID_ARGUMENT"))
        self.assertEqual(e.status, vlstack.status_name(e.code))
        self.assertTrue(e.message.startswith("vls_model_load: "), e.message)
        self.assertIn("no-such-model", e.message)

    def test_missing_library_names_where_it_looked(self):
        env = dict(env_without_library(), VLSTACK_LIBRARY="/nonexistent/libvlstack.so.1")
        p = python("""
            import vlstack
            try:
                vlstack.Model("/tmp")
            except vlstack.LibraryError as e:
                print("LibraryError:", e)
            """, env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("LibraryError:", p.stdout)
        self.assertIn("/nonexistent/libvlstack.so.1: no such file", p.stdout)
        self.assertIn("VLSTACK_LIBRARY", p.stdout)

    def test_search_without_the_variable(self):
        # On the loader's search path (as an installed library is): found by its soname.
        d = tempfile.mkdtemp(dir=util.work_dir())
        os.symlink(os.path.realpath(os.environ["VLSTACK_LIBRARY"]),
                   os.path.join(d, "libvlstack.so.1"))
        env = dict(env_without_library(), LD_LIBRARY_PATH=d)
        p = python("import vlstack; print(vlstack.abi_version(), vlstack.library_path())", env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split()[0], "1")
        # Nowhere: the error lists every place it tried.
        p = python("""
            import vlstack
            try:
                vlstack.load_library()
                print("found", vlstack.library_path())
            except vlstack.LibraryError as e:
                print("LibraryError:", e)
            """, env_without_library())
        self.assertEqual(p.returncode, 0, p.stderr)
        if p.stdout.startswith("found"):
            self.skipTest("a libvlstack.so.1 is installed on this machine: " + p.stdout)
        self.assertIn("libvlstack.so.1", p.stdout)
        self.assertIn(os.path.join(sys.prefix, "lib", "libvlstack.so.1"), p.stdout)
        self.assertIn("VLSTACK_LIBRARY", p.stdout)

    def test_another_abi_version_is_refused(self):
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            self.skipTest("no C compiler to build a library of another ABI version")
        d = tempfile.mkdtemp(dir=util.work_dir())
        src = os.path.join(d, "fake.c")
        with open(src, "w") as f:
            f.write("unsigned vls_abi_version(void) { return 2u; }\n")
        so = os.path.join(d, "libvlstack.so.1")
        util.run([cc, "-shared", "-fPIC", "-o", so, src])
        p = python("""
            import vlstack
            try:
                vlstack.load_library()
            except vlstack.LibraryError as e:
                print("LibraryError:", e)
            """, dict(env_without_library(), VLSTACK_LIBRARY=so))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("speaks vlstack C ABI version 2; this package needs 1", p.stdout)


if __name__ == "__main__":
    unittest.main()
