"""Chat.tokenize / detokenize / render (vls_chat_tokenize, _detokenize, _render): the ids of
Hugging Face tokenizers (the npm reference, and single tokens of tokenizer.json's vocabulary),
the same as `vlstack tokenize` and `vlstack chat-template`, round trips, refusals."""
import json
import os
import shutil
import subprocess
import unittest

import numpy as np

import vlstack

import vls_test_util as util

TEXTS = [
    "Hello world",
    "Hello, world! I'm here; you're there.",
    "  leading and trailing  ",
    "12345 67 8.9 1,000,000 3.14159",
    "中文测试：你好，世界！",
    "Русский текст, с пунктуацией — и тире.",
    "Emoji 😀 👍🏽 🇯🇵",
    "tab\there\nnew line\r\n\n",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more",
]


class TokenizeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = util.chat_model()
        cls.model = vlstack.Model(cls.dir, capacity=64, threads=util.THREADS)
        cls.chat = vlstack.Chat(cls.model)
        with open(os.path.join(cls.dir, "tokenizer.json"), encoding="utf-8") as f:
            cls.doc = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_single_tokens_of_the_vocabulary(self):
        vocab = self.doc["model"]["vocab"]
        for word in ("Hello", "world", "the", "import", "1"):
            with self.subTest(word):
                ids = self.chat.tokenize(word)
                self.assertEqual(ids.dtype, np.int32)
                self.assertEqual(ids.tolist(), [vocab[word]])
        self.assertEqual(self.chat.tokenize(" world").tolist(), [vocab["\u0120world"]])
        added = self.doc["added_tokens"]
        self.assertGreater(len(added), 5)
        for t in added:
            with self.subTest(t["content"]):
                self.assertEqual(self.chat.tokenize(t["content"]).tolist(), [t["id"]])

    def test_the_npm_reference(self):
        node = shutil.which("node")
        if node is None or not os.path.isdir(os.path.join(os.path.dirname(util.REF_TOKENIZERS),
                                                          "node_modules", "tokenizers")):
            self.skipTest("node or the npm tokenizers package (tests/tokenizer/setup.sh) missing")
        lines = "".join(json.dumps(t) + "\n" for t in TEXTS)
        p = subprocess.run([node, util.REF_TOKENIZERS, "encode", util.TOKENIZER_JSON],
                           input=lines, capture_output=True, text=True, timeout=120, check=True)
        want = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual(len(want), len(TEXTS))
        for text, ids in zip(TEXTS, want):
            with self.subTest(text):
                self.assertEqual(self.chat.tokenize(text).tolist(), ids)

    def test_the_cli(self):
        lines = "".join(json.dumps(t) + "\n" for t in TEXTS)
        out = util.run([util.VLSTACK, "tokenize", "--tokenizer", self.dir], input=lines).stdout
        for text, line in zip(TEXTS, out.splitlines()):
            with self.subTest(text):
                self.assertEqual(self.chat.tokenize(text).tolist(), json.loads(line))
        req = {"messages": [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hi there"}],
               "add_generation_prompt": True}
        out = util.run([util.VLSTACK, "chat-template", "--model", self.dir],
                       input=json.dumps(req) + "\n").stdout
        self.assertEqual(self.chat.render(req), json.loads(out))

    def test_round_trips(self):
        for text in TEXTS:
            with self.subTest(text):
                self.assertEqual(self.chat.detokenize(self.chat.tokenize(text)), text)
        turn = self.chat.tokenize("<|im_start|>user\nHi<|im_end|>")
        self.assertEqual(self.chat.detokenize(turn, skip_special_tokens=True), "user\nHi")
        self.assertEqual(self.chat.detokenize([]), "")
        self.assertEqual(self.chat.tokenize("").tolist(), [])
        # bytes: invalid UTF-8 becomes U+FFFD; a NUL byte is text.
        self.assertEqual(self.chat.detokenize(self.chat.tokenize(b"x\xffy")), "x\ufffdy")
        self.assertEqual(self.chat.detokenize(self.chat.tokenize("a\0b")), "a\0b")
        # Longer than any first guess of the buffers.
        long = "word " * 3000 + "中文" * 2000
        ids = self.chat.tokenize(long)
        self.assertGreater(len(ids), 3000)
        self.assertEqual(self.chat.detokenize(ids), long)

    def test_refusals(self):
        V = self.model.info.vocab
        with self.assertRaises(vlstack.InvalidArgumentError) as cm:
            self.chat.detokenize([9707, -1])
        self.assertEqual(cm.exception.status, "INVALID_ARGUMENT")
        self.assertIn("vls_chat_detokenize: ids[1] = -1", cm.exception.message)
        with self.assertRaises(vlstack.InvalidArgumentError) as cm:
            self.chat.detokenize(np.array([V], np.int64))
        self.assertIn("ids[0] = %d" % V, cm.exception.message)
        with self.assertRaises(vlstack.InvalidArgumentError) as cm:
            self.chat.detokenize([1.0])
        self.assertIn("ids has dtype float64", cm.exception.message)
        with self.assertRaises(vlstack.InvalidArgumentError) as cm:
            self.chat.render({"messages": [], "temp": 1})
        self.assertIn("temp", cm.exception.message)
        with self.assertRaises(vlstack.InvalidArgumentError):
            self.chat.render("{not json")

    def test_render_then_tokens_equals_chat(self):
        # The rendered prompt, tokenized and submitted as ids, generates what the chat request
        # generates (the pipeline's own tokenization).
        req = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 10,
               "ignore_eos": True}
        ids = self.chat.tokenize(self.chat.render(req))
        self.assertEqual(ids[0], self.chat.tokenize("<|im_start|>")[0])
        with self.model.batch() as b:
            a = b.result(b.submit_chat(self.chat, req))
            t = b.result(b.submit_tokens(ids, max_new_tokens=10, ignore_eos=True))
        self.assertEqual(a.tokens, t.tokens)
        self.assertEqual(a.text, self.chat.detokenize(t.tokens, skip_special_tokens=True))


if __name__ == "__main__":
    unittest.main()
