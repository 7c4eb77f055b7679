"""Structured output through the bindings (issue 34): the chat request dict takes
response_format, json_schema, grammar, regex and enforced tools as the C ABI's chat JSON does;
sampled replies at temperature 1 follow them (checked with Python's json and re), a bad
constraint is refused naming its field, and Chat.generate streams a constrained reply."""
import json
import re
import unittest

import vlstack
from vlstack import FinishReason

import vls_test_util as util

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 10},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                   "required": ["city"], "additionalProperties": False}}}]
HEAD = '<tool_call>\n{"name": "get_weather", "arguments": '
CALL = re.compile(r'<tool_call>\n\{"name": "get_weather", "arguments": (\{.*\})\}\n</tool_call>',
                  re.S)


class StructuredOutputTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = util.chat_model()
        cls.model = vlstack.Model(cls.dir, capacity=256, slots=3, threads=util.THREADS)
        cls.chat = vlstack.Chat(cls.model)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def run_chat(self, b, seed, max_tokens, **fields):
        return b.result(b.submit_chat(self.chat, self.chat.request(
            "Weather?", max_tokens=max_tokens, temperature=1.0, seed=seed, **fields)))

    def test_schema_regex_and_grammar(self):
        stops = 0
        with self.model.batch() as b:
            for seed in range(1, 4):
                fmt = {"type": "json_schema",
                       "json_schema": {"name": "trip", "strict": True, "schema": SCHEMA}}
                r = self.run_chat(b, seed, 48, response_format=fmt)
                if r.finish_reason == FinishReason.STOP:
                    stops += 1
                    v = json.loads(r.text)
                    self.assertEqual(set(v), {"city", "days"}, r.text)
                    self.assertTrue(1 <= v["days"] <= 7 and len(v["city"]) <= 10, r.text)
                else:
                    self.assertEqual(r.finish_reason, FinishReason.LENGTH)
                    self.assertTrue(r.text.lstrip().startswith("{"), r.text)
                r = self.run_chat(b, seed, 16, regex="[A-Z][a-z]{2,5}, [0-9]{1,2}")
                self.assertEqual(r.finish_reason, FinishReason.STOP, r.text)
                self.assertRegex(r.text, r"^[A-Z][a-z]{2,5}, [0-9]{1,2}$")
                stops += 1
                r = self.run_chat(b, seed, 16, grammar='root ::= ("sun" | "rain") " " [1-3]')
                self.assertEqual(r.finish_reason, FinishReason.STOP, r.text)
                self.assertRegex(r.text, r"^(sun|rain) [1-3]$")
        self.assertGreater(stops, 0)

    def test_enforced_tool_calls(self):
        stops = 0
        with self.model.batch() as b:
            for seed in (1, 2):
                for choice in ("required",
                               {"type": "function", "function": {"name": "get_weather"}}):
                    r = self.run_chat(b, seed, 96, tools=TOOLS, tool_choice=choice)
                    if r.finish_reason == FinishReason.LENGTH:  # cut: a prefix of a call
                        self.assertTrue(HEAD.startswith(r.text) or r.text.startswith(HEAD),
                                        r.text)
                        continue
                    self.assertEqual(r.finish_reason, FinishReason.STOP)
                    stops += 1
                    calls = r.text.split("\n<tool_call>") if choice == "required" else [r.text]
                    for i, c in enumerate(calls):
                        m = CALL.fullmatch(c if i == 0 else "<tool_call>" + c)
                        self.assertTrue(m, r.text)
                        self.assertIn(json.loads(m.group(1))["city"], ("Paris", "Rome"))
        self.assertGreater(stops, 0)

    def test_generate_streams_a_constrained_reply(self):
        text = "".join(self.chat.generate("Digits?", max_tokens=12, regex="[0-9]{4}"))
        self.assertRegex(text, r"^[0-9]{4}$")

    def test_refusals_name_the_field(self):
        with self.model.batch() as b:
            bad = [({"regex": "(a)\\1"}, "regex"),
                   ({"regex": "a", "grammar": 'root ::= "a"'}, "cannot be combined"),
                   ({"json_schema": {"type": "object", "not": {}}}, "not"),
                   ({"response_format": {"type": "yaml"}}, "response_format"),
                   ({"tool_choice": "required"}, "tools")]
            for fields, needle in bad:
                with self.subTest(needle):
                    with self.assertRaises(vlstack.InvalidArgumentError) as cm:
                        b.submit_chat(self.chat, self.chat.request("x", **fields))
                    self.assertIn(needle, cm.exception.message)
            self.assertEqual((b.pending_count, b.active_count), (0, 0))


if __name__ == "__main__":
    unittest.main()
