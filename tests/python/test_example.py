"""python/examples/chat.py, the README's example: its streamed reply equals `vlstack run`'s,
it reports the prompt's token count, and a bad model folder is a clear error (exit 2)."""
import os
import subprocess
import sys
import unittest

import vlstack

import vls_test_util as util

EXAMPLE = os.path.join(util.REPO, "python", "examples", "chat.py")


def example(*args):
    return subprocess.run([sys.executable, EXAMPLE, "--threads", str(util.THREADS)] + list(args),
                          capture_output=True, text=True, timeout=120)


class ExampleTest(unittest.TestCase):

    def test_reply_equals_the_cli(self):
        model = util.chat_model()
        prompt = "Tell me a story."
        p = example("--model", model, "--prompt", prompt, "--max-tokens", "24",
                    "--capacity", "128")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, util.cli_run(model, prompt, 24))
        with vlstack.Model(model, capacity=128, threads=util.THREADS) as m:
            chat = m.chat()
            n = len(chat.tokenize(chat.render(chat.request(prompt))))
        self.assertIn("prompt: %d tokens" % n, p.stderr)

    def test_bad_model(self):
        p = example("--model", os.path.join(util.work_dir(), "missing"), "--prompt", "hi")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("vls_model_load", p.stderr)
        self.assertEqual(p.stdout, "")


if __name__ == "__main__":
    unittest.main()
