#!/usr/bin/env python3
"""Build the tokenizer and chat-template fixtures for qwenrt (tests/data/tokenizer/).

Usage:  python3 scripts/make_tokenizer_fixtures.py tests/data/tokenizer
        python3 scripts/make_tokenizer_fixtures.py --big OUT.json   (a 248K-vocab tokenizer.json for timing
                                                                    the loader; large, not committed)
        python3 scripts/make_tokenizer_fixtures.py --bench-text OUT.txt         (~10 MB of mixed text)
        python3 scripts/make_tokenizer_fixtures.py --bench-hf TOKENIZER.json TEXT  (HF load time and
                                                                    single-thread encode MB/s, for comparison
                                                                    with build/bin/bench_tokenizer)

Writes
  tok-small.json, tok-large.json   two byte-level BPE tokenizers trained here with HF `tokenizers` on the
                                   multilingual corpus below (vocab ~2000 and ~8000), with the Qwen3.5
                                   normalizer (NFC), pre-tokenizer (Split on the Qwen3.5 regex, Isolated, then
                                   ByteLevel without its own regex), ByteLevel decoder and the 33 added tokens of
                                   docs/model.md §5 with ids right after the BPE vocabulary. tok-small stores merges as
                                   ["a", "b"] pairs, tok-large as legacy "a b" strings.
  encode_cases.json                test strings with HF's ids for both tokenizers, random id sequences with
                                   HF's decoded text, and invalid-UTF-8 byte strings (hex) that must be refused.
  chat_cases.json                  conversations rendered by transformers' apply_chat_template with the
                                   template texts qwen3.5_chat_template.jinja / qwen3.6_chat_template.jinja.
Everything is seeded; re-running reproduces the files.
"""

import json
import os
import random
import sys
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# docs/model.md §5, in id order. The ones Qwen marks as non-special ("special": false) still match as whole
# strings before BPE; the split lets the tests cover both kinds.
ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False), ("<|audio_start|>", True), ("<|audio_end|>", True),
    ("<tts_pad>", True), ("<tts_text_bos>", True), ("<tts_text_eod>", True), ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]

EN = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
      "word but not what all were we when your can said there use an each which she do how their if will up "
      "other about out many then them these so some her would make like him into time has look two more write "
      "go see number no way could people my than first water been call who oil its now find long down day did "
      "get come made may part over new sound take only little work know place year live me back give most very "
      "after thing our just name good sentence man think say great where help through much before line right "
      "too mean old any same tell boy follow came want show also around form three small set put end does "
      "another well large must big even such because turn here why ask went men read need land different home "
      "us move try kind hand picture again change off play spell air away animal house point page letter "
      "mother answer found study still learn should America world tokenizer model runtime decoding Qwen GPU "
      "kernel latency throughput don't can't it's we're they've I'm you'll he'd IT'S DON'T WE'LL").split()
FR = "élève café naïve déjà vu garçon où être forêt hôtel très noël coïncidence Œuvre façade mañana jalapeño".split()
DE = "Straße Größe übermäßig Äpfel Öl Fußgängerübergänge schön Mädchen".split()
RU = "привет мир как дела хорошо спасибо пожалуйста язык модель токенизатор Москва".split()
EL = "γειά σου κόσμε αλφάβητο λόγος Ωμέγα".split()
AR = "مرحبا بالعالم اللغة العربية نموذج".split()
HI = "नमस्ते दुनिया हिन्दी भाषा मॉडल क्षत्रिय".split()
TH = "สวัสดีครับ ภาษาไทย".split()
JA = "こんにちは 世界 日本語 の テキスト カタカナ ひらがな 東京 トークナイザー".split()
KO = "안녕하세요 세계 한국어 토크나이저 모델".split()
ZH = "你好 世界 中文 分词器 模型 语言 的 是 我们 今天 天气 很好 北京 上海 编程 人工智能".split()
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵", "🧑🏿‍💻", "✨", "🔥", "1️⃣", "👋🏻"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (size_t i = 0; i < n; i++) a[i] += b[i];",
    "const x = await fetch(`/api/v1/items?id=${id}`);",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "    if err != nil {\n        return nil, err\n    }\n",
    "x = [1, 2, 3]; y = {'a': 1, \"b\": 2.5e-3}",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "let mut v: Vec<u8> = Vec::with_capacity(1024);",
    "<div class=\"main\">&nbsp;Hello&amp;bye</div>",
    "$ ls -la | grep '.txt' > out.log 2>&1",
    "    \"\"\"Docstring with 'quotes' and \\\\ backslashes.\"\"\"",
]
POOLS = [EN] * 6 + [FR, DE, RU, EL, AR, HI, TH, JA, KO, ZH, ZH]


