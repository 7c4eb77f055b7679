#!/usr/bin/env python3
"""Chat with a model through the vlstack Python bindings: the reply streams to stdout.

usage: chat.py --model DIR --prompt TEXT [--system TEXT] [--max-tokens N] [--temperature T]
               [--capacity C] [--threads T] [--precision f32|bf16|int8|int4]

The prompt's token count (the rendered chat template, tokenized) goes to stderr. Greedy unless
--temperature is given (then the model's generation_config.json defaults apply otherwise).
The library is found as the package says (VLSTACK_LIBRARY, or libvlstack.so.1 installed).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import vlstack  # noqa: E402  pylint: disable=wrong-import-position


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder (weights, tokenizer, template)")
    ap.add_argument("--prompt", required=True, help="one user turn")
    ap.add_argument("--system", help="a system message")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--capacity", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=0, help="kernel threads (0: all cores)")
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16", "int8", "int4"])
    a = ap.parse_args()

    fields = {"max_tokens": a.max_tokens}
    if a.temperature is not None:
        fields["temperature"] = a.temperature
    try:
        with vlstack.Model(a.model, capacity=a.capacity, threads=a.threads,
                           precision=a.precision) as model:
            chat = vlstack.Chat(model)
            request = chat.request(a.prompt, system=a.system, **fields)
            prompt_ids = chat.tokenize(chat.render(request))
            print("prompt: %d tokens" % len(prompt_ids), file=sys.stderr)
            for piece in chat.generate(a.prompt, system=a.system, **fields):
                sys.stdout.write(piece)
                sys.stdout.flush()
    except vlstack.VlsError as e:
        print("chat.py: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
