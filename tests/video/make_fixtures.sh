#!/usr/bin/env bash
# Regenerates the small video clips under tests/video/fixtures/ (committed; src/video's tests,
# the PyAV comparison and the fuzz corpus read them). Needs Debian 12's ffmpeg 5.1 tool.
# The encoders are deterministic with these flags (one thread, bitexact), but a newer encoder
# may write other bytes: the tests compare our frames with PyAV's on whatever the clips hold, so
# regenerated clips need no other update.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)/fixtures
mkdir -p "$out"
cd "$out"
ff() { ffmpeg -hide_banner -loglevel error -y -threads 1 "$@"; }
# Moving colour pattern: every frame differs, so a wrong frame index shows.
src() { echo "testsrc2=size=$1:rate=${2:-10}:duration=${3:-1.2}"; }
bitexact=(-fflags +bitexact -flags:v +bitexact -map_metadata -1)

# H.264 yuv420p in MP4 with B-frames (decode order != presentation order inside the codec).
ff -f lavfi -i "$(src 64x48)" -c:v libx264 -preset veryfast -bf 2 -pix_fmt yuv420p \
  -x264-params threads=1 "${bitexact[@]}" h264_yuv420p.mp4
# The same with an AAC audio stream first (video is stream 1).
ff -f lavfi -i "sine=frequency=440:duration=1.2" -f lavfi -i "$(src 64x48)" \
  -map 0:a -map 1:v -c:a aac -b:a 16k -c:v libx264 -preset veryfast -pix_fmt yuv420p \
  -x264-params threads=1 "${bitexact[@]}" h264_audio_first.mp4
# Odd size: H.264 4:4:4 (4:2:0 needs even sizes) and VP9 4:2:0.
ff -f lavfi -i "$(src 98x62)" -vf format=yuv444p,crop=97:61:0:0 -c:v libx264 -preset veryfast -pix_fmt yuv444p \
  -x264-params threads=1 "${bitexact[@]}" h264_yuv444p_97x61.mp4
ff -f lavfi -i "$(src 98x62)" -vf format=yuv444p,crop=97:61:0:0 -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -b:v 50k \
  -pix_fmt yuv420p "${bitexact[@]}" vp9_97x61.webm
# WebM declares no frame count: VideoInfo::frames is counted from the packets.
ff -f lavfi -i "$(src 64x48)" -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -b:v 50k \
  -pix_fmt yuv420p "${bitexact[@]}" vp9.webm
ff -f lavfi -i "$(src 64x48)" -c:v libvpx -deadline realtime -cpu-used 8 -b:v 50k \
  -pix_fmt yuv420p "${bitexact[@]}" vp8.webm
# MPEG-4 part 2 in AVI.
ff -f lavfi -i "$(src 64x48)" -c:v mpeg4 -q:v 8 -bf 1 "${bitexact[@]}" mpeg4.avi
# Full range: H.264 tagged pc range (decodes to yuvj420p) and Motion JPEG in MOV.
ff -f lavfi -i "$(src 64x48)" -c:v libx264 -preset veryfast -pix_fmt yuvj420p \
  -x264-params threads=1 "${bitexact[@]}" h264_yuvj420p.mp4
ff -f lavfi -i "$(src 64x48 10 0.5)" -c:v mjpeg -q:v 10 -pix_fmt yuvj422p "${bitexact[@]}" \
  mjpeg.mov
# H.264 in MPEG-TS.
ff -f lavfi -i "$(src 64x48)" -c:v libx264 -preset veryfast -pix_fmt yuv420p \
  -x264-params threads=1 "${bitexact[@]}" h264.ts
# Display rotation. ffmpeg 5.1 has no -display_rotation and its mp4 muxer ignores the rotate
# tag, so the tkhd display matrix is written into the file afterwards ("rotate=90" as phones
# write it: turn 90 degrees clockwise to show). The pattern is not symmetric: a wrong turn shows.
ff -f lavfi -i "$(src 48x32 10 0.5)" -c:v libx264 -preset veryfast -pix_fmt yuv420p \
  -x264-params threads=1 "${bitexact[@]}" rotate_base.mp4
for deg in 90 180 270; do
  python3 - rotate_base.mp4 "h264_rotate$deg.mp4" "$deg" <<'PY'
import struct, sys
src, dst, deg = sys.argv[1], sys.argv[2], int(sys.argv[3])
one, m1 = 0x10000, -0x10000
a, b, c, d = {90: (0, one, m1, 0), 180: (m1, 0, 0, m1), 270: (0, m1, one, 0)}[deg]
data = bytearray(open(src, "rb").read())
at = data.index(b"tkhd") - 4  # the only track
assert data[at + 8] == 0  # version 0: the matrix is at byte 40 of the box
struct.pack_into(">9i", data, at + 48, a, b, 0, c, d, 0, 0, 0, 0x40000000)
open(dst, "wb").write(data)
PY
done
rm rotate_base.mp4
# AV1 in MP4 (decoded by libdav1d, as PyAV's avcodec_find_decoder picks it too).
ff -f lavfi -i "$(src 64x48)" -c:v libaom-av1 -cpu-used 8 -b:v 50k -pix_fmt yuv420p \
  "${bitexact[@]}" av1.mp4
# VP9 that changes size mid-way (6 frames of 64x48, then 6 of 32x24 from a key frame): refused
# from the first frame of the new size.
ff -f lavfi -i "$(src 64x48 10 0.6)" -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -b:v 50k \
  "${bitexact[@]}" size_a.webm
ff -f lavfi -i "$(src 32x24 10 0.6)" -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -b:v 50k \
  "${bitexact[@]}" size_b.webm
printf "file '%s'\nfile '%s'\n" "$out/size_a.webm" "$out/size_b.webm" > size_list.txt
ff -f concat -safe 0 -i size_list.txt -c copy "${bitexact[@]}" vp9_size_change.webm
rm size_a.webm size_b.webm size_list.txt
# 17 streams (one over VideoLimits::max_streams): refused.
maps=()
for _ in $(seq 17); do maps+=(-map 0:v); done
ff -f lavfi -i "$(src 16x16 10 0.1)" "${maps[@]}" -c:v mpeg4 "${bitexact[@]}" many_streams.mkv
# One frame.
ff -f lavfi -i "$(src 32x32 10 0.1)" -c:v libx264 -preset veryfast -pix_fmt yuv420p \
  -x264-params threads=1 "${bitexact[@]}" h264_one_frame.mp4
# Unsupported codec (FFV1 in Matroska): refused by name.
ff -f lavfi -i "$(src 32x32 10 0.2)" -c:v ffv1 "${bitexact[@]}" ffv1.mkv
ls -l "$out"