def rand_cjk(rng, n):
    return "".join(chr(rng.randint(0x4E00, 0x57FF)) for _ in range(n))


def rand_hangul(rng, n):
    return "".join(chr(rng.randint(0xAC00, 0xAD00)) for _ in range(n))


def sentence(rng):
    pool = rng.choice(POOLS)
    words = [rng.choice(pool) for _ in range(rng.randint(3, 14))]
    sep = "" if pool in (ZH, JA) and rng.random() < 0.5 else " "
    s = sep.join(words)
    r = rng.random()
    if r < 0.1:
        s += " " + str(rng.randint(0, 10 ** rng.randint(1, 9)))
    elif r < 0.15:
        s += rng.choice(EMOJI)
    elif r < 0.2:
        s = rand_cjk(rng, rng.randint(2, 12))
    elif r < 0.23:
        s = rand_hangul(rng, rng.randint(2, 8))
    elif r < 0.3:
        s = rng.choice(CODE)
    return s + rng.choice([".", "!", "?", ",", "", "\n", "\n\n", ";", ":"])


def corpus(seed, n):
    rng = random.Random(seed)
    return ["".join(sentence(rng) + " " for _ in range(rng.randint(1, 6))) for _ in range(n)]


def build_tokenizer(vocab_size, seed):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False, min_frequency=2)
    tok.train_from_iterator(corpus(seed, 30000), trainer)
    n_bpe = tok.get_vocab_size()
    for content, special in ADDED:  # one at a time so ids follow docs/model.md §5 order
        at = AddedToken(content, special=special, normalized=False)
        (tok.add_special_tokens if special else tok.add_tokens)([at])
    assert tok.token_to_id("<|endoftext|>") == n_bpe and tok.token_to_id("<|audio_pad|>") == n_bpe + 32
    return tok


def tokenizer_json(tok, legacy_merges):
    j = json.loads(tok.to_str())
    if legacy_merges:
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    return j


# ----------------------------------------------------------------------------------------------------------
# Test strings.

