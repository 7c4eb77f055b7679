"""A mixture-of-experts model through the bindings (issue 32): a tiny qwen3-vl-moe (fused experts,
dense and sparse layers mixed, the real Qwen3 tokenizer) loads, reports its shape, and chats:
the streamed reply equals `vlstack run`'s and token generation on a batch equals a session's
greedy decode."""
import unittest

import numpy as np

import vlstack

import vls_test_util as util

# Layers 0 and 2 sparse (8 experts, top 2), layer 1 dense.
MOE = ["--arch", "qwen3-vl-moe", "--vocab", "151936", "--hidden", "64", "--layers", "3",
       "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128",
       "--deepstack", "1", "--experts", "8", "--top-k", "2", "--moe-intermediate", "32",
       "--mlp-only-layers", "1", "--untied", "--seed", "4"]


class MoeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = util._make("moe", MOE)  # pylint: disable=protected-access
        cls.model = vlstack.Model(cls.dir, capacity=128, slots=2, threads=util.THREADS)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_info(self):
        i = self.model.info
        self.assertEqual((i.hidden, i.vocab, i.layers), (64, 151936, 3))
        self.assertTrue(i.has_deepstack)

    def test_chat_equals_the_cli(self):
        prompt = "Tell me about the sea."
        want = util.cli_run(self.dir, prompt, 16)
        self.assertTrue(want)
        chat = self.model.chat()
        self.assertEqual("".join(chat.generate(prompt, max_tokens=16)), want)

    def test_generate_equals_session_greedy(self):
        ids = np.array([1000, 2000, 3000, 4000, 5000, 6000], dtype=np.int32)
        with self.model.batch() as b:
            got = list(b.generate(ids, max_new_tokens=8, ignore_eos=True))
        want = []
        with self.model.session() as s:
            s.prefill_tokens(ids)
            for _ in range(8):
                want.append(int(np.argmax(s.logits)))
                s.decode(want[-1])
        self.assertEqual(got, want)
        self.assertGreater(len(set(want)), 1, "a varied reply")


if __name__ == "__main__":
    unittest.main()
