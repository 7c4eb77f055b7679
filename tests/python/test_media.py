"""Images and video clips in chat requests through the bindings (the C ABI's chat JSON): a clip
as a data: URL gives the reply `vlstack run --video` gives for the same clip and text, with its
own fps and with an image beside it; a clip that is not a video and a clip path are refused
naming the message part."""
import base64
import os
import unittest

import vlstack

import vls_test_util as util

FFMPEG = "/usr/bin/ffmpeg"
PROMPT = "What happens in this clip?"


def data_url(path, mime):
    with open(path, "rb") as f:
        return "data:%s;base64,%s" % (mime, base64.b64encode(f.read()).decode())


@unittest.skipUnless(os.path.isfile(FFMPEG), "the clip is made with " + FFMPEG)
class MediaTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = util.chat_model()
        cls.clip = os.path.join(util.work_dir(), "clip.mp4")
        util.run([FFMPEG, "-v", "error", "-y", "-f", "lavfi", "-i",
                  "testsrc2=size=64x48:rate=4:duration=2", "-c:v", "libx264", "-pix_fmt",
                  "yuv420p", cls.clip])
        cls.model = vlstack.Model(cls.dir, capacity=512, slots=2, threads=util.THREADS)
        cls.chat = vlstack.Chat(cls.model)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def reply(self, parts, **fields):
        messages = [{"role": "user", "content": parts + [{"type": "text", "text": PROMPT}]}]
        return "".join(self.chat.generate(messages, max_tokens=12, **fields))

    def cli(self, *flags):
        return util.run([util.VLSTACK, "run", "--model", self.dir, "--precision", "f32",
                         "--threads", str(util.THREADS), "--prompt", PROMPT, "--max-tokens", "12"]
                        + list(flags)).stdout

    def test_a_clip_as_a_data_url_equals_the_cli(self):
        video = {"type": "video", "video": data_url(self.clip, "video/mp4")}
        want = self.cli("--video", self.clip)
        self.assertTrue(want)
        self.assertEqual(self.reply([video]), want)
        self.assertNotEqual(self.reply([]), want, "the clip changed nothing")
        # The prompt holds the clip's timestamped groups (two groups of two frames at 2 fps).
        prompt = self.chat.render(self.chat.request([{"role": "user", "content": [video]}]))
        self.assertIn("<|video_pad|>", prompt)
        # Its own fps, as run --fps.
        self.assertEqual(self.reply([dict(video, fps=1)]), self.cli("--video", self.clip, "--fps", "1"))

    def test_an_image_and_a_clip(self):
        png = os.path.join(util.work_dir(), "frame.png")
        util.run([FFMPEG, "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x64",
                  "-frames:v", "1", png])
        parts = [{"type": "image", "image": data_url(png, "image/png")},
                 {"type": "video", "video": data_url(self.clip, "video/mp4")}]
        self.assertEqual(self.reply(parts), self.cli("--image", png, "--video", self.clip))

    def test_refusals_name_the_part(self):
        junk = {"type": "video", "video": "data:video/mp4;base64," +
                base64.b64encode(b"\x00\x00\x00\x18ftypmp42" + b"\xff" * 64).decode()}
        with self.assertRaises(vlstack.DataLossError) as cm:
            self.reply([junk])
        self.assertIn("messages[0].content[0]", cm.exception.message)
        with self.assertRaises(vlstack.InvalidArgumentError) as cm:
            self.reply([{"type": "video", "video": self.clip}])
        self.assertIn("file paths are not accepted", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