def handmade():
    s = [
        "", " ", "  ", "\n", "\r\n", "\t", "a", "Hello, world!", "hello world", " leading space", "trailing space ",
        "multiple   spaces   here", "tabs\tand\ttabs", "line1\nline2\r\nline3\rline4", "\n\n\n", "   \n   \n",
        "x  \n  y", "end with spaces   ", "   ", "a\u00a0b", "a\u2003b\u3000c", "zero\u200bwidth", "\ufeffbom",
        "nel\u0085x", "\u2028\u2029", "\x0b\x0c", "\x00nul\x01\x1f", "\x7f",
        "I'm you're he's she'll we'd they've it't", "I'M YOU'RE HE'S SHE'LL WE'D THEY'VE", "'s 'S 'll 'LL 'Re",
        "don't DON'T Don'T", "rock'n'roll", "''", "'", "’s curly", "o'clock", "the dog's bone's",
        "0", "12", "123456789", "3.14159", "1,000,000", "v1.2.3", "2024-01-15T10:30:00Z", "-42", "1e-10", "0x7fff",
        "١٢٣ Arabic digits", "४२ Devanagari digits", "Ⅻ roman", "½ ¾ ²", "①②③",
        "café", "cafe\u0301", "e\u0301\u0301", "\u0301lone combining", "a\u0308o\u0308u\u0308", "Å Å Å",
        "한국어", "\u1100\u1161\u11a8", "ﬁ ligature", "Ω Ω", "ḱṷ", "q\u0307\u0323", "\u0915\u094d\u0937",
        "你好，世界！", "東京タワー", "ｶﾀｶﾅ", "ＡＢＣ１２３", "中文English混合text", "日本語の文章です。",
        "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇺🇸", "❤️🔥", "1️⃣2️⃣", "🧑🏿‍💻 codes", "a😀b", "😀😀😀",
        "<|im_start|>user\nhi<|im_end|>\n", "text<|endoftext|>more", "<|im_start|><|im_end|>",
        "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n<function=f>\n</function>\n</tool_call>",
        "<|im_start", "im_start|>", "<|im_end|x", "<<|im_end|>>", "<|im_end|><|im_end|>", " <|im_end|> ",
        "<|endoftext|>", "<think></think>", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
        "<|vision_start|><|image_pad|><|vision_end|>", "<tts_text_bos_single>x", "</tool_response>",
        "Ġ", "Ċ", "ĠĠ", "âĢ", "\\n literal", "\\u0041", "{\"json\": [1, 2, {\"k\": null}]}",
        "!!!???...", "---===+++", "@#$%^&*()", "a.b,c;d:e", "(parens)", "[brackets]", "{braces}",
        "path/to/file.txt", "https://example.com/a?b=c&d=e#f", "user@example.com", "C:\\Windows\\System32",
        "snake_case camelCase PascalCase kebab-case SCREAMING_CASE", "__init__", "x86_64", "a_1_b_2",
        "...\n\n...", ".\n", "!\r\n\r\n", "?\n \n", "  \t  \n\t ", "word\n\n\n\nword",
    ]
    s += CODE
    return s


def generated(rng, n):
    out = []
    pools = POOLS + [EMOJI, CODE]
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:
            out.append("".join(sentence(rng) + rng.choice([" ", "", "\n", "  "]) for _ in range(rng.randint(1, 4))))
        elif kind < 0.7:
            pool = rng.choice(pools)
            out.append(rng.choice(["", " ", "\t"]).join(rng.choice(pool) for _ in range(rng.randint(1, 10))))
        elif kind < 0.8:
            # random code points from mixed scripts, including marks and whitespace
            ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
                      (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
                      (0xAC00, 0xD7A3), (0x1F300, 0x1F6FF), (0x2000, 0x206F), (0xFF00, 0xFFEF), (0x9, 0xD)]
            cps = []
            for _ in range(rng.randint(1, 30)):
                lo, hi = rng.choice(ranges)
                cps.append(chr(rng.randint(lo, hi)))
            out.append("".join(cps))
        elif kind < 0.9:
            w = rng.choice(EN)
            out.append(rng.choice([w.upper(), w.capitalize(), w]) + rng.choice(["'S", "'s", "'LL", "'ll", "'D", "'Ve"])
                       + " " + rng.choice(["123", "4 5 6", "7.89", "0000", "１２"]) + rng.choice([" ", "  ", "\n"]))
        else:
            t = sentence(rng)
            special = rng.choice(ADDED)[0]
            cut = rng.randint(0, len(t))
            out.append(t[:cut] + special + t[cut:])
    return out


def nfd_variants(strings, rng, n):
    picks = [s for s in strings if any(ord(c) > 0x7F for c in s)]
    return [unicodedata.normalize(rng.choice(["NFD", "NFKD", "NFKC"]), rng.choice(picks)) for _ in range(n)]


