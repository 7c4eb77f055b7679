#!/usr/bin/python3
"""Installs, packages and uses vlstack from a built tree, as a user outside the tree would.

usage: install_test.py --build BUILD_DIR --source SOURCE_DIR [--keep]

BUILD_DIR must hold built `vlstack` and `vlstack_shared` targets. The test
  1. runs `cmake --install BUILD --prefix TMP/prefix` and checks the installed files: exactly
     the binary, the library with its two symlinks, the header, the .pc file, the CMake package
     and the docs; the exported targets name no internal library and no build or source path;
  2. checks the library exports exactly the functions the header declares, each versioned
     VLSTACK_1 (plus the version node itself), its soname libvlstack.so.ABI, and no RPATH;
  3. builds tests/install/consumer.c with `cc $(pkg-config --cflags --libs vlstack)` and runs it
     on a tiny model written by the installed `vlstack make-test-model`;
  4. checks it picks the greedy tokens the installed `vlstack forward --generate 2` picks;
  5. builds the same program through find_package(vlstack) (tests/install/cmake_consumer), runs
     it (same tokens); asks find_package for an incompatible major version, which must fail;
  6. runs `cpack -G DEB`, checks the control fields (Depends covers every library the packaged
     binaries need, each package found with dpkg -S), the shlibs and ldconfig scripts, the
     stripped files, runs the unpacked usr/bin/vlstack --help without LD_LIBRARY_PATH, and builds
     and runs the consumer against the unpacked usr/ through its relocatable .pc file.
Exit status 0 on success, 1 with the reason on failure, 77 (skipped) in a sanitizer build.
"""

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def run(cmd, env=None, cwd=None, timeout=300, expect_ok=True):
    """Runs cmd; returns (returncode, stdout + stderr). Raises Failure when it fails and
    expect_ok is set."""
    shown = " ".join(cmd)
    print(f"[install_test] $ {shown}", flush=True)
    proc = subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    if expect_ok and proc.returncode != 0:
        raise Failure(f"`{shown}` exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc.returncode, proc.stdout


def read_cache(build):
    """KEY -> VALUE of BUILD/CMakeCache.txt."""
    cache = {}
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                cache[m.group(1)] = m.group(2)
    return cache


def project_version(source):
    with open(os.path.join(source, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(vlstack VERSION ([0-9]+)\.([0-9]+)\.([0-9]+)", f.read())
    check(m is not None, "no project(vlstack VERSION x.y.z) in the top CMakeLists.txt")
    return tuple(int(g) for g in m.groups())


def header_abi_and_functions(header_path):
    """(VLS_ABI_VERSION, the vls_* functions the header declares)."""
    with open(header_path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^#define VLS_ABI_VERSION ([0-9]+)u$", text, re.M)
    check(m is not None, f"{header_path}: no VLS_ABI_VERSION")
    code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return int(m.group(1)), set(re.findall(r"\b(vls_[a-z0-9_]+)\s*\(", code))


def elf_dynamic(path):
    """(soname or None, [NEEDED], [RPATH/RUNPATH entries]) from readelf -d."""
    _, out = run(["readelf", "-d", path])
    soname = re.findall(r"\(SONAME\)\s+Library soname: \[(.*)\]", out)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out)
    rpath = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out)
    return (soname[0] if soname else None), needed, rpath


def check_exports(lib, functions):
    """The library's dynamic symbol table holds exactly `functions`, each vls_*@@VLSTACK_1,
    plus the VLSTACK_1 version node."""
    _, out = run(["nm", "-D", "--defined-only", lib])
    exported = set()
    for line in out.splitlines():
        fields = line.split()
        check(len(fields) >= 2, f"{lib}: unexpected nm line '{line}'")
        kind, name = fields[-2], fields[-1]
        if name == "VLSTACK_1":
            check(kind == "A", f"{lib}: the version node is '{line}'")
            continue
        symbol, _, version = name.partition("@@")
        check(symbol.startswith("vls_"), f"{lib} exports a non-vls_ symbol: '{line}'")
        check(version == "VLSTACK_1", f"{lib}: {symbol} is not versioned VLSTACK_1: '{line}'")
        check(kind == "T", f"{lib}: {symbol} is not a function: '{line}'")
        exported.add(symbol)
    check(exported == functions,
          f"{lib}: exports and header differ: exported only {sorted(exported - functions)}, "
          f"declared only {sorted(functions - exported)}")
    print(f"[install_test] {len(exported)} vls_* functions exported, nothing else", flush=True)


def list_tree(root):
    """Every file and symlink under root, relative, with '/' separators."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found


def check_installed_tree(root, dirs, version, abi, source, build):
    """Exactly the files install.cmake installs, the library's symlink chain, the header
    unchanged and a relocatable CMake package. Returns the library's real file name."""
    lib, bindir, incdir, docdir = dirs["lib"], dirs["bin"], dirs["include"], dirs["doc"]
    real = f"libvlstack.so.{abi}.{version[1]}.{version[2]}"
    expected = {
        f"{bindir}/vlstack", f"{lib}/libvlstack.so", f"{lib}/libvlstack.so.{abi}",
        f"{lib}/{real}", f"{incdir}/vlstack/vlstack.h", f"{lib}/pkgconfig/vlstack.pc",
        f"{lib}/cmake/vlstack/vlstackConfig.cmake",
        f"{lib}/cmake/vlstack/vlstackConfigVersion.cmake",
        f"{lib}/cmake/vlstack/vlstackTargets.cmake", f"{docdir}/README.md",
    }
    expected |= {f"{docdir}/{p}" for p in list_tree(os.path.join(source, "docs"))}
    expected |= {f"{dirs['python']}/vlstack/{p}" for p in os.listdir(os.path.join(source, "python/vlstack"))
                 if p.endswith(".py")}
    found = list_tree(root)
    per_config_name = re.escape(f"{lib}/cmake/vlstack/vlstackTargets-") + r"[a-z]+\.cmake"
    per_config = {p for p in found if re.fullmatch(per_config_name, p)}
    check(len(per_config) == 1,
          f"{root}: expected one vlstackTargets-<config>.cmake, got {per_config}")
    missing, extra = expected - found, found - expected - per_config
    check(not missing, f"{root}: not installed: {sorted(missing)}")
    check(not extra, f"{root}: installed but not expected: {sorted(extra)}")

    check(os.readlink(os.path.join(root, lib, "libvlstack.so")) == f"libvlstack.so.{abi}",
          "libvlstack.so does not link to the soname")
    check(os.readlink(os.path.join(root, lib, f"libvlstack.so.{abi}")) == real,
          f"libvlstack.so.{abi} does not link to {real}")
    check(not os.path.islink(os.path.join(root, lib, real)), f"{real} is a symlink")
    with open(os.path.join(source, "include/vlstack/vlstack.h"), "rb") as a, \
         open(os.path.join(root, incdir, "vlstack/vlstack.h"), "rb") as b:
        check(a.read() == b.read(),
              "the installed vlstack.h differs from include/vlstack/vlstack.h")

    package_text = ""
    for name in sorted(os.listdir(os.path.join(root, lib, "cmake/vlstack"))):
        with open(os.path.join(root, lib, "cmake/vlstack", name), encoding="utf-8") as f:
            package_text += f.read()
    check("add_library(vlstack::vlstack SHARED IMPORTED)" in package_text,
          "the CMake package defines no imported target vlstack::vlstack")
    for word in ("vls_", "vlstack_shared", "LINK_ONLY", "INTERFACE_LINK_LIBRARIES",
                 "IMPORTED_LINK_DEPENDENT_LIBRARIES", source, build, root):
        check(word not in package_text, f"the installed CMake package mentions '{word}'")
    check("${_IMPORT_PREFIX}/include" in package_text,
          "the exported include directory is not relative to the install prefix")
    return real


def check_elf_files(root, dirs, real, abi):
    lib = os.path.join(root, dirs["lib"], real)
    exe = os.path.join(root, dirs["bin"], "vlstack")
    soname, lib_needed, lib_rpath = elf_dynamic(lib)
    check(soname == f"libvlstack.so.{abi}", f"{lib}: soname {soname}, expected libvlstack.so.{abi}")
    check(not lib_rpath, f"{lib} keeps an RPATH/RUNPATH: {lib_rpath}")
    _, exe_needed, exe_rpath = elf_dynamic(exe)
    check(not exe_rpath, f"{exe} keeps an RPATH/RUNPATH: {exe_rpath}")
    check(not any(n.startswith("libvlstack") for n in exe_needed),
          f"{exe} needs libvlstack; it should link the internals statically: {exe_needed}")
    return lib, exe


def parse_consumer(out):
    values = {}
    for line in out.splitlines():
        key, _, rest = line.partition(" ")
        values[key] = rest
    return values


def run_consumer(binary, model_dir, env, abi, config):
    _, out = run([binary, model_dir], env=env)
    print(out, end="", flush=True)
    values = parse_consumer(out)
    for key in ("abi", "model", "prefill_argmax", "decode_argmax", "length", "bad_path"):
        check(key in values, f"{binary}: no '{key}' line in its output:\n{out}")
    check(values["abi"] == str(abi), f"{binary}: abi {values['abi']}, expected {abi}")
    text = config["text_config"]
    want = f"{text['hidden_size']} {text['vocab_size']} {text['num_hidden_layers']}"
    check(values["model"] == want,
          f"{binary}: model '{values['model']}', config.json says '{want}'")
    status, _, message = values["bad_path"].partition(" ")
    check(status == "NOT_FOUND" or status == "IO",
          f"{binary}: loading a missing folder gave {status}")
    check("no-such-model" in message, f"{binary}: the error does not name the path: '{message}'")
    tokens = (int(values["prefill_argmax"]), int(values["decode_argmax"]))
    check(all(0 <= t < text["vocab_size"] for t in tokens), f"{binary}: tokens {tokens}")
    check(values["length"] == "6", f"{binary}: length {values['length']}")
    return tokens


def write_safetensors(path, name, values):
    """One I32 [len(values)] tensor in the safetensors layout."""
    header = json.dumps({name: {"dtype": "I32", "shape": [len(values)],
                                "data_offsets": [0, 4 * len(values)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack(f"<{len(values)}i", *values))


def read_safetensors_i32(path, name):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    entry = json.loads(data[8:8 + n])[name]
    check(entry["dtype"] == "I32", f"{path}: {name} is {entry['dtype']}")
    begin, end = entry["data_offsets"]
    return list(struct.unpack_from(f"<{(end - begin) // 4}i", data, 8 + n + begin))


def cli_greedy_tokens(exe, model_dir, tmp, eos_ids):
    """The greedy tokens `vlstack forward --generate 2` picks after the consumer's prompt."""
    request = os.path.join(tmp, "request.safetensors")
    output = os.path.join(tmp, "forward.safetensors")
    write_safetensors(request, "input_ids", [1, 2, 3, 4, 5])
    run([exe, "forward", "--model", model_dir, "--input", request, "--output", output,
         "--generate", "2", "--threads", "1"])
    tokens = read_safetensors_i32(output, "generated_tokens")
    check(len(tokens) == 2 or (len(tokens) == 1 and tokens[0] in eos_ids),
          f"vlstack forward --generate 2 gave {tokens}")
    return tokens


def pkg_config_flags(pc_dir, expect_root, version, abi):
    env = dict(os.environ, PKG_CONFIG_PATH=pc_dir)
    env.pop("PKG_CONFIG_LIBDIR", None)
    _, modversion = run(["pkg-config", "--modversion", "vlstack"], env=env)
    check(modversion.strip() == version, f"pkg-config --modversion: {modversion.strip()}")
    _, abi_text = run(["pkg-config", "--variable=abi_version", "vlstack"], env=env)
    check(abi_text.strip() == str(abi), f"pkg-config abi_version: {abi_text.strip()}")
    _, flags = run(["pkg-config", "--cflags", "--libs", "vlstack"], env=env)
    flags = flags.split()
    incs = [os.path.realpath(f[2:]) for f in flags if f.startswith("-I")]
    libs = [os.path.realpath(f[2:]) for f in flags if f.startswith("-L")]
    check(incs == [os.path.realpath(os.path.join(expect_root, "include"))],
          f"pkg-config --cflags points at {incs}, not {expect_root}/include")
    check(len(libs) == 1 and os.path.isfile(os.path.join(libs[0], "libvlstack.so")) and
          os.path.realpath(libs[0]).startswith(os.path.realpath(expect_root) + "/"),
          f"pkg-config -L points at {libs}, not into {expect_root}")
    check("-lvlstack" in flags, f"pkg-config --libs lacks -lvlstack: {flags}")
    return flags, libs[0]


def build_with_pkg_config(tmp, name, pc_dir, expect_root, version, abi, source):
    flags, libdir = pkg_config_flags(pc_dir, expect_root, version, abi)
    binary = os.path.join(tmp, name)
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
         os.path.join(source, "tests/install/consumer.c"), "-o", binary] + flags)
    return binary, libdir


def resolved_libraries(binary, env):
    """soname -> resolved path from ldd; fails on any library not found."""
    _, out = run(["ldd", binary], env=env)
    check("not found" not in out, f"ldd {binary}: a library is not found:\n{out}")
    return dict(re.findall(r"^\s*(\S+) => (\S+)", out, re.M))


def check_uses_library(binary, env, libdir):
    libs = resolved_libraries(binary, env)
    want = os.path.realpath(libdir)
    got = [p for n, p in libs.items() if n.startswith("libvlstack.so")]
    check(len(got) == 1 and os.path.dirname(os.path.realpath(got[0])) == want,
          f"{binary} loads libvlstack from {got}, not {want}")


def owning_package(path):
    """The Debian package that ships `path` (tried with and without the /usr merge)."""
    candidates = [path]
    if path.startswith("/usr/"):
        candidates.append(path[len("/usr"):])
    else:
        candidates.append("/usr" + path)
    for candidate in candidates:
        rc, out = run(["dpkg", "-S", candidate], expect_ok=False)
        if rc == 0:
            return out.split(":")[0].strip()
    raise Failure(f"dpkg -S: no package ships {path}")


def check_deb(deb, tmp, version, abi, real, source, model_dir, expected_tokens, config):
    _, fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Maintainer",
                     "Section", "Description", "Depends"])
    print(fields, flush=True)
    control = dict(re.findall(r"^([A-Za-z-]+): (.*)$", fields, re.M))
    _, recommends = run(["dpkg-deb", "-f", deb, "Recommends"])
    check("python3-numpy" in recommends, f"{deb}: Recommends '{recommends.strip()}' lacks NumPy")
    check(control.get("Package") == "vlstack", f"{deb}: Package {control.get('Package')}")
    check(control.get("Version") == version, f"{deb}: Version {control.get('Version')}")
    check(control.get("Section") == "science", f"{deb}: Section {control.get('Section')}")
    check(control.get("Maintainer"), f"{deb}: no Maintainer")
    depends = {}
    for item in control.get("Depends", "").split(","):
        m = re.match(r"^\s*([a-z0-9.+-]+)\s*(\(.*\))?", item.split("|")[0])
        if m:
            depends[m.group(1)] = m.group(2) or ""
    check("libc6" in depends and depends["libc6"].startswith("(>="),
          f"{deb}: Depends lacks a versioned libc6: {control.get('Depends')}")

    root = os.path.join(tmp, "deb_root")
    run(["dpkg-deb", "-x", deb, root])
    usr = os.path.join(root, "usr")
    exe = os.path.join(usr, "bin/vlstack")
    lib = os.path.join(usr, "lib", real)
    for path in (exe, lib):
        _, sections = run(["readelf", "-S", "-W", path])
        check(".debug_info" not in sections and ".symtab" not in sections,
              f"{path} is not stripped")
    _, contents = run(["dpkg-deb", "-c", deb])
    check(not re.search(r"\.a$", contents, re.M), f"{deb} ships a static archive")

    # Depends covers the package of every library the packaged binaries need (their NEEDED
    # entries, found where the dynamic loader finds them).
    for path in (exe, lib):
        _, needed, _ = elf_dynamic(path)
        resolved = resolved_libraries(path, os.environ)
        for soname in needed:
            check(soname in resolved or soname.startswith("ld-linux"),
                  f"ldd {path} does not resolve {soname}")
            if soname not in resolved:
                continue
            package = owning_package(resolved[soname])
            check(package in depends,
                  f"{deb}: Depends lacks {package} (for {soname}, needed by {path})")
    print(f"[install_test] Depends covers {sorted(depends)}", flush=True)

    _, shlibs = run(["dpkg-deb", "-I", deb, "shlibs"])
    check(f"libvlstack {abi} vlstack (>= {version})" in shlibs, f"{deb}: shlibs is '{shlibs}'")
    for script in ("postinst", "postrm"):
        _, text = run(["dpkg-deb", "-I", deb, script])
        check("ldconfig" in text, f"{deb}: {script} does not run ldconfig")

    # The unpacked binary runs on its own: no libvlstack, no LD_LIBRARY_PATH.
    bare = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    resolved_libraries(exe, bare)
    _, help_text = run([exe, "--help"], env=bare)
    check(help_text.startswith("usage: vlstack"), f"{exe} --help printed:\n{help_text}")

    # The consumer against the unpacked usr/, found through the relocated .pc file.
    binary, libdir = build_with_pkg_config(tmp, "consumer_deb", os.path.join(usr, "lib/pkgconfig"),
                                           usr, version, abi, source)
    env = dict(os.environ, LD_LIBRARY_PATH=libdir)
    check_uses_library(binary, env, libdir)
    tokens = run_consumer(binary, model_dir, env, abi, config)
    check(tokens == expected_tokens, f"the packaged library gives {tokens}, not {expected_tokens}")
    check_python(usr, {"python": "lib/python3/dist-packages"}, libdir, model_dir, expected_tokens)


def check_python(root, dirs, lib_dir, model_dir, expected_tokens):
    """The installed Python package imports from <root>/<python dir> with nothing else set, finds
    the library installed beside it, and greedy-decodes the consumer's tokens."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "VLSTACK_LIBRARY")}
    env["PYTHONPATH"] = os.path.join(root, dirs["python"])
    script = (
        "import sys, numpy as np, vlstack\n"
        "with vlstack.Model(sys.argv[1], capacity=64, threads=1) as m:\n"
        "    s = m.session()\n"
        "    s.prefill_tokens(np.array([1, 2, 3, 4, 5], dtype=np.int32))\n"
        "    a = int(np.argmax(s.logits))\n"
        "    s.decode(a)\n"
        "    b = int(np.argmax(s.logits))\n"
        "    print('PYRESULT', vlstack.library_path(), vlstack.__file__, a, b)\n")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    _, out = run(["/usr/bin/python3", "-c", script, model_dir], env=env, cwd=root)
    lines = [l for l in out.splitlines() if l.startswith("PYRESULT ")]
    check(len(lines) == 1, f"the Python check printed no result:\n{out}")
    _, lib_path, package, a, b = lines[0].split()
    check(os.path.realpath(os.path.dirname(lib_path)) == os.path.realpath(lib_dir),
          f"the installed Python package loaded {lib_path}, not the library in {lib_dir}")
    check(os.path.realpath(package).startswith(os.path.realpath(root)),
          f"imported vlstack from {package}, not from {root}")
    check((int(a), int(b)) == tuple(expected_tokens),
          f"the Python package's greedy tokens {(a, b)} differ from the consumer's {expected_tokens}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    build, source = os.path.abspath(args.build), os.path.abspath(args.source)
    cache = read_cache(build)
    # A sanitizer build's library needs its runtime loaded first; it is not one to ship.
    for option in ("VLS_SANITIZE", "VLS_TSAN", "VLS_LIBFUZZER"):
        if cache.get(option, "OFF").upper() in ("ON", "1", "TRUE", "YES"):
            print(f"[install_test] skipped: {option} is on in {build}")
            return 77
    # GNUInstallDirs' cache entries; an empty one means its default (DOCDIR's is computed).
    datarootdir = cache.get("CMAKE_INSTALL_DATAROOTDIR") or "share"
    dirs = {"bin": cache.get("CMAKE_INSTALL_BINDIR") or "bin",
            "lib": cache.get("CMAKE_INSTALL_LIBDIR") or "lib",
            "include": cache.get("CMAKE_INSTALL_INCLUDEDIR") or "include",
            "doc": cache.get("CMAKE_INSTALL_DOCDIR") or f"{datarootdir}/doc/vlstack",
            "python": cache.get("VLS_INSTALL_PYTHONDIR") or "lib/python3/dist-packages"}
    for key, value in dirs.items():
        check(not os.path.isabs(value), f"CMAKE_INSTALL_{key.upper()}DIR {value} is absolute")
    version_tuple = project_version(source)
    version = ".".join(str(v) for v in version_tuple)
    abi, functions = header_abi_and_functions(os.path.join(source, "include/vlstack/vlstack.h"))
    check(len(functions) > 10, f"found only {len(functions)} functions in vlstack.h")

    tmp = tempfile.mkdtemp(prefix="vls_install_test_")
    start = time.monotonic()
    try:
        # 1-2. cmake --install and the installed files.
        prefix = os.path.join(tmp, "prefix")
        run(["cmake", "--install", build, "--prefix", prefix])
        real = check_installed_tree(prefix, dirs, version_tuple, abi, source, build)
        lib, exe = check_elf_files(prefix, dirs, real, abi)
        check_exports(lib, functions)

        model_dir = os.path.join(tmp, "model")
        t0 = time.monotonic()
        run([exe, "make-test-model", "--out", model_dir, "--no-vision"])
        print(f"[install_test] make-test-model: {time.monotonic() - t0:.2f} s", flush=True)
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        eos = config["text_config"]["eos_token_id"]
        eos_ids = eos if isinstance(eos, list) else [eos]

        # 3. pkg-config.
        binary, libdir = build_with_pkg_config(
            tmp, "consumer_pc", os.path.join(prefix, dirs["lib"], "pkgconfig"), prefix, version,
            abi, source)
        env = dict(os.environ, LD_LIBRARY_PATH=libdir)
        check_uses_library(binary, env, libdir)
        tokens = run_consumer(binary, model_dir, env, abi, config)

        check_python(prefix, dirs, libdir, model_dir, tokens)

        # 4. The CLI agrees (its own copy of the runtime, greedy over the same prompt).
        cli = cli_greedy_tokens(exe, model_dir, tmp, eos_ids)
        check(list(tokens[:len(cli)]) == cli,
              f"the consumer's greedy tokens {tokens} differ from vlstack forward's {cli}")

        # 5. find_package.
        consumer_build = os.path.join(tmp, "cmake_consumer")
        project = os.path.join(source, "tests/install/cmake_consumer")
        run(["cmake", "-S", project, "-B", consumer_build, f"-DCMAKE_PREFIX_PATH={prefix}",
             "-DCMAKE_BUILD_TYPE=Release"])
        found = read_cache(consumer_build).get("vlstack_DIR", "")
        cmake_package = os.path.join(prefix, dirs["lib"], "cmake/vlstack")
        check(os.path.realpath(found) == os.path.realpath(cmake_package),
              f"find_package found vlstack in {found}, not in {prefix}")
        run(["cmake", "--build", consumer_build])
        binary = os.path.join(consumer_build, "consumer")
        bare = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        check_uses_library(binary, bare, libdir)  # CMake's build RPATH names the prefix
        check(run_consumer(binary, model_dir, bare, abi, config) == tokens,
              "the find_package build gives other tokens than the pkg-config build")
        incompatible = f"{version_tuple[0] + 1}.0"
        rc, out = run(["cmake", "-S", project, "-B", os.path.join(tmp, "cmake_consumer_bad"),
                       f"-DCMAKE_PREFIX_PATH={prefix}", f"-DVLS_CONSUMER_REQUIRE={incompatible}"],
                      expect_ok=False)
        check(rc != 0 and f"version: {version}" in out,
              f"find_package(vlstack {incompatible}) did not fail on version {version}:\n{out}")

        # 6. cpack -G DEB. cpack first builds the `preinstall` target, which with Makefiles is
        # `all`; the test packages what is built, so it names a generator without one.
        package_dir = os.path.join(tmp, "package")
        run(["cpack", "-G", "DEB", "--config", os.path.join(build, "CPackConfig.cmake"),
             "-B", package_dir, "-D", "CPACK_CMAKE_GENERATOR=Ninja"], timeout=600)
        debs = [p for p in os.listdir(package_dir) if p.endswith(".deb")]
        check(len(debs) == 1, f"cpack wrote {debs}")
        deb = os.path.join(package_dir, debs[0])
        size = os.path.getsize(deb)
        print(f"[install_test] {debs[0]}: {size / 1e6:.1f} MB", flush=True)
        check_deb(deb, tmp, version, abi, real, source, model_dir, tokens, config)
    except Failure as e:
        print(f"[install_test] FAILED: {e}", file=sys.stderr, flush=True)
        print(f"[install_test] files kept in {tmp}", file=sys.stderr)
        return 1
    print(f"[install_test] OK in {time.monotonic() - start:.1f} s", flush=True)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"[install_test] files kept in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
