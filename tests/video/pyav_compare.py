#!/usr/bin/python3
"""Our video frames against PyAV 10's, pixel for pixel (ctest video_frames_pyav, label oracle).

Usage: pyav_compare.py VIDEO_FRAMES_DUMP FIXTURES_DIR

For every clip in FIXTURES_DIR that src/video accepts, decodes every frame with PyAV as
transformers does (`for i, frame in enumerate(container.decode(video=0))`,
`frame.to_ndarray(format="rgb24")`), turns it for display by the rotation our probe reports, and
requires video_frames_dump's frames to be byte-identical: all frames, then a sparse subset (which
our decoder reaches by skipping). The probe must agree with PyAV too (frame count as
stream.frames or, when 0, the video packets; average_rate; coded size), and the display rotation
with the ffmpeg tool's autorotate (its frame 0, converted by its own filter graph, must be
closest to ours among the four turns). Runs with Debian's /usr/bin/python3 (python3-av, numpy).
"""
import json
import os
import subprocess
import sys
import tempfile

import av
import numpy as np

# Clips src/video refuses, and what the error must say.
REFUSED = {
    "ffv1.mkv": "codec 'ffv1' is not supported",
    "many_streams.mkv": "max_streams 16",
    "vp9_size_change.webm": "frame 6 is 32x24 where frame 0 is 64x48",
}


def pyav_frames(path):
    with av.open(path) as c:
        stream = c.streams.video[0]
        declared = stream.frames
        rate = float(stream.average_rate) if stream.average_rate else float(stream.guessed_rate)
        coded = (stream.codec_context.width, stream.codec_context.height)
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    if declared == 0:
        with av.open(path) as c:
            declared = sum(1 for p in c.demux(video=0) if p.size > 0)
    return frames, declared, rate, coded


def turn(a, rotation):
    return {0: a, 90: np.rot90(a, -1), 180: np.rot90(a, 2), 270: np.rot90(a, 1)}[rotation]


def run_dump(dump, clip, out, indices):
    r = subprocess.run([dump, clip, out] + [str(i) for i in indices], capture_output=True,
                       text=True, check=False)
    with open(os.path.join(out, "info.json")) as f:
        return r.returncode, json.load(f)


def ffmpeg_first_frame(clip, w, h):
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", clip, "-frames:v", "1", "-f", "rawvideo",
                          "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(h, w, 3)


def main():
    av.logging.set_level(av.logging.ERROR)
    dump, fixtures = sys.argv[1], sys.argv[2]
    failures = []
    checked = 0
    pixels = 0
    for name in sorted(os.listdir(fixtures)):
        clip = os.path.join(fixtures, name)
        with tempfile.TemporaryDirectory() as out:
            frames, declared, rate, coded = pyav_frames(clip)
            n = len(frames)
            if name in REFUSED:
                rc, info = run_dump(dump, clip, out, list(range(n)))
                if rc == 0 or REFUSED[name] not in info.get("error", ""):
                    failures.append(f"{name}: expected '{REFUSED[name]}', got {info}")
                else:
                    print(f"{name}: refused as expected ({info['error']})")
                continue
            rc, info = run_dump(dump, clip, out, list(range(n)))
            if rc != 0:
                failures.append(f"{name}: {info.get('error')}")
                continue
            rot = info["rotation"]
            if info["frames"] != declared:
                failures.append(f"{name}: frames {info['frames']}, PyAV {declared}")
            if abs(info["fps"] - rate) > 1e-9:
                failures.append(f"{name}: fps {info['fps']}, PyAV {rate}")
            if (info["coded_width"], info["coded_height"]) != coded:
                failures.append(f"{name}: coded size {info['coded_width']}x{info['coded_height']}, "
                                f"PyAV {coded}")
            for i, ref in enumerate(frames):
                expect = np.ascontiguousarray(turn(ref, rot))
                h, w = expect.shape[:2]
                got = np.fromfile(os.path.join(out, f"frame_{i}.rgb"), np.uint8)
                if got.size != expect.size:
                    failures.append(f"{name}: frame {i} has {got.size} bytes, PyAV {expect.size}")
                    continue
                diff = np.count_nonzero(got.reshape(h, w, 3) != expect)
                pixels += expect.size // 3
                if diff:
                    failures.append(f"{name}: frame {i}: {diff} of {expect.size} bytes differ")
            # The display turn against ffmpeg's autorotate (a different RGB conversion: compared
            # coarsely, against every turn).
            h, w = info["height"], info["width"]
            theirs = ffmpeg_first_frame(clip, w, h).astype(np.int32)
            errors = {}
            for r in (0, 90, 180, 270):
                cand = turn(frames[0], r)
                if cand.shape == theirs.shape:
                    errors[r] = np.abs(cand.astype(np.int32) - theirs).mean()
            if min(errors, key=errors.get) != rot:
                failures.append(f"{name}: rotation {rot}, but ffmpeg's autorotate looks like "
                                f"{min(errors, key=errors.get)} ({errors})")
            # A sparse subset: the same bytes, reached by skipping.
            subset = sorted({1 % n, n // 2, n - 1})
            with tempfile.TemporaryDirectory() as out2:
                rc, info2 = run_dump(dump, clip, out2, subset)
                for i in subset if rc == 0 else []:
                    a = np.fromfile(os.path.join(out, f"frame_{i}.rgb"), np.uint8)
                    b = np.fromfile(os.path.join(out2, f"frame_{i}.rgb"), np.uint8)
                    if not np.array_equal(a, b):
                        failures.append(f"{name}: frame {i} differs when decoded in {subset}")
                if rc != 0:
                    failures.append(f"{name}: subset {subset}: {info2.get('error')}")
                # One past the last frame: refused, naming both numbers.
                rc, info3 = run_dump(dump, clip, out2, [n])
                err = info3.get("error", "")
                if rc == 0 or f"frame index {n} is past" not in err or f"the last is {n - 1}" not in err:
                    failures.append(f"{name}: index {n} gave {err or 'no error'}")
            checked += 1
            print(f"{name}: {n} frames {info['width']}x{info['height']} rotation {rot} "
                  f"({info['codec']} in {info['container']}) identical to PyAV")
    print(f"{checked} clips, {pixels} pixels compared with PyAV {av.__version__}")
    if failures:
        print("\n".join(["FAILED:"] + failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