def invalid_utf8():
    bad = [b"\x80", b"\xff", b"abc\xc3", b"\xc3\x28", b"\xe2\x82", b"\xe2\x28\xa1", b"\xf0\x9f\x98", b"\xed\xa0\x80",
           b"\xc0\xaf", b"\xf5\x80\x80\x80", b"ok \xfe ok", b"\xf8\x88\x80\x80\x80", b"hello\xe4\xbd"]
    return [b.hex() for b in bad]


def decode_cases(tok, rng, n):
    V = tok.get_vocab_size()
    cases = []
    for _ in range(n):
        ids = [rng.randrange(V) for _ in range(rng.randint(1, 12))]
        cases.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
    return cases


# ----------------------------------------------------------------------------------------------------------
# Chat-template cases.

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city. Unicode: 東京, café.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "run_code", "description": "Run a snippet \"as is\"\twith\\escapes\n",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"},
                                                        "timeout": {"type": "number"}}}}},
]


def chat_conversations():
    tc = lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}}
    convs = {
        "single_user": [{"role": "user", "content": "Hello!"}],
        "system_user": [{"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "What is 2+2?"}],
        "whitespace_trim": [{"role": "system", "content": "  \n sys with spaces \n\n"},
                            {"role": "user", "content": "\n\t question?  \u3000"}],
        "multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                       {"role": "user", "content": "Tell me a joke."}],
        "past_reasoning": [
            {"role": "user", "content": "First question"},
            {"role": "assistant", "reasoning_content": "old trace\n", "content": "Old answer"},
            {"role": "user", "content": "Second question"},
            {"role": "assistant", "reasoning_content": "  new trace  ", "content": "New answer"}],
        "think_in_content": [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "<think>\nI think in content\n</think>\n\nVisible 1"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "content": "<think>\n\nsecond\n\n</think>\n\n\nVisible 2"}],
        "empty_system": [{"role": "system", "content": ""}, {"role": "user", "content": "x"}],
        "tools_basic": [{"role": "user", "content": "Weather in Paris?"}],
        "tools_with_system": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}],
        "tools_empty_system": [{"role": "system", "content": "   "}, {"role": "user", "content": "Weather?"}],
        "tool_call_flow": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What's the weather in Tokyo and Paris?"},
            {"role": "assistant", "content": "Let me check.", "reasoning_content": "Need two calls.",
             "tool_calls": [tc("get_weather", {"city": "Tokyo", "unit": "celsius", "days": 3}),
                            tc("get_weather", {"city": "Paris"})]},
            {"role": "tool", "content": "{\"temp\": 21}"},
            {"role": "tool", "content": "{\"temp\": 15}\n"},
            {"role": "assistant", "content": "Tokyo 21°C, Paris 15°C."}],
        "tool_call_no_content": [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": "",
             "tool_calls": [tc("run_code", {"code": "print('hi')\nprint(1)", "timeout": 2.5,
                                            "flags": {"a": [1, "x", None, True]}, "list": ["a", "ü"],
                                            "on": True, "off": False, "nothing": None, "n": 7})]},
            {"role": "tool", "content": "hi\n1"}],
        "tool_then_user": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "", "tool_calls": [tc("get_weather", {"city": "Oslo"})]},
            {"role": "tool", "content": "cold"},
            {"role": "user", "content": "thanks, and Rome?"},
            {"role": "assistant", "reasoning_content": "r", "content": "",
             "tool_calls": [tc("get_weather", {"city": "Rome"})]},
            {"role": "tool", "content": "warm"}],
        "user_tool_response_text": [
            {"role": "user", "content": "real query"},
            {"role": "assistant", "reasoning_content": "think", "content": "calling"},
            {"role": "user", "content": "<tool_response>\nresult\n</tool_response>"}],
        "unicode_content": [{"role": "user", "content": "日本語 😀 👨‍👩‍👧 café\u0301 <|im_end|> inside"}],
        "assistant_last": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}],
        "function_flat_tool_call": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "ok", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Lima"}}]},
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."}],
    }
    return convs


