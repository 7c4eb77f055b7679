#!/usr/bin/python3
"""Writes corpus.jsonl: the tokenizer test corpus (one JSON string or {"bytes_b64"} per line).

The corpus is committed; this script documents how it was made and regenerates it.
Long inputs are added at test time by compare_tokenizer.py so the file stays small.
"""
import base64
import json
import os
import unicodedata

TEXTS = [
    "", " ", "  ", "a", "Hello world", "Hello, world!", "hello   world", "  leading", "trailing  ",
    "I'm here. You're there. We've been. They'll go. He'd say. It's his. Don't.",
    "I'M HERE. YOU'RE THERE. WE'VE BEEN. THEY'LL GO. HE'D SAY. IT'S. DON'T. 'S 'T 'Re 'vE",
    "rock'n'roll o'clock ''s '' ' 's", "the cat's toy 'ſ 'K",
    "12345 67 8.9 1,000,000 3.14159 -42 +7 0x1F 1e10",
    "Arabic-Indic ٣٤٥ Devanagari १२३ Thai ๑๒๓ full-width １２３ circled ①②③ roman ⅫⅣ super ²³ frac ½",
    "中文测试：你好，世界！这是一个句子。", "日本語のテキスト、カタカナとひらがな。", "한국어 텍스트입니다.",
    "Русский текст, с пунктуацией — и тире.", "Ελληνικά κείμενα.", "עברית טקסט", "العربية نص تجريبي",
    "हिन्दी पाठ परीक्षण", "ภาษาไทยทดสอบ", "Tiếng Việt có dấu", "Ünïcödé àccénts çà et là",
    unicodedata.normalize("NFD", "Café déjà vu, Ångström, Việt"), "e\u0301 a\u030a o\u0308 \u1100\u1161\u11a8",
    "\u212b \u2126 \ufb01 \u00bd \u2460", "Emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇯🇵🇺🇸 ❤️ 🏳️‍🌈",
    "tab\there\t\tdouble", "line1\nline2\n\nline4\n\n\n", "crlf\r\nline\r\n\r\n", "\n", "\n\n  \n",
    "   \n   x", "x \n y", "a\u00a0b\u00a0\u00a0c", "a\u0085b \u0085 c", "ideographic\u3000space\u3000\u3000x",
    "ls\u2028ps\u2029end", "zero\u200bwidth\u200djoiner", "nbsp at end\u00a0", "mixed \t \n \r\n end",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more<|endoftext|><|endoftext|>", "<think>\nreasoning\n</think>\n\nanswer",
    "<|im_end|", "<<|im_end|>>", "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", " <|im_start|> spaced <|im_end|> ",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    "{\"key\": [1, 2, {\"nested\": null}], \"s\": \"a\\\"b\"}", "if (a != b && c <= d) { x++; }",
    "https://example.com/path?q=1&r=two#frag", "user@example.com", "C:\\Windows\\System32",
    "!!!???...,,,;;;::", "---===+++***", "$100 €200 £300 ¥400", "«quotes» „low“ ‘single’",
    "ALLCAPS lowercase MiXeD CamelCase snake_case kebab-case", "a1b2c3 4d5e6f", "x²+y²=z²",
    "\U0001d400\U0001d401 math bold", "\U00020000\U0002a6d6 CJK ext", "\ufeffBOM at start",
    "control \u0001\u0002\u001f chars \u007f", "ſtring ﬅ", "Kelvin \u212a sign",
]

BYTES = [
    b"\xff", b"abc\xe4\xb8", b"\xc0\xaf overlong", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80",
    b"ok \xe4\xb8\xad\xe6 broken", b"\x80\x80\x80", b"\xf0\x9f\x98", b"mixed \xfe\xfe valid \xc3\xa9",
]


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for t in TEXTS:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
        for b in BYTES:
            f.write(json.dumps({"bytes_b64": base64.b64encode(b).decode()}) + "\n")


if __name__ == "__main__":
    main()
