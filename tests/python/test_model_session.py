"""Model and Session through the bindings: options and info, identity, prefills and decode,
logits as copies, the checks in Python and in the C ABI (DeepStack payload rules among them),
and the life of handles (close twice, use after close, a model closing its children)."""
import os
import re
import tempfile
import unittest
from unittest import mock

import numpy as np

import vlstack

import vls_test_util as util


def assert_refused(test, fn, *needles, status="INVALID_ARGUMENT"):
    """fn() raises the VlsError of `status` whose message holds every needle."""
    with test.assertRaises(vlstack.VlsError) as cm:
        fn()
    e = cm.exception
    test.assertEqual(e.status, status, str(e))
    for n in needles:
        test.assertIn(n, e.message)
    return e


class ModelSessionTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = util.chat_model()
        cls.model = vlstack.Model(cls.dir, capacity=64, slots=2, threads=util.THREADS)
        cls.info = cls.model.info
        cls.rng = np.random.default_rng(7)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def prompt(self, n=6):
        return np.arange(1000, 1000 + n, dtype=np.int32) * 7

    def test_info_identity_layers(self):
        i = self.info
        self.assertEqual((i.hidden, i.vocab, i.layers, i.heads, i.kv_heads, i.head_dim),
                         (64, 151936, 2, 4, 2, 16))
        self.assertEqual((i.capacity, i.slots), (64, 2))
        self.assertEqual(i.position_mode, vlstack.PositionMode.MROPE)
        self.assertTrue(i.has_deepstack)
        self.assertEqual(i.deepstack_layer_count, 1)
        self.assertEqual(len(self.model.deepstack_layers), 1)
        self.assertGreater(i.image_token_id, 0)
        ident = self.model.identity
        self.assertRegex(ident, r"^[0-9a-f]{64}$")
        self.assertEqual(ident, self.model.identity)

    def test_model_by_repository_id(self):
        """Model("Org/Name") loads the snapshot a Hugging Face cache holds for it (refs/main ->
        snapshots/<commit>); an id the cache lacks raises NotFoundError naming where it looked."""
        with tempfile.TemporaryDirectory() as cache:
            repo = os.path.join(cache, "models--test-org--chat")
            os.makedirs(os.path.join(repo, "refs"))
            os.makedirs(os.path.join(repo, "snapshots"))
            snapshot = os.path.join(repo, "snapshots", "0a1b2c3d4e")
            os.symlink(os.path.abspath(self.dir), snapshot)
            with open(os.path.join(repo, "refs", "main"), "w") as f:
                f.write("0a1b2c3d4e\n")
            with mock.patch.dict(os.environ, {"HF_HUB_CACHE": cache}):
                self.assertEqual(vlstack.resolve_model(self.dir), self.dir)
                self.assertEqual(vlstack.resolve_model("/no/such/model"), "/no/such/model")
                self.assertEqual(vlstack.resolve_model("test-org/chat"), snapshot)
                with vlstack.Model("test-org/chat", capacity=64, slots=2,
                                   threads=util.THREADS) as m:
                    self.assertEqual(m.path, snapshot)
                    self.assertEqual(m.identity, self.model.identity)
                e = assert_refused(self, lambda: vlstack.Model("test-org/absent"),
                                   "models--test-org--absent", status="NOT_FOUND")
                self.assertIsInstance(e, vlstack.NotFoundError)

    def test_model_options(self):
        with vlstack.Model(self.dir, capacity=32, precision="bf16", kv_cache="bf16",
                           threads=util.THREADS) as m:
            self.assertEqual(m.info.capacity, 32)
            self.assertNotEqual(m.identity, self.model.identity, "precision is in the identity")
        assert_refused(self, lambda: vlstack.Model(self.dir, precision="f64"), "precision")
        assert_refused(self, lambda: vlstack.Model(self.dir, capacity="8"), "capacity")
        assert_refused(self, lambda: vlstack.Model(self.dir, capacity=2**40), "capacity")
        e = assert_refused(self, lambda: vlstack.Model(self.dir, capacity=-1), "capacity")
        self.assertTrue(e.message.startswith("vls_model_load"), e.message)

    def test_artifact_copied_or_mapped(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.vls")
            with vlstack.Model(self.dir, capacity=32, precision="bf16",
                               threads=util.THREADS) as src:
                src.write_artifact(path)
                want = src.identity
                with src.session() as s:
                    s.prefill_tokens(self.prompt())
                    logits = s.logits.copy()
            for memory in ("copy", "map", vlstack.ArtifactMemory.MAP):
                with vlstack.Model(self.dir, capacity=32, precision="bf16", artifact=path,
                                   artifact_memory=memory, threads=util.THREADS) as m:
                    self.assertEqual(m.identity, want, memory)
                    with m.session() as s:
                        s.prefill_tokens(self.prompt())
                        np.testing.assert_array_equal(s.logits, logits, err_msg=str(memory))
            assert_refused(self, lambda: vlstack.Model(self.dir, artifact_memory="shared"),
                           "artifact_memory")

    def test_greedy_session_equals_batch(self):
        ids = self.prompt()
        with self.model.session() as s:
            s.prefill_tokens(list(map(int, ids)))  # a list of Python ints is accepted
            self.assertEqual((s.length, s.rope_delta), (len(ids), 0))
            greedy = []
            for _ in range(8):
                logits = s.logits
                self.assertEqual((logits.dtype, logits.shape), (np.float32, (self.info.vocab,)))
                self.assertTrue(np.isfinite(logits).all())
                greedy.append(int(np.argmax(logits)))
                s.decode(greedy[-1])
            self.assertEqual(s.length, len(ids) + 8)
        with self.model.batch() as b:
            got = list(b.generate(ids, max_new_tokens=8, ignore_eos=True))
        self.assertEqual(got, greedy)

    def test_logits_are_a_copy_and_failures_change_nothing(self):
        with self.model.session() as s:
            assert_refused(self, lambda: s.logits, "vls_session_logits",
                           status="FAILED_PRECONDITION")
            s.prefill_tokens(self.prompt(), rope_delta=-2)
            self.assertEqual(s.rope_delta, -2)
            a = s.logits
            a[:] = 0
            b = s.logits
            self.assertFalse((b == 0).all(), "the logits are a copy")
            # Refused by the C ABI (a value rule): nothing changes.
            bad = self.prompt()
            bad[2] = self.info.vocab
            assert_refused(self, lambda: s.prefill_tokens(bad), "vls_session_prefill_tokens",
                           str(self.info.vocab))
            assert_refused(self, lambda: s.decode(-1), "vls_session_decode")
            self.assertEqual((s.length, s.rope_delta), (6, -2))
            np.testing.assert_array_equal(s.logits, b)
            # Refused in Python: dtype, rank, range, the position mode.
            assert_refused(self, lambda: s.prefill_tokens(np.zeros(4, np.float32)),
                           "tokens has dtype float32")
            assert_refused(self, lambda: s.prefill_tokens(np.zeros((2, 2), np.int32)),
                           "tokens has shape [2, 2]")
            assert_refused(self, lambda: s.prefill_tokens([1, 2**31]), "outside int32")
            assert_refused(self, lambda: s.prefill_tokens(self.prompt(4), positions=[0, 1, 2, 3]),
                           "positions has shape [4]", "[3, 4]")
            assert_refused(self, lambda: s.prefill_tokens(
                self.prompt(), position_mode=vlstack.PositionMode.POSITIONS_1D),
                "vls_session_prefill_tokens", "mode")
            assert_refused(self, lambda: s.decode(1.5), "not an integer")
            self.assertEqual(s.length, 6)

    def test_embeddings(self):
        H = self.info.hidden
        emb = self.rng.standard_normal((5, H)).astype(np.float32)
        with self.model.session() as s:
            s.prefill_embeddings(emb[:, ::-1])  # non-contiguous: copied
            self.assertEqual(s.length, 5)
            s.prefill_embeddings(emb.astype(">f4"), positions=np.tile(np.arange(5), (3, 1)))
            self.assertEqual(s.length, 5)
            assert_refused(self, lambda: s.prefill_embeddings(emb.astype(np.float64)),
                           "embeddings has dtype float64; expected float32")
            assert_refused(self, lambda: s.prefill_embeddings(emb[:, :8]),
                           "embeddings has shape [5, 8]; expected [?, 64]")
            bad = emb.copy()
            bad[1, 3] = np.inf
            assert_refused(self, lambda: s.prefill_embeddings(bad),
                           "vls_session_prefill_embeddings")

    def deepstack_args(self, S=6, Nv=2):
        H, K = self.info.hidden, self.info.deepstack_layer_count
        emb = self.rng.standard_normal((S, H)).astype(np.float32)
        feat = self.rng.standard_normal((K, Nv, H)).astype(np.float32)
        return emb, np.arange(1, 1 + Nv), feat

    def test_deepstack_prefill_and_payload_rules(self):
        emb, vis, feat = self.deepstack_args()
        with self.model.session() as s, self.model.batch() as b:
            s.prefill_deepstack(emb, vis, feat)
            self.assertEqual(s.length, 6)
            ok = s.logits
            # Each rule, through the session and through a batch submit: INVALID_ARGUMENT with
            # a message naming it; the session and the queue stay as they were.
            nan = feat.copy()
            nan[0, 1, 5] = np.nan
            cases = [
                ("NaN feature", (emb, vis, nan), ["non_finite_feature", "NaN"]),
                ("unsorted positions", (emb, vis[::-1], feat), ["positions_not_sorted"]),
                ("position past S", (emb, [1, 6], feat), ["deepstack."]),
                ("wrong layers", (emb, vis, feat, [1]), ["deepstack."]),
                ("features shape", (emb, vis, feat[:, :1]),
                 ["features has shape [1, 1, 64]; expected [1, 2, 64]"]),
                ("features rank", (emb, vis, feat[0]), ["features has shape [2, 64]"]),
                ("features dtype", (emb, vis, feat.astype(np.float16)),
                 ["features has dtype float16"]),
                ("positions rank", (emb, [vis], feat), ["visual_positions has shape [1, 2]"]),
                ("embeddings width", (emb[:, :32], vis, feat), ["embeddings has shape [6, 32]"]),
            ]
            bytes0 = b.pending_bytes
            for what, args, needles in cases:
                with self.subTest(what):
                    assert_refused(self, lambda: s.prefill_deepstack(*args), *needles)
                    assert_refused(self, lambda: b.submit_deepstack(*args), *needles)
            self.assertEqual((b.pending_count, b.pending_bytes), (0, bytes0))
            self.assertEqual(s.length, 6)
            np.testing.assert_array_equal(s.logits, ok)
            # token_ids: the visual positions must be the image pads.
            ids = np.full(6, 1000, np.int32)
            ids[[1, 2]] = self.info.image_token_id
            s.prefill_deepstack(emb, vis, feat, token_ids=ids)
            ids[3] = self.info.image_token_id
            assert_refused(self, lambda: s.prefill_deepstack(emb, vis, feat, token_ids=ids),
                           "vls_session_prefill_deepstack")
            # A valid DeepStack request runs in the batch.
            rid = b.submit_deepstack(emb, vis, feat, max_new_tokens=3, ignore_eos=True)
            r = b.result(rid)
            self.assertEqual((len(r.tokens), r.finish_reason), (3, vlstack.FinishReason.LENGTH))

    def test_plain_model(self):
        with vlstack.Model(util.plain_model(), capacity=32, threads=util.THREADS) as m:
            self.assertEqual(m.info.position_mode, vlstack.PositionMode.POSITIONS_1D)
            self.assertFalse(m.info.has_deepstack)
            self.assertEqual(m.deepstack_layers, [])
            with m.session() as s:
                s.prefill_tokens([1, 2, 3], positions=[0, 1, 2])
                assert_refused(self, lambda: s.prefill_tokens([1, 2], positions=[[0, 1]] * 3),
                               "positions has shape [3, 2]; expected [2]")
                emb = np.zeros((2, m.info.hidden), np.float32)
                assert_refused(self, lambda: s.prefill_deepstack(emb, [0], np.zeros((1, 1, 64))),
                               "no DeepStack")
            assert_refused(self, lambda: vlstack.Chat(m), "vls_chat_create", "tokenizer",
                           status="NOT_FOUND")

    def test_close(self):
        m = vlstack.Model(self.dir, capacity=16, threads=util.THREADS)
        s, b, c = m.session(), m.batch(), m.chat()
        s.prefill_tokens([1, 2, 3])
        s.close()
        s.close()  # twice: a no-op
        self.assertTrue(s.closed)
        e = assert_refused(self, lambda: s.decode(1), "closed", status="FAILED_PRECONDITION")
        self.assertIsInstance(e, vlstack.ClosedError)
        assert_refused(self, lambda: s.logits, "Session is closed", status="FAILED_PRECONDITION")
        m.close()  # closes its batch and chat first
        m.close()
        self.assertTrue(b.closed and c.closed and m.closed)
        for fn in (lambda: m.info, lambda: m.session(), lambda: b.submit_tokens([1]),
                   lambda: c.tokenize("x"), lambda: b.poll()):
            assert_refused(self, fn, "closed", status="FAILED_PRECONDITION")
        self.assertTrue(re.search("closed", repr(m)))
        with vlstack.Model(self.dir, capacity=16, threads=util.THREADS) as m2:
            with m2.session() as s2:
                s2.prefill_tokens([5])
            self.assertTrue(s2.closed)
        self.assertTrue(m2.closed)


if __name__ == "__main__":
    unittest.main()
