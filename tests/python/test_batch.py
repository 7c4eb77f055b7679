"""Batch through the bindings: greedy tokens equal to `vlstack batch`, chat text equal to
`vlstack run`, streaming equal to non-streaming (on this thread and on the batch's thread),
cancel mid-way with an unharmed bystander, stop strings, the low-level calls and refusals."""
import gc
import threading
import unittest
import weakref

import vlstack
from vlstack import FinishReason

import vls_test_util as util

PROMPTS = ["Tell me a story.", "What is the capital of France?", "1, 2, 3, 4,"]


class BatchTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = util.chat_model()
        cls.model = vlstack.Model(cls.dir, capacity=96, slots=3, threads=util.THREADS)
        cls.chat = vlstack.Chat(cls.model)
        cls.ids = [cls.chat.tokenize(p).tolist() for p in PROMPTS]

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def sync_results(self, n=12):
        """Every prompt's greedy tokens, driven by run_until_idle and read with poll."""
        with self.model.batch() as b:
            rids = [b.submit_tokens(ids, max_new_tokens=n, ignore_eos=True) for ids in self.ids]
            b.run_until_idle()
            self.assertEqual((b.pending_count, b.active_count), (0, 0))
            self.assertEqual(b.buffered_count, 3 * n)
            events = b.poll()
            self.assertEqual(b.buffered_count, 0)
        out = {}
        for rid in rids:
            mine = [e for e in events if e.request_id == rid]
            self.assertEqual(len(mine), n)
            self.assertTrue(all(not e.finished for e in mine[:-1]))
            self.assertEqual(mine[-1].finish_reason, FinishReason.LENGTH)
            out[rid - rids[0]] = [e.token for e in mine]
        return [out[i] for i in range(len(rids))]

    def test_greedy_equals_the_cli(self):
        want = util.cli_batch(self.dir, [{"id": i, "prompt": ids, "max_new_tokens": 12,
                                          "ignore_eos": True} for i, ids in enumerate(self.ids)])
        got = self.sync_results()
        self.assertEqual(got, [w["tokens"] for w in want])
        self.assertEqual({w["finish_reason"] for w in want}, {"length"})

    def test_streaming_equals_non_streaming(self):
        want = self.sync_results()
        # Streams read on this thread, interleaved: each drives the engine for all.
        with self.model.batch() as b:
            rids = [b.submit_tokens(ids, max_new_tokens=12, ignore_eos=True) for ids in self.ids]
            streams = [b.stream(r) for r in rids]
            got = [[] for _ in rids]
            live = set(range(len(rids)))
            while live:
                for i in sorted(live):
                    e = next(streams[i])
                    got[i].append(e.token)
                    if e.finished:
                        live.discard(i)
                        self.assertEqual(e.finish_reason, FinishReason.LENGTH)
            self.assertEqual(got, want)
            self.assertEqual(b.poll(), [], "streams leave no events behind")
        # One Python thread per stream: the streams take turns stepping the engine, then the
        # same on the batch's own thread.
        for threaded in (False, True):
            with self.model.batch() as b:
                if threaded:
                    b.start()
                rids = [b.submit_tokens(ids, max_new_tokens=12, ignore_eos=True)
                        for ids in self.ids]
                got = [None] * len(rids)

                def read(i, b=b, rids=rids, got=got):
                    got[i] = list(t.token for t in b.stream(rids[i]))

                threads = [threading.Thread(target=read, args=(i,)) for i in range(len(rids))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                b.stop()
                self.assertEqual(got, want, "threaded" if threaded else "stepped by the streams")
        with self.model.batch() as b:
            # generate() on the threaded batch, then step() works again after stop.
            b.start()
            self.assertEqual(list(b.generate(self.ids[0], max_new_tokens=12, ignore_eos=True)),
                             want[0])
            with self.assertRaises(vlstack.FailedPreconditionError):
                b.step()
            b.stop()
            self.assertEqual(b.step(), [])

    def test_cancel_mid_way(self):
        with self.model.batch() as b:
            alone = b.result(b.submit_tokens(self.ids[0], max_new_tokens=16, ignore_eos=True))
        with self.model.batch() as b:
            bystander = b.submit_tokens(self.ids[0], max_new_tokens=16, ignore_eos=True)
            victim = b.submit_tokens(self.ids[1], max_new_tokens=16, ignore_eos=True)
            seen = []
            for e in b.stream(victim):
                seen.append(e)
                if len(seen) == 4:
                    self.assertEqual(b.slot_of(victim) in (0, 1, 2), True)
                    self.assertEqual(len(b.next_coordinate(victim)), 3)
                    b.cancel(victim)
            # Tokens the engine made before the cancel still come, then the CANCELLED event.
            self.assertTrue(all(e.finish_reason == FinishReason.NONE for e in seen[:-1]))
            self.assertEqual((seen[-1].token, seen[-1].finish_reason), (-1, FinishReason.CANCELLED))
            self.assertTrue(5 <= len(seen) < 16, len(seen))
            with self.assertRaises(vlstack.NotFoundError) as cm:
                b.cancel(victim)
            self.assertIn("vls_batch_cancel", cm.exception.message)
            rest = b.result(bystander)
            self.assertEqual((rest.tokens, rest.finish_reason), (alone.tokens, alone.finish_reason))
            # A queued request cancelled before it ran: one CANCELLED event, nothing else.
            q = b.submit_tokens(self.ids[2], max_new_tokens=4)
            b.cancel(q)
            self.assertEqual([(e.token, e.finish_reason) for e in b.stream(q)],
                             [(-1, FinishReason.CANCELLED)])
            with self.assertRaises(vlstack.NotFoundError):
                next(b.stream(q))

    def test_chat_text_equals_the_cli(self):
        want = util.cli_run(self.dir, PROMPTS[0], 24)
        self.assertTrue(want)
        with self.model.batch() as b:
            pieces = list(self.chat.generate(PROMPTS[0], batch=b, max_tokens=24))
            self.assertEqual("".join(pieces), want)
            self.assertEqual(b.active_count, 0)
            # The stream's events: one per token, text pieces adding up to the whole.
            rid = b.submit_chat(self.chat, self.chat.request(PROMPTS[0], max_tokens=24))
            events = list(b.stream(rid))
            self.assertEqual("".join(e.text for e in events), want)
            self.assertTrue(events[-1].finished)
            self.assertLessEqual(len(events), 24)
            # take_text after run_until_idle: the same text at once.
            rid = b.submit_chat(self.chat, self.chat.request(PROMPTS[0], max_tokens=24))
            b.run_until_idle()
            self.assertEqual(b.take_text(rid), (want, True))
            with self.assertRaises(vlstack.NotFoundError):
                b.take_text(rid)
            # A stop string cuts the text right before it.
            if len(want) >= 6:
                stop = want[len(want) // 2:len(want) // 2 + 3]
                r = b.result(b.submit_chat(self.chat, self.chat.request(
                    PROMPTS[0], max_tokens=24, stop=[stop])))
                self.assertEqual(r.text, want[:want.find(stop)])
                self.assertEqual(r.finish_reason, FinishReason.STOP)
        # Without a batch: a temporary one.
        self.assertEqual("".join(self.chat.generate(PROMPTS[0], max_tokens=24)), want)

    def test_closing_in_any_order(self):
        # A chat closed while a batch still runs its request: refused for new calls at once,
        # freed (the C rule) only after the batch.
        with self.model.batch() as b:
            chat = vlstack.Chat(self.model)
            want = b.result(b.submit_chat(chat, chat.request(PROMPTS[0], max_tokens=8))).text
            b.start()
            rid = b.submit_chat(chat, chat.request(PROMPTS[0], max_tokens=8))
            chat.close()
            self.assertTrue(chat.closed)
            with self.assertRaises(vlstack.ClosedError):
                chat.tokenize("x")
            with self.assertRaises(vlstack.ClosedError):
                b.submit_chat(chat, chat.request("x"))
            self.assertEqual(b.result(rid).text, want)
            self.assertIsNotNone(chat._pending, "the C chat lives while the batch does")
        self.assertIsNone(chat._pending)
        # A model, its batch (threaded, busy) and chat dropped together in a reference cycle:
        # the collector finalizes them in any order, the C handles are freed children first.
        m = vlstack.Model(self.dir, capacity=32, threads=util.THREADS)
        b, c = m.batch(), m.chat()
        b.start()
        b.submit_chat(c, c.request(PROMPTS[1], max_tokens=8))
        cycle = [m, b, c]
        cycle.append(cycle)
        gone = [weakref.ref(x) for x in cycle[:3]]
        del m, b, c, cycle
        gc.collect()
        self.assertEqual([r() for r in gone], [None] * 3)

    def test_low_level_and_refusals(self):
        with self.model.batch() as b:
            rid = b.submit_tokens(self.ids[0], max_new_tokens=3, ignore_eos=True)
            self.assertEqual(b.pending_count, 1)
            self.assertGreater(b.pending_bytes, 0)
            first = b.admit()
            self.assertEqual([(e.request_id, e.finished) for e in first], [(rid, False)])
            self.assertEqual(b.active_count, 1)
            self.assertEqual(b.next_coordinate(rid), (len(self.ids[0]),) * 3)
            more = b.step() + b.step()
            self.assertEqual([e.finish_reason for e in more],
                             [FinishReason.NONE, FinishReason.LENGTH])
            self.assertEqual(b.wait(0.01), [])
            with self.assertRaises(vlstack.NotFoundError):
                b.slot_of(rid)
            with self.assertRaises(vlstack.NotFoundError):
                b.stream(12345)
            with self.assertRaises(vlstack.NotFoundError):
                b.take_text(rid)
            with self.assertRaises(vlstack.NotFoundError):
                b.request_error(rid)
            # Refused submits change nothing.
            bad = [
                (lambda: b.submit_tokens(self.ids[0], max_new_tokens=0), "max_new_tokens"),
                (lambda: b.submit_tokens(self.ids[0], temperature=-1.0), "temperature"),
                (lambda: b.submit_tokens(self.ids[0], top_p=0.0), "top_p"),
                (lambda: b.submit_tokens(self.ids[0], temperature="hot"), "not a number"),
                (lambda: b.submit_tokens(self.ids[0], seed=-1), "seed"),
                (lambda: b.submit_tokens([151936]), "151936"),
                (lambda: b.submit_tokens([]), "vls_batch_submit_tokens"),
                (lambda: b.submit_chat(self.chat, {"messages": "hi"}), "messages"),
                (lambda: b.submit_chat(self.chat, {"messages": [{"role": "user", "content": "x"}],
                                                   "max_tokens": "8"}),
                 "max_tokens"),
            ]
            for fn, needle in bad:
                with self.subTest(needle):
                    with self.assertRaises(vlstack.InvalidArgumentError) as cm:
                        fn()
                    self.assertIn(needle, cm.exception.message)
            with self.assertRaises(vlstack.OutOfRangeError) as cm:
                b.submit_tokens(self.ids[0], max_new_tokens=1000)
            self.assertIn("exceeds the context capacity 96", cm.exception.message)
            with self.assertRaises(TypeError):
                b.submit_tokens(self.ids[0], max_tokens=3)
            self.assertEqual((b.pending_count, b.pending_bytes, b.active_count), (0, 0, 0))
            # Sampling with a seed is reproducible.
            kw = dict(max_new_tokens=8, ignore_eos=True, temperature=1.0, seed=42)
            self.assertEqual(list(b.generate(self.ids[1], **kw)),
                             list(b.generate(self.ids[1], **kw)))


if __name__ == "__main__":
    unittest.main()
