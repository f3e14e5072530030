#!/usr/bin/env python3
"""Writes data/corpus.jsonl: the strings the tokenizer is checked on against
Hugging Face tokenizers (one JSON string per line). Deterministic."""
import json
import random

base = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "I'm sure it's fine; they'll see what we've done, I'd say.", "DON'T SHOUT, IT'S LOUD",
    "你好，世界！今天天气很好。", "机器学习是人工智能的一个分支。", "東京は日本の首都です。",
    "ひらがなとカタカナ、それに漢字。", "안녕하세요, 세계! 한국어 문장입니다.",
    "مرحبا بالعالم، كيف حالك؟", "שלום עולם, מה שלומך?", "नमस्ते दुनिया, आप कैसे हैं?",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง", "Привет, мир! Как дела?", "Γειά σου Κόσμε, τι κάνεις;",
    "Tiếng Việt có nhiều dấu: ă, â, ê, ô, ơ, ư, đ.", "Ελληνικά και русский и English mixed.",
    "Ünïcödé çhäràctérs: naïve café résumé façade", "ﬁ ligature and ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "Emoji: 😀😃😄 👍🏽 ❤️ 🇫🇷🇯🇵", "Family: 👨‍👩‍👧‍👦 and 🏳️‍🌈 and 👩🏾‍💻",
    "ZWJ alone: a\u200db, ZWNJ: می\u200cخواهم, ZWSP:\u200bend",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 (decomposed)", "Hangul jamo: \u1100\u1161\u11a8 vs 각",
    "Angstrom \u212b vs \u00c5 vs A\u030a", "Ohm \u2126 and Kelvin \u212a signs",
    "Digits: 0 12 345 6789 1234567890 3.14159 -42 1e10 0x1F", "Year 2024, 1,000,000 people; 99.9%",
    "Arabic-Indic ٠١٢٣٤٥٦٧٨٩ and Devanagari ०१२३ digits", "Superscripts x² y³ and fractions ½ ¾ and Ⅻ",
    "Tabs\tand\t\ttabs", "Line\nbreaks\n\nand\r\nCRLF\r\n", "   leading spaces", "trailing spaces   ",
    "multiple     inner      spaces", "\n\n\nstarts with newlines", "ends with newlines\n\n\n",
    "nbsp\u00a0here and ideographic\u3000space", "line sep\u2028para sep\u2029end", " ",
    "\t", "\n", "  \n  \n", "a", "?", "!!!", "...", "—", "–",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size();\n}\n",
    '{"name": "loom", "version": [0, 1, 0], "ok": true, "nested": {"k": null}}',
    "<html><body><div class=\"x\">Hi &amp; bye</div></body></html>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares",
    "fn main() { println!(\"{}\", 1 + 1); }", "$ ls -la | grep '.txt' && echo done",
    "path/to/file.txt C:\\Windows\\System32 https://example.com/a?b=c&d=e#f",
    "email: someone@example.org, phone: +1 (555) 123-4567",
    "Math: ∑ᵢ xᵢ² ≤ ∫₀^∞ e^{-x} dx, α+β=γ, ∀x∈ℝ", "Currency: $5, €10, £20, ¥300, ₹40, ₿0.5",
    "Quotes: “double” ‘single’ «guillemets» „low“", "Brackets: (round) [square] {curly} <angle> 【】「」",
    "Mixed中文English混合text with数字123", "カタカナ・ひらがな・漢字の混在テキスト123",
    "中文标点：，。！？；：“”（）《》", "Repeated: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "Separator: ==========================================", "-----", "_____", "*****",
    "   \t  \n\t mixed whitespace \t ", "Control: \u0001\u0002\u001f and DEL \u007f",
    "Private use: \ue000\uf8ff and noncharacter-ish \ufffd", "Astral: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙𝟚 𓀀 𐍈",
    "Variation selectors: ☺︎ ☺️ ︎", "Keycap: 1️⃣ #️⃣", "Tag sequence: 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "Mongolian ᠮᠣᠩᠭᠣᠯ and Tibetan བོད་ཡིག", "Georgian ქართული and Armenian Հայերեն",
    "Amharic ሰላም and Cherokee ᏣᎳᎩ", "Tamil தமிழ் and Bengali বাংলা and Gurmukhi ਪੰਜਾਬੀ",
    "Sinhala සිංහල and Khmer ភាសាខ្មែរ and Lao ພາສາລາວ", "Burmese မြန်မာဘာသာ",
    "Urdu اردو زبان and Persian فارسی", "Yiddish ייִדיש", "Syriac ܠܫܢܐ ܣܘܪܝܝܐ",
    "It's 5 o'clock; 'quoted' and ''double single'' 's 'S 'Re 'VE", "can't won't shan't y'all",
    "CamelCaseIdentifier snake_case_identifier kebab-case-id SCREAMING_CASE",
    "a1b2c3d4 123abc abc123 1a 12ab 123abc 1234abcd", "v1.2.3-beta+build.45",
    "0000000000000000000000000000000000000000", "3141592653589793238462643383279502884197",
]
specials = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>",
    "｜DSML｜", "<｜tool▁calls▁begin｜>", "<｜fim▁hole｜>", "<|fim_prefix|>",
]
special_texts = [
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜><think>hmm</think>Hello<｜end▁of▁sentence｜>",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\nok\n</think>\n\nHi<|im_end|>",
    "text<think>inner</think>text", "<<think>>", "<think</think>", "<｜User｜<｜User｜>>",
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "partial <｜end▁of▁sent and <|im_sta", "<tool_call>{\"a\": 1}</tool_call>",
    "<|endoftext|><|endoftext|>", "  <think>  ", "\n<｜Assistant｜>\n",
]
rng = random.Random(1234)
corpus = list(base) + special_texts
# Variants: prefixes, case, concatenations, special tokens in the middle.
for s in base[:60]:
    corpus.append(" " + s)
    corpus.append(s.upper() if rng.random() < 0.5 else s + "\n")
for _ in range(60):
    a, b = rng.sample(base, 2)
    sep = rng.choice([" ", "\n", "", "  ", "\t", rng.choice(specials)])
    corpus.append(a + sep + b)
# Random mixtures of characters from many blocks.
alphabet = ("abcxyzABCXYZ0123456789 \t\n.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`"
            "中文日本語한국어العربيةעבריתहिन्दीไทยРусскийΕλληνικάáéíóúüñç"
            "😀👍🏽‍♂️🇺🇸１２３ａｂｃ\u0301\u0308\u00a0\u3000\u200b\u200d")
for _ in range(60):
    n = rng.randint(1, 80)
    corpus.append("".join(rng.choice(alphabet) for _ in range(n)))
# Long pieces (more than 64 bytes in one pre-token) take the heap merge path.
corpus += [" " * 300, "a" * 500, "ab" * 200, "\n" * 100 + "x", "=" * 150, "-" * 77 + ">",
           "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz+/") for _ in range(400)),
           "ー" * 90, "\u0301" * 70, "😀" * 40]
seen = set()
with open("data/corpus.jsonl", "w", encoding="utf-8") as f:
    for s in corpus:
        if s not in seen:
            seen.add(s)
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
print(len(seen), "strings")
