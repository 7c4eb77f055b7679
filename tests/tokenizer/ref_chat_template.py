#!/usr/bin/python3
"""Reference chat-template renderer: Python Jinja2 configured as transformers configures it.

usage: ref_chat_template.py TEMPLATE_SOURCE_FILE < requests.jsonl > prompts.jsonl
Each input line is {"messages": [...], "tools"?: [...], "add_generation_prompt"?: bool, ...};
each output line is the rendered prompt as a JSON string, or {"error": "..."}.
"""
import json
import sys

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' {% generation %} block, rendering its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def load_source(path):
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)["chat_template"]
        if isinstance(t, list):
            t = next(e["template"] for e in t if e.get("name") == "default")
        return t
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def main():
    template = compile_template(load_source(sys.argv[1]))
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        kwargs = {k: v for k, v in req.items()
                  if k not in ("messages", "tools", "documents", "add_generation_prompt")}
        try:
            out = template.render(messages=req["messages"], tools=req.get("tools"),
                                  documents=req.get("documents"),
                                  add_generation_prompt=req.get("add_generation_prompt", False),
                                  **kwargs)
            print(json.dumps(out, ensure_ascii=False))
        except Exception as e:  # noqa: BLE001 - any template failure is an error line
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}, ensure_ascii=False))


if __name__ == "__main__":
    main()