def chat_cases(templates):
    from transformers import PreTrainedTokenizerFast
    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    cases = []
    convs = chat_conversations()
    for name, msgs in convs.items():
        tools = TOOLS if name.startswith("tool") or "tool_calls" in json.dumps(msgs) else None
        for dialect, tmpl in templates.items():
            for gen in (True, False):
                for think in (True, False, None):
                    preserve_opts = (None, True) if dialect == "qwen3.6" else (None,)
                    for preserve in preserve_opts:
                        kw = {}
                        if think is not None:
                            kw["enable_thinking"] = think
                        if preserve is not None:
                            kw["preserve_thinking"] = preserve
                        text = hf.apply_chat_template(msgs, tools=tools, chat_template=tmpl, tokenize=False,
                                                      add_generation_prompt=gen, **kw)
                        cases.append({"name": name, "dialect": dialect, "messages": msgs, "tools": tools,
                                      "add_generation_prompt": gen, "enable_thinking": think,
                                      "preserve_thinking": preserve, "expected": text})
    # conversations the template refuses (C must refuse them too)
    errors = {"no_user": [{"role": "system", "content": "s"}],
              "late_system": [{"role": "user", "content": "u"}, {"role": "system", "content": "s"}],
              "bad_role": [{"role": "user", "content": "u"}, {"role": "robot", "content": "r"}],
              "only_tool_responses": [{"role": "user", "content": "<tool_response>x</tool_response>"}]}
    err_cases = []
    for name, msgs in errors.items():
        try:
            hf.apply_chat_template(msgs, chat_template=templates["qwen3.5"], tokenize=False)
            raise SystemExit(f"chat error case {name} rendered without error")
        except Exception as e:  # jinja2 TemplateError
            err_cases.append({"name": name, "messages": msgs, "hf_error": str(e)})
    return cases, err_cases


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def big_tokenizer(out_path):
    """A synthetic tokenizer with the Qwen3.5 sizes (248044 BPE tokens, ~247K merges) for load timing."""
    tok = build_tokenizer(2000, 1)
    j = json.loads(tok.to_str())
    vocab = dict(j["model"]["vocab"])
    merges = [tuple(m) for m in j["model"]["merges"]]
    rng = random.Random(7)
    keys = list(vocab)
    while len(vocab) < 248044:  # random merges of existing tokens (valid BPE: both parts in vocab)
        a, b = rng.choice(keys), rng.choice(keys)
        if a + b in vocab or len(a) + len(b) > 24:
            continue
        vocab[a + b] = len(vocab)
        keys.append(a + b)
        merges.append((a, b))
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = [list(m) for m in merges]
    for i, t in enumerate(j["added_tokens"]):
        t["id"] = 248044 + i
    write_json(out_path, j)
    print(f"{out_path}: {len(vocab)} tokens, {len(merges)} merges, {os.path.getsize(out_path)} bytes")


def bench_text(out_path):
    rng = random.Random(99)
    parts, size = [], 0
    while size < 10 * 1024 * 1024:
        s = sentence(rng) + rng.choice([" ", "\n", "  "])
        parts.append(s)
        size += len(s.encode())
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("".join(parts))
    print(f"{out_path}: {size} bytes")


