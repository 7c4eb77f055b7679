#!/usr/bin/env python3
"""`vlstack batch` on a tiny generated model: the load options and --prefill-chunk are accepted,
stop strings cut the text exactly where they begin (across token boundaries), cached_tokens
reports prefix reuse, and the greedy tokens are the same with and without reuse and with any
prefill chunk size."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def run(cmd, ok=True, stdin=None):
    p = subprocess.run(cmd, capture_output=True, text=True, input=stdin)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    return p


def write_input(path, ids):
    """A safetensors file with one tensor, input_ids: i32 [S]."""
    header = json.dumps({"input_ids": {"dtype": "I32", "shape": [len(ids)],
                                       "data_offsets": [0, 4 * len(ids)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack(f"<{len(ids)}i", *ids))


def bytes_to_unicode():
    """GPT-2's byte-level alphabet."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_tokenizer(model, vocab):
    """A Qwen-style byte-level tokenizer.json whose ids below `vocab` all decode to printable
    text: ids 0..93 the printable ASCII bytes, the rest two-letter words with a leading space."""
    b2u = bytes_to_unicode()
    table = {}
    for i, b in enumerate(range(ord("!"), ord("~") + 1)):
        table[b2u[b]] = i
    nxt = len(table)
    for b in range(256):
        if b2u[b] not in table:
            table[b2u[b]] = 1000 + b  # the other bytes, above the model's vocab
    letters = "abcdefghijklmnopqrstuvwxyz"
    k = 0
    while nxt < vocab:
        word = b2u[ord(" ")] + letters[k // 26 % 26] + letters[k % 26]
        if word not in table:
            table[word] = nxt
            nxt += 1
        k += 1
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel"},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": table,
                  "merges": []},
    }
    with open(f"{model}/tokenizer.json", "w") as f:
        json.dump(doc, f)


