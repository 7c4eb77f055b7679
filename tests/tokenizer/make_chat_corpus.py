#!/usr/bin/python3
"""Writes chat_corpus.jsonl: conversations for the chat-template cross-check."""
import json
import os

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Météo actuelle — current weather 🌦",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search\nthe web",
                                           "parameters": {"type": "object", "properties": {
                                               "q": {"type": "array", "items": {"type": "string"}}}}}}

R = []
R.append({"messages": [{"role": "system", "content": "You are helpful."},
                       {"role": "user", "content": "Hi!"}], "add_generation_prompt": True})
R.append({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
                       {"role": "user", "content": "and 3+3?"}], "add_generation_prompt": True})
R.append({"messages": [{"role": "user", "content": "no gen prompt"}]})
R.append({"messages": [{"role": "user", "content": "think off"}], "add_generation_prompt": True,
          "enable_thinking": False})
R.append({"messages": [{"role": "user", "content": "think on"}], "add_generation_prompt": True,
          "enable_thinking": True})
R.append({"messages": [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "<think>\nstep one\n</think>\n\nanswer one"},
    {"role": "user", "content": "q2"},
    {"role": "assistant", "content": "final", "reasoning_content": "because\n"}],
    "add_generation_prompt": False})
R.append({"messages": [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Weather in Zürich and 東京?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}},
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"東京\"}"}}]},
    {"role": "tool", "content": "{\"temp\": 21.5}"},
    {"role": "tool", "content": "<tool_response>sunny</tool_response>"},
    {"role": "assistant", "content": "Both are fine 😀"}],
    "tools": [WEATHER, SEARCH], "add_generation_prompt": True})
R.append({"messages": [{"role": "user", "content": "tools, no system"},
                       {"role": "assistant", "content": "Let me check.", "tool_calls": [
                           {"name": "search", "arguments": {"q": ["a", "b"]}}]},
                       {"role": "tool", "content": "results"}],
          "tools": [SEARCH], "add_generation_prompt": True})
R.append({"messages": [
    {"role": "system", "content": [{"type": "text", "text": "System as a list."}]},
    {"role": "user", "content": [
        {"type": "image", "image": "file:///a.png"}, {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "http://x/y.jpg"}},
        {"type": "video", "video": "file:///v.mp4"}, {"type": "text", "text": "And this video?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat and a dog."}]},
    {"role": "user", "content": [{"image": "b.png"}, {"type": "text", "text": "Another"}]}],
    "add_generation_prompt": True})
R.append({"messages": [{"role": "user", "content": [
    {"type": "image", "image": "1.png"}, {"type": "image", "image": "2.png"},
    {"type": "video", "video": "3.mp4"}, {"type": "text", "text": "Compare."}]}],
    "add_generation_prompt": True, "add_vision_id": True})
R.append({"messages": [{"role": "user", "content": "call"},
                       {"role": "assistant", "content": None, "tool_calls": [
                           {"type": "function", "function": {"name": "f", "arguments": {}}}]},
                       {"role": "tool", "content": [{"type": "text", "text": "list tool result"},
                                                    {"type": "image", "image": "r.png"}]}],
          "add_generation_prompt": True})
R.append({"messages": [{"role": "user", "content": "Quotes ' \" \\ and\nnewlines\ttabs <|im_end|> ok"},
                       {"role": "assistant", "content": "  leading and trailing spaces  "}]})
R.append({"messages": []})
R.append({"messages": [{"role": "system", "content": "only system"}], "add_generation_prompt": True})
R.append({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                       {"role": "system", "content": "late system"}, {"role": "user", "content": "z"}]})

if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_corpus.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for r in R:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