def bench_hf(tok_path, text_path):
    """HF `tokenizers` on one thread: Tokenizer.encode of the whole text (no batching, so no rayon)."""
    import time
    os.environ["RAYON_NUM_THREADS"] = "1"
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(tok_path)
    load = time.perf_counter() - t0
    text = open(text_path, encoding="utf-8").read()
    mb = len(text.encode()) / 1e6
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        n = len(tok.encode(text).ids)
        best = min(best, time.perf_counter() - t0)
    print(f"HF tokenizers {__import__('tokenizers').__version__}: load {load * 1e3:.1f} ms; encode {mb:.2f} MB "
          f"-> {n} ids in {best * 1e3:.1f} ms = {mb / best:.2f} MB/s (best of 3)")
    # the same text as ~10 KB documents encoded one after another (HF is slower on one huge string)
    docs, at = [], 0
    while at < len(text):
        end = text.find("\n", at + 10000)
        end = len(text) if end < 0 else end + 1
        docs.append(text[at:end])
        at = end
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        n = sum(len(tok.encode(d).ids) for d in docs)
        best = min(best, time.perf_counter() - t0)
    print(f"HF tokenizers: {len(docs)} documents of ~10 KB one by one -> {n} ids in {best * 1e3:.1f} ms = "
          f"{mb / best:.2f} MB/s (best of 3)")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--big":
        return big_tokenizer(sys.argv[2])
    if len(sys.argv) == 3 and sys.argv[1] == "--bench-text":
        return bench_text(sys.argv[2])
    if len(sys.argv) == 4 and sys.argv[1] == "--bench-hf":
        return bench_hf(sys.argv[2], sys.argv[3])
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    toks = {"small": build_tokenizer(2000, 11), "large": build_tokenizer(8000, 12)}
    write_json(os.path.join(out, "tok-small.json"), tokenizer_json(toks["small"], legacy_merges=False))
    write_json(os.path.join(out, "tok-large.json"), tokenizer_json(toks["large"], legacy_merges=True))
    # tok-variant: the small one with the options Qwen does not use but tokenizer.json allows:
    # ignore_merges, an lstrip/rstrip added token and a normalized (matched after NFC) added token
    variant = build_tokenizer(2000, 11)
    variant.add_tokens([AddedToken("<pad>", lstrip=True, rstrip=True, normalized=False),
                        AddedToken("café", normalized=True)])
    vj = tokenizer_json(variant, legacy_merges=False)
    vj["model"]["ignore_merges"] = True
    write_json(os.path.join(out, "tok-variant.json"), vj)
    toks["variant"] = None
    for name in toks:  # the files as written are what the C side reads: reload to be sure they agree
        toks[name] = Tokenizer.from_file(os.path.join(out, f"tok-{name}.json"))

    rng = random.Random(5)
    strings = handmade()
    strings += generated(rng, 520)
    strings += nfd_variants(strings, rng, 40)
    big = "".join(sentence(rng) + " " for _ in range(4000))
    while len(big.encode()) < 100 * 1024:
        big += sentence(rng) + " "
    strings.append(big)
    strings.append(" " * 5000 + "x" + "\n" * 3000)  # long whitespace runs stress the BPE merge queue
    strings.append("ab" * 3000)
    strings += ["x <pad> y", "x  <pad>\n\ny", "<pad>", "a<pad>b", "un café noir", "cafe\u0301 au lait", "cafés",
                "CAFÉ", " café ", "caf\u00e9<pad>cafe\u0301"]
    cases = [{"text": s, "ids": {n: t.encode(s).ids for n, t in toks.items()}} for s in strings]
    enc = {"tokenizers_version": __import__("tokenizers").__version__, "cases": cases,
           "decode": {n: decode_cases(t, rng, 150) for n, t in toks.items()},
           "invalid_utf8_hex": invalid_utf8()}
    write_json(os.path.join(out, "encode_cases.json"), enc)

    here = os.path.dirname(os.path.abspath(out + "/x"))
    templates = {}
    for dialect in ("qwen3.5", "qwen3.6"):
        with open(os.path.join(here, f"{dialect}_chat_template.jinja"), encoding="utf-8") as f:
            templates[dialect] = f.read()
    chats, chat_errors = chat_cases(templates)
    import transformers
    write_json(os.path.join(out, "chat_cases.json"), {"transformers_version": transformers.__version__,
                                                      "tools": TOOLS, "cases": chats, "errors": chat_errors})
    print(f"{len(cases)} encode cases, {len(chats)} chat cases, {len(chat_errors)} chat error cases")


if __name__ == "__main__":
    main()