class Batch:
    def __init__(self, vlstack, model, work):
        self.vlstack, self.model, self.work, self.n = vlstack, model, work, 0

    def run(self, requests, flags=(), ok=True, model=None):
        """Writes the requests (dicts with "prompt" ids) and runs batch; returns the lines."""
        self.n += 1
        d = f"{self.work}/run{self.n}"
        os.makedirs(d)
        with open(f"{d}/reqs.jsonl", "w") as f:
            for i, r in enumerate(requests):
                r = dict(r)
                if "prompt" in r:
                    write_input(f"{d}/in{i}.safetensors", r.pop("prompt"))
                    r["input"] = f"in{i}.safetensors"
                f.write(json.dumps(r) + "\n")
        p = run([self.vlstack, "batch", "--model", model or self.model, "--requests",
                 f"{d}/reqs.jsonl"] + list(flags), ok=ok)
        if not ok:
            return p
        out = [json.loads(l) for l in p.stdout.splitlines()]
        assert len(out) == len(requests), p.stdout
        for r, o in zip(requests, out):
            assert o["id"] == r.get("id"), (r, o)
            assert "cached_tokens" in o, o
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vlstack", required=True)
    a = ap.parse_args()
    vocab = 300
    with tempfile.TemporaryDirectory() as work:
        model = f"{work}/tiny"
        run([a.vlstack, "make-test-model", "--out", model, "--hidden", "64", "--layers", "2",
             "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128",
             "--vocab", str(vocab), "--deepstack", "1", "--untied"])  # untied: varied output
        # Stop strings need the folder's tokenizer: ours decodes every id < vocab to printable
        # text (make-test-model's real Qwen3 tokenizer would give mostly bytes for such ids).
        write_tokenizer(model, vocab)
        cfg = json.load(open(f"{model}/config.json"))
        text_cfg = cfg.get("text_config", cfg)
        special = {v for k, v in {**cfg, **text_cfg}.items()
                   if k.endswith("token_id") and isinstance(v, int)}
        gen_cfg = f"{model}/generation_config.json"
        if os.path.exists(gen_cfg):
            eos = json.load(open(gen_cfg)).get("eos_token_id", [])
            special |= set(eos if isinstance(eos, list) else [eos])
        pool = [t for t in range(vocab) if t not in special]
        ids = lambda seed, n: [pool[(seed * 7919 + i * 104729) % len(pool)] for i in range(n)]
        b = Batch(a.vlstack, model, work)

        # --help documents the flags and fields.
        h = run([a.vlstack, "batch", "--help"]).stdout
        for word in ("--precision", "--kv-cache", "--threads", "--artifact", "--prefill-chunk",
                     "--no-prefix-reuse", "stop", "cached_tokens", "text"):
            assert word in h, (word, h)

        # Load options are accepted and used; bad values are refused naming the flag.
        one = [{"id": 1, "prompt": ids(1, 9), "max_new_tokens": 5, "ignore_eos": True}]
        f32 = b.run(one)[0]
        assert f32["finish_reason"] == "length" and len(f32["tokens"]) == 5, f32
        for flags in (["--precision", "bf16", "--kv-cache", "bf16", "--threads", "1"],
                      ["--precision", "int8", "--threads", "2", "--prefill-chunk", "4"],
                      ["--precision", "f32", "--kv-cache", "bf16", "--no-prefix-reuse"]):
            o = b.run(one, flags)[0]
            assert o["finish_reason"] == "length" and len(o["tokens"]) == 5, (flags, o)
        art = f"{work}/tiny.bf16.vlsa"
        run([a.vlstack, "compile", "--model", model, "--out", art, "--precision", "bf16",
             "--capacity", "64", "--slots", "4"])
        o = b.run(one, ["--artifact", art, "--precision", "bf16", "--capacity", "64"])[0]
        assert o["finish_reason"] == "length" and len(o["tokens"]) == 5, o
        p = b.run(one, ["--artifact", art, "--precision", "int8", "--capacity", "64"], ok=False)
        assert p.returncode != 0, p.stdout
        for flags, needle in ((["--precision", "f16"], "--precision"),
                              (["--kv-cache", "x"], "--kv-cache"),
                              (["--threads", "-1"], "--threads"),
                              (["--prefill-chunk", "-1"], "--prefill-chunk"),
                              (["--prefill-chunk", "x"], "--prefill-chunk")):
            p = b.run(one, flags, ok=False)
            assert p.returncode == 2 and needle in p.stderr, (flags, p.returncode, p.stderr)

        # Stop strings: the full text of a first run, then a stop string across a token
        # boundary in its middle: the text is cut exactly before it.
        base = {"id": "s", "prompt": ids(2, 7), "max_new_tokens": 24, "ignore_eos": True}
        full = b.run([dict(base, stop=["\x01never\x01"])])[0]
        assert full["finish_reason"] == "length" and len(full["tokens"]) == 24, full
        text, toks = full["text"], full["tokens"]
        dec = run([a.vlstack, "detokenize", "--tokenizer", model],
                  stdin="".join(json.dumps(toks[:j]) + "\n" for j in range(len(toks) + 1)))
        prefixes = [json.loads(l) for l in dec.stdout.splitlines()]
        assert prefixes[-1] == text, (prefixes[-1], text)
        stop, cut, after = None, None, None
        for j in range(len(toks) // 2, len(toks) - 2):
            at = len(prefixes[j])
            s = text[max(0, at - 2):at + 2]
            if len(s) == 4 and text.find(s) == at - 2:
                stop, cut, after = s, at - 2, j + 1
                break
        assert stop is not None, text
        o = b.run([dict(base, stop=[stop])])[0]
        assert o["finish_reason"] == "stop" and o["text"] == text[:cut], (stop, text, o)
        # The request stopped at the token that completed the stop string.
        assert o["tokens"] == toks[:len(o["tokens"])], (o, toks)
        assert stop in prefixes[len(o["tokens"])] and stop not in prefixes[len(o["tokens"]) - 1]
        assert len(o["tokens"]) >= after, (o, after)
        # The earliest of several stop strings wins; a stop string never seen leaves the text.
        later = text[-3:]
        if text.find(later) > cut:
            o = b.run([dict(base, stop=[later, stop, "\x02nope"])])[0]
            assert o["finish_reason"] == "stop" and o["text"] == text[:cut], o
        o = b.run([dict(base, stop=[])])[0]
        assert o["finish_reason"] == "length" and o["text"] == text, o
        # A bad stop field is that request's error; others complete.
        out = b.run([dict(base, id="bad", stop=5), dict(base, id="ok", stop=[stop]),
                     dict(base, id="empty", stop=[""])])
        assert out[0]["finish_reason"] == "error" and "stop" in out[0]["error"], out[0]
        assert out[1]["finish_reason"] == "stop" and out[1]["text"] == text[:cut], out[1]
        assert out[2]["finish_reason"] == "error" and "stop" in out[2]["error"], out[2]
        # Without a tokenizer, stop requests fail alone.
        bare = f"{work}/bare"
        shutil.copytree(model, bare)
        os.remove(f"{bare}/tokenizer.json")
        out = b.run([dict(base, id="stop"), dict(base, id="plain")], model=bare)
        assert out[0]["finish_reason"] == "length" and "text" not in out[0], out[0]
        out = b.run([dict(base, id="stop", stop=["x"]), dict(base, id="plain")], model=bare)
        assert out[0]["finish_reason"] == "error" and "tokenizer" in out[0]["error"], out[0]
        assert out[1]["finish_reason"] == "length" and out[1]["tokens"] == toks, out[1]

        # Speculative decoding per line (prompt lookup; the model itself as --draft-model) keeps
        # the greedy tokens; a draft line without a draft model, or a bad field, fails alone.
        spec = lambda method, k=4: dict(base, stop=None, speculative={"method": method, "draft_tokens": k})
        out = b.run([dict(spec("ngram"), id="ngram"), dict(spec("draft"), id="draft"),
                     dict(base, id="plain"), dict(base, id="bad", speculative={"method": "x"})],
                    ["--draft-model", model, "--speculate", "off"])
        for o in out[:3]:
            assert o["finish_reason"] == "length" and o["tokens"] == toks, o
        assert out[3]["finish_reason"] == "error" and "speculative" in out[3]["error"], out[3]
        out = b.run([dict(spec("draft"), id="nomodel"), dict(base, id="plain")])
        assert out[0]["finish_reason"] == "error" and "no draft model" in out[0]["error"], out[0]
        assert out[1]["tokens"] == toks, out[1]

        # Prefix reuse: on one slot the second request runs after the first finished and reuses
        # the prompt they share; not with --no-prefix-reuse.
        shared = ids(3, 20)
        pair = [{"id": "first", "prompt": shared, "max_new_tokens": 4, "ignore_eos": True},
                {"id": "second", "prompt": shared + ids(4, 6), "max_new_tokens": 4,
                 "ignore_eos": True}]
        reuse = b.run(pair, ["--slots", "1"])
        assert reuse[0]["cached_tokens"] == 0, reuse
        assert 0 < reuse[1]["cached_tokens"] < 26, reuse
        assert reuse[1]["cached_tokens"] >= 20, reuse
        plain = b.run(pair, ["--slots", "1", "--no-prefix-reuse"])
        assert all(o["cached_tokens"] == 0 for o in plain), plain
        assert [o["tokens"] for o in plain] == [o["tokens"] for o in reuse], (plain, reuse)

        # The same greedy tokens with and without reuse and with any chunk size.
        reqs = []
        for i in range(6):
            prompt = (shared if i % 2 else ids(10 + i, 5)) + ids(20 + i, 3 + 4 * i)
            reqs.append({"id": i, "prompt": prompt, "max_new_tokens": 6 + i, "ignore_eos": True})
        reqs.append(dict(reqs[1], id="repeat"))  # a prompt a slot held before
        ref = b.run(reqs, ["--slots", "2", "--prefill-chunk", "0", "--no-prefix-reuse"])
        assert all(o["finish_reason"] == "length" for o in ref), ref
        assert all(len(set(o["tokens"])) > 2 for o in ref), ref  # streams that can differ
        for flags in (["--prefill-chunk", "0"], ["--prefill-chunk", "1"],
                      ["--prefill-chunk", "2"], ["--prefill-chunk", "3"],
                      ["--prefill-chunk", "64"], [],
                      ["--prefill-chunk", "3", "--no-prefix-reuse"]):
            for slots in ("1", "2"):
                out = b.run(reqs, ["--slots", slots] + flags)
                assert [o["tokens"] for o in out] == [o["tokens"] for o in ref], \
                    (slots, flags, out, ref)
                reused = sum(o["cached_tokens"] for o in out)
                assert (reused == 0) == ("--no-prefix-reuse" in flags), (slots, flags, out)
                if slots == "1" and "--no-prefix-reuse" not in flags:
                    assert out[-1]["cached_tokens"] >= 20, out  # req 5 left `shared` there
    print("batch_test: ok")


if __name__ == "__main__":
    main()
