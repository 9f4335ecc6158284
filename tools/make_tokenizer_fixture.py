#!/usr/bin/env python3
"""Generate tests/fixtures/tokenizer/: reference token ids and decodes from Hugging Face `tokenizers`.

Why: flint's tokenizer must equal HF `tokenizers` token for token, and CI has no `tokenizers`
package, so the reference ids are committed. This script is the only place they come from.

What it writes (plain text; it must stay under 4 MB, hence the compact id strings):
  texts.jsonl            one {"set": NAME, "text": STR} per line (or "hex": the UTF-8 bytes in hex,
                         for texts cJSON cannot carry, i.e. with NUL); >= 2,000 real texts drawn
                         with a fixed seed from every prompt set in shared/data, each capped at
                         CAP characters (cut on a code point), then hand-written edge cases.
  NAME.jsonl             per tokenizer, one line per text it covers:
                           "ids"  HF encode(add_special_tokens=False), see ids64()
                           "t"    the text's line in texts.jsonl when it is not this line's number
                           "sp"   encode(add_special_tokens=True) as {"pre": [...], "post": [...]}
                                  around ids (or {"full": [...]}), first SP_FIRST lines, when it
                                  differs from ids
                           "dec"  HF decode(ids, skip_special_tokens=False) when it differs from
                                  the text; "dsk" the skip_special_tokens=True decode when it
                                  differs from dec. Recorded for the first manifest
                                  "decoded_texts" lines. Strings holding NUL are written as
                                  "dec_hex" / "dsk_hex" (UTF-8 in hex) instead.
  NAME.decode.jsonl      decode-only cases {"ids": [...], "dec", "dsk"}: random and hand-made id
                         sequences (partial UTF-8, byte-fallback runs, special tokens).
  manifest.json          the tokenizers, where their tokenizer.json lives ("@shared/..." under
                         shared/, "@models/..." under the repository's models/, "@gpt2" built by tools/gpt2_to_tokenizer_json.py at build
                         time, else relative to this folder), vocab sizes, id probes, specials.
  llama2c*/, gpt2mini*/  small tokenizer.json files built here (llama2.c tok512.bin in the legacy
                         and Metaspace SentencePiece forms; a truncated GPT-2 with added tokens of
                         every flag), committed because they are tiny.

With --unicode-table core/tokenizer_unicode.c it writes, instead, the tables of code points where
HF's Unicode data differs from PCRE2's and utf8proc's (see write_unicode_table).

Requires: pip `tokenizers`. Deterministic: rerunning gives the same files.
usage: make_tokenizer_fixture.py [--shared DIR] [--out DIR] | --unicode-table C_FILE
"""
import argparse
import gzip
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

SEED = 20240917
CAP = 2000            # characters per real text
SUBSET_EVERY = 20     # variant tokenizers see every 20th real text plus all edge cases
DEC_VARIANT = 120     # variant tokenizers record HF decodes of their first 120 texts only
SP_FIRST = 300        # add_special_tokens=True ids are recorded for the first 300 texts

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


# ----------------------------------------------------------------------------------------------
# Real texts


def jsonl(path):
    with open(path, encoding="utf-8") as f:
        # split on '\n' only: arena-hard-v2.jsonl has U+2028 inside strings (see its PROVENANCE.md)
        return [json.loads(line) for line in f.read().split("\n") if line.strip()]


def turns(recs):
    return [t for r in recs for t in r.get("turns", [])]


def pools(data):
    """Every candidate text of each prompt set, in file order."""
    p = {}
    g = os.path.join(data, "gsm8k")
    p["gsm8k"] = [x for name in ("test.jsonl", "train.jsonl") for r in jsonl(os.path.join(g, name))
                  for x in (r["question"], r["answer"])]
    m = os.path.join(data, "mt_bench")
    p["mt_bench"] = turns(jsonl(os.path.join(m, "question.jsonl"))) + [
        t for r in jsonl(os.path.join(m, "reference_answer_gpt-4.jsonl")) for t in r["choices"][0]["turns"]]
    with gzip.open(os.path.join(data, "humaneval", "HumanEval.jsonl.gz"), "rt", encoding="utf-8") as f:
        he = [json.loads(line) for line in f.read().split("\n") if line.strip()]
    p["humaneval"] = [x for r in he for x in (r["prompt"], r["canonical_solution"], r["test"],
                                              r["prompt"] + r["canonical_solution"])]
    with open(os.path.join(data, "mbpp", "sanitized-mbpp.json"), encoding="utf-8") as f:
        mb = json.load(f)
    p["mbpp"] = [x for r in mb for x in (r["prompt"], r["code"], "\n".join(r["test_list"]))]
    p["spec_bench"] = turns(jsonl(os.path.join(data, "spec_bench", "question.jsonl")))
    sg = []
    for name in sorted(os.listdir(os.path.join(data, "sharegpt"))):
        if name.endswith(".json"):
            with open(os.path.join(data, "sharegpt", name), encoding="utf-8") as f:
                sg += [c["value"] for r in json.load(f) for c in r["conversations"]]
    p["sharegpt"] = sg
    de = os.path.join(data, "deepspec_eval")
    p["deepspec_eval"] = [t for name in sorted(os.listdir(de)) if name.endswith(".jsonl")
                          for t in turns(jsonl(os.path.join(de, name)))]
    eb = os.path.join(data, "eagle_bench")
    ebt = []
    for name in sorted(os.listdir(eb)):
        q = os.path.join(eb, name, "question.jsonl")
        if os.path.exists(q):
            for r in jsonl(q):
                ebt += r.get("turns", [])
                ref = r.get("reference")
                if isinstance(ref, list):
                    ebt += [x for x in ref if isinstance(x, str)]
                elif isinstance(ref, str):
                    ebt.append(ref)
    p["eagle_bench"] = ebt
    return p


# 2,000 texts in all; the long-text sets (spec_bench summaries, sharegpt) get fewer so the committed
# fixture stays under 4 MB with every tokenizer encoding every text.
QUOTA = {"gsm8k": 440, "mt_bench": 160, "humaneval": 150, "mbpp": 340, "spec_bench": 150,
         "sharegpt": 340, "deepspec_eval": 290, "eagle_bench": 130}


def valid_utf8(s):
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:  # lone surrogates from \ud8xx escapes
        return False


def real_texts(data):
    out, seen = [], set()
    for name, pool in pools(data).items():
        rng = random.Random(f"{SEED}:{name}")
        order = list(range(len(pool)))
        rng.shuffle(order)
        taken = 0
        for i in order:
            if taken == QUOTA[name]:
                break
            t = pool[i]
            if not isinstance(t, str) or not valid_utf8(t):
                continue
            t = t[:CAP]
            if t in seen:
                continue
            seen.add(t)
            out.append((name, t))
            taken += 1
        print(f"  {name}: {taken} texts from a pool of {len(pool)}", file=sys.stderr)
    return out


# ----------------------------------------------------------------------------------------------
# Edge cases: every class of input the tokenizers treat specially


def edge_texts():
    e = [
        "", " ", "  ", "   ", "\t", "\n", "\r", "\r\n", "\n\n", "\n\n\n\n\n\n\n\n", " \n ", "\t\t\t",
        "a\r\nb\r\n\r\nc", "hello     world", "   leading spaces", "trailing spaces   ", " \t \n \r\n x",
        "line1\nline2\n\nline4\n\n\n", "\n\n  \n\t\n", "word\n", "\nword", "a \nb", "a\n b", "a  \n\n  b",
        "tab\tseparated\tvalues\n1\t2\t3", "    def f(x):\n        return x\n", "x" + " " * 40 + "y",
        # CJK and other scripts
        "你好，世界！今天天气很好。", "こんにちは世界、カタカナとひらがな。", "안녕하세요 세계", "中文English混合text",
        "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया, क्षत्रिय",
        "สวัสดีชาวโลก", "Xin chào thế giới", "Straße, Öl, İstanbul, ıi, ǅemal", "Ελληνικά ΣΊΣΥΦΟΣ",
        # emoji, ZWJ sequences, skin tones, flags, variation selectors
        "👍", "👍🏽", "👍🏿 ok", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "❤︎", "🇺🇸🇯🇵🇩🇪", "🧑🏽‍💻 coding", "I ❤️ 🍕!!",
        "😀😃😄😁😆😅😂🤣", "🫠🫡🫶", "👩‍❤️‍💋‍👨", "#️⃣ 1️⃣ 🔟",
        # combining marks and forms NFC changes
        "e\u0301", "cafe\u0301 re\u0301sume\u0301", "A\u030a \u212b \u00c5", "\u1100\u1161\u11a8 \uac01",
        "d\u0307\u0323", "d\u0323\u0307", "\u0301 starts with a combining mark", "n\u0303o\u0308",
        "\u00e9\u0301", "ﬁ ﬂ ﬃ", "\u2126 \u03a9", "\u0344", "\u0958\u0959", "\u1e9b\u0323",
        "Ａｂｃ１２３", "½ ² ⅻ ① ٣ ۴ ߅ 𝟘𝟙", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕒𝕓𝕔",
        # numbers
        "12345678901234567890", "3.14159265358979323846", "1,000,000.00", "0x7fffffff 0b1010 1e-9",
        "2024-01-15T10:30:00Z", "The year 1999 and 2000.", "-42 +17 ±3", "$1.5M €20 £3 ¥400",
        "١٢٣٤٥ ١٢٣", "123abc456def", "a1b2c3", "9" * 300,
        # code
        "int main(void) {\n\treturn 0;\n}\n", "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }",
        "x = [i**2 for i in range(10) if i % 2 == 0]  # squares", "SELECT * FROM users WHERE id = 42;",
        "<div class=\"a\">Hello</div>", "fn main() { println!(\"{}\", 1 << 3); }", "a&&b||!c", "x->y::z",
        "```python\nprint('hi')\n```", "{\"key\": [1, 2, {\"n\": null}]}", "$ ls -la | grep '^d' > out.txt",
        # special tokens appearing inside text
        "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>", "<|endoftext|><|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext",
        "<|im_start|", "<|im_end|>x<|im_end|>", "<think>\n\n</think>\n\nAnswer", "<tool_call>{}</tool_call>",
        "<s>hello</s>", " <s> x", "</s>", "<unk>", "<s><s>", "text<s>", "<0x41><0x0A>", "▁hello▁world",
        "<|fim_prefix|>def<|fim_suffix|>", "<<|endoftext|>>", "<|<|im_start|>|>",
        # invalid-looking and unusual code points
        "\ufffd", "\ufffd\ufffd x", "\x01\x02\x1f\x7f", "\u200b zero\u200bwidth", "\ufeffBOM", "a\u180eb",
        "a \u180e b", "\u180e", "x\u0085y \u0085 z", "\u00a0nbsp\u00a0", "ideographic\u3000space",
        "line\u2028sep\u2029para", "\ue000\uf8ff", "\uffff\ufffe", "\U0010fffd", "\U0001f600\U0001f4a9",
        "\u2060\u2061\u2062", "a\u034fb", "\u061c\u200e\u200f", "\U000e0041\U000e0042", "ǈ ǋ ǲ",
        "\U00011f00\U00011f04 \U00031350 \U0001fae8 \u0c5d", "\u0e33 \u0ec0", "Ⅻ ⅿ ↀ", "\u16ee\u16ef",
        # apostrophes and case-folding corners of (?i:'s|'t|...)
        "it's I'm we'll they're you've he'd can't", "IT'S I'M WE'LL THEY'RE", "We'Ll 'S 'D", "'s", "'",
        "'ſ 'ſx it'ſ", "don’t won’t", "''quoted''", "rock'n'roll", "'K' 'k' 'k", "O'Neil's",
        # long words
        "supercalifragilisticexpialidocious" * 40, "x" * 3000, "🙂" * 400, "1" * 1000, " " * 1000,
        "\n" * 500, "ab" * 1500, "a" + "\u0301" * 200, "Donaudampfschifffahrtsgesellschaftskapitän" * 20,
        "http://example.com/" + "path/" * 100, "-" * 500 + "=" * 500, "." * 777,
    ]
    e.append("\x00")            # only carried by the "hex" form
    e.append("a\x00b\x00\x00c")
    return e


# ----------------------------------------------------------------------------------------------
# Tokenizers


def read_tok512(path):
    with open(path, "rb") as f:
        b = f.read()
    (_max_len,) = struct.unpack_from("<i", b, 0)
    o, out = 4, []
    while o < len(b):
        score, n = struct.unpack_from("<fi", b, o)
        o += 8
        out.append((b[o:o + n], score))
        o += n
    return out


def llama2c_vocab(tok512):
    """tok512.bin -> SentencePiece-style vocab with scores (llama2.c stores U+2581 as ' ')."""
    vocab, scores = {}, {}
    for i, (piece, score) in enumerate(tok512):
        s = piece.decode("utf-8")
        if i == 1:
            s = "<s>"
        elif i == 2:
            s = "</s>"
        elif i > 2:
            s = s.replace(" ", "\u2581")
        vocab[s] = i
        scores[s] = score
    return vocab, scores


def sp_merges(vocab, scores):
    """Merges from scores, as transformers' SentencePieceExtractor does."""
    merges = []
    for piece, score in scores.items():
        if vocab[piece] < 259:  # <unk>, <s>, </s>, <0x..>
            continue
        local = []
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if vocab.get(left, 0) >= 259 and vocab.get(right, 0) >= 259:
                local.append((left, right, score))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges += local
    merges.sort(key=lambda x: x[2], reverse=True)
    return [(a, b) for a, b, _ in merges]


def sp_base(vocab, merges, byte_fallback=True, unk="<unk>", fuse_unk=True):
    t = Tokenizer(models.BPE(vocab, merges, unk_token=unk, fuse_unk=fuse_unk, byte_fallback=byte_fallback))
    t.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in ("<unk>", "<s>", "</s>")])
    return t


SP_LEGACY_DECODER = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)])


def make_llama2c(shared):
    vocab, scores = llama2c_vocab(read_tok512(os.path.join(shared, "models", "stories260K", "tok512.bin")))
    merges = sp_merges(vocab, scores)
    toks = {}

    # Legacy form, what transformers' LlamaConverter writes (and what `flint convert llama2c` targets).
    t = sp_base(vocab, merges)
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.decoder = SP_LEGACY_DECODER
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                     special_tokens=[("<s>", 1)])
    toks["llama2c"] = t

    # Metaspace form (legacy=False): prepend only at the start of the text, no split.
    t = sp_base(vocab, merges)
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    t.decoder = decoders.Sequence([decoders.ByteFallback(),
                                   decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    toks["llama2c_ms_first"] = t

    # Metaspace, prepend always, split into words; ByteFallback after Metaspace in the decoder.
    t = sp_base(vocab, merges)
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
                                   decoders.ByteFallback(), decoders.Fuse()])
    toks["llama2c_ms_always"] = t

    # No byte fallback: unknown characters become <unk>, fused.
    t = sp_base(vocab, merges, byte_fallback=False, fuse_unk=True)
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    toks["llama2c_unk"] = t

    # No byte fallback and no unk token: unknown characters vanish; unk not fused elsewhere.
    t = sp_base(vocab, merges, byte_fallback=False, unk=None, fuse_unk=False)
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    # Strip per token (no Fuse before it). HF's Strip panics when left+right exceed a token, so only left.
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Strip(" ", 1, 0)])
    toks["llama2c_nounk"] = t
    return toks


GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def make_gpt2mini(gpt2_json):
    """The first 1,000 GPT-2 merges (ids 0..1255 are exactly bytes + those merges), with an NFC
    normalizer, a prefix space, and added tokens exercising every AddedToken flag."""
    with open(gpt2_json, encoding="utf-8") as f:
        full = json.load(f)
    nm = 1000
    vocab = {k: v for k, v in full["model"]["vocab"].items() if v < 256 + nm}
    merges = [tuple(m.split(" ")) for m in full["model"]["merges"][:nm]]
    toks = {}

    def base():
        t = Tokenizer(models.BPE(vocab, merges))
        t.normalizer = normalizers.NFC()
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        t.decoder = decoders.ByteLevel()
        t.post_processor = processors.RobertaProcessing(("</s>", 256 + nm + 1), ("<s>", 256 + nm))
        t.add_special_tokens([AddedToken("<s>", normalized=False, special=True),
                              AddedToken("</s>", normalized=False, special=True)])
        t.add_special_tokens([
            AddedToken("<|endoftext|>", special=True, normalized=False),
            AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False),
            AddedToken("[SEP]", rstrip=True, special=True, normalized=False),
            AddedToken("<|a|>", special=True, normalized=False),
            AddedToken("<|a|><|b|>", special=True, normalized=False),
        ])
        t.add_tokens([
            AddedToken("flint", single_word=True, normalized=True),
            AddedToken("naïve", normalized=True),
            AddedToken("Ｈｉ", normalized=False),
            AddedToken("hello world", normalized=True),
            AddedToken("the", normalized=False),
            AddedToken("ab", normalized=False), AddedToken("abc", normalized=False),
            AddedToken(" pad ", lstrip=True, rstrip=True, normalized=False),
            AddedToken("数据", single_word=True, normalized=False),
        ])
        return t

    toks["gpt2mini"] = base()
    t = base()
    t.decoder = None  # no decoder: HF joins the token strings with spaces
    toks["gpt2mini_nodec"] = t

    # Qwen-style pre-tokenizer (Split on a regex, then ByteLevel without regex) on the same model,
    # with every Split behavior and ignore_merges (Llama-3 sets it)
    t = base()
    t.model = models.BPE(vocab, merges, ignore_merges=True)
    t.normalizer = None
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=Regex(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
            behavior="isolated", invert=False),
        pre_tokenizers.Split(pattern="-", behavior="merged_with_next"),
        pre_tokenizers.Split(pattern=".", behavior="merged_with_previous"),
        pre_tokenizers.Split(pattern="==", behavior="contiguous"),
        pre_tokenizers.Split(pattern="@", behavior="removed"),
        pre_tokenizers.Split(pattern=Regex(r"[A-Z]"), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    t.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                            processors.TemplateProcessing(single="<s> $A </s> <|endoftext|>",
                                                                          special_tokens=[("<s>", 256 + nm),
                                                                                          ("</s>", 256 + nm + 1),
                                                                                          ("<|endoftext|>",
                                                                                           256 + nm + 2)])])
    toks["gpt2mini_split"] = t
    return toks


def added_token_texts():
    return [
        "flint is a server; flinty is not; (flint) and _flint_ and flint_x and 2flint flint.",
        "naïve nai\u0308ve NAÏVE", "Ｈｉ there, Hi there, Ｈｉ", "hello world! hello  world helloworld",
        "the theme is there; other", "abcab abc ab a b c abcabc", "x <mask> y   <mask>z<mask>",
        "a [SEP]   b [SEP]\n\nc", "<|a|><|b|> <|a|> <|a|><|b <|b|>", "x pad y   pad   z pad",
        "数据 大数据 数据库 数据", "<s>flint</s>", "  <mask>", "[SEP]", "<|endoftext|>flint<|endoftext|>",
    ]


# ----------------------------------------------------------------------------------------------
# Output


ALPHA = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def ids64(ids):
    """Ids as one string (the fixture must stay under 4 MB, decimal lists would not): each id in
    base 32, most significant digit first; digits of the upper alphabet half ('g'..'_') mean
    "more digits follow", the last digit comes from the lower half ('A'..'f')."""
    out = []
    for i in ids:
        d = [ALPHA[i % 32]]
        i //= 32
        while i:
            d.append(ALPHA[32 + i % 32])
            i //= 32
        out.append("".join(reversed(d)))
    return "".join(out)


def put_str(rec, key, s):
    """A string field; with NUL inside (cJSON strings end at NUL) as KEY_hex, the UTF-8 in hex."""
    if "\x00" in s:
        rec[key + "_hex"] = s.encode("utf-8").hex()
    else:
        rec[key] = s


def wrap_or_full(sp, ids):
    """add_special_tokens=True ids as [prefix, suffix] around the plain ids when they are that."""
    for k in range(len(sp) - len(ids) + 1):
        if sp[k:k + len(ids)] == ids:
            return {"pre": sp[:k], "post": sp[k + len(ids):]}
    return {"full": sp}


def dumps(o):
    return json.dumps(o, ensure_ascii=False, separators=(",", ":"))


def text_record(setname, text):
    if "\x00" in text:
        return {"set": setname, "hex": text.encode("utf-8").hex()}
    return {"set": setname, "text": text}


def byte_level_ids(tok):
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return {b: tok.token_to_id(chr(m[b])) for b in range(256)}


def decode_cases(name, tok, rng):
    """Id sequences whose decode is interesting: random ids over the whole vocab (partial UTF-8 in
    byte-level vocabularies), byte-fallback runs valid and broken, special tokens anywhere."""
    n = tok.get_vocab_size(with_added_tokens=True)
    # get_vocab is a hash map: sort it, or the draws below change from run to run
    vocab = dict(sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: (kv[1], kv[0])))
    specials = [i for s, i in vocab.items() if s in ("<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>",
                                                     "<|im_end|>", "<mask>", "[SEP]", "<think>")]
    cases = [[]]
    for _ in range(50):
        cases.append([rng.randrange(n) for _ in range(rng.randint(1, 24))])
    frag = []
    for ch in "é你😀ä€":
        frag.append(list(ch.encode("utf-8")))
    if "<0x41>" in vocab:
        byte_id = {b: vocab["<0x%02X>" % b] for b in range(256)}
    else:
        byte_id = byte_level_ids(tok)
    words = [i for s, i in vocab.items() if len(s) > 2][:200]
    for _ in range(50):
        seq = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.3:
                seq += [byte_id[b] for b in rng.choice(frag)]
            elif r < 0.45:
                f = rng.choice(frag)
                seq += [byte_id[b] for b in f[:rng.randint(1, len(f) - 1)]]  # a broken character
            elif r < 0.55:
                seq.append(byte_id[rng.randrange(256)])
            elif r < 0.7 and specials:
                seq.append(rng.choice(specials))
            else:
                seq.append(rng.choice(words))
        cases.append(seq)
    out = []
    for ids in cases:
        rec = {"ids": ids}
        put_str(rec, "dec", tok.decode(ids, skip_special_tokens=False))
        put_str(rec, "dsk", tok.decode(ids, skip_special_tokens=True))
        out.append(rec)
    return out


# ----------------------------------------------------------------------------------------------
# core/tokenizer_unicode.c: where HF's Unicode data differs from the C libraries flint uses.
# tokenizers runs its regexes with Oniguruma (Unicode 16 in 0.23) while PCRE2 10.42 knows
# Unicode 14, and normalizes with tables older than utf8proc's. Both are measured here, from
# tokenizers itself.

CATS = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po",
        "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co"]


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def onig_categories():
    """General category of every code point as tokenizers' regex engine sees it."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    s = "".join(map(chr, cps))
    cat = ["Cn"] * 0x110000
    for name in CATS:
        kept = pre_tokenizers.Split(Regex(r"\p{%s}" % name), behavior="removed").pre_tokenize_str(s)
        matched = bytearray(b"\x01") * len(cps)
        for _, (a, b) in kept:  # offsets are in characters
            matched[a:b] = bytes(b - a)
        for i in range(len(cps)):
            if matched[i]:
                cat[cps[i]] = name
    return cat


def norm_unknown(cat):
    """Code points utf8proc normalizes but tokenizers' normalizers treat as unassigned (a starter
    with no decomposition): single characters, and between 'a' and U+0323 (reordering, blocking)."""
    import ctypes
    import ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc"))
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.free.argtypes = [ctypes.c_void_p]
    unknown = set()
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        fn = getattr(lib, "utf8proc_" + form)
        fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
        hf = getattr(normalizers, form)()
        cand = [c for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000 and cat[c] not in ("Cn", "Co")]
        for k in range(0, len(cand), 4000):
            chunk = cand[k:k + 4000]
            tests = [t for c in chunk for t in (chr(c), "a" + chr(c) + "\u0323")]
            joined = "\x01".join(tests)
            ptr = fn(joined.encode("utf-8"))
            mine = ctypes.string_at(ptr).decode("utf-8").split("\x01")
            libc.free(ptr)
            theirs = hf.normalize_str(joined).split("\x01")
            for j, c in enumerate(chunk):
                if mine[2 * j] != theirs[2 * j] or mine[2 * j + 1] != theirs[2 * j + 1]:
                    unknown.add(c)
    return unknown


def write_unicode_table(path):
    import tokenizers
    import unicodedata
    cat = onig_categories()
    extra = {}
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000 or cat[c] == "Cn":
            continue
        if unicodedata.category(chr(c)) != cat[c]:
            extra.setdefault(cat[c], set()).add(c)
    unknown = norm_unknown(cat)
    lines = [
        "/* GENERATED by tools/make_tokenizer_fixture.py --unicode-table; do not edit.",
        " * Why: HF tokenizers runs its regexes with Oniguruma, whose Unicode data is newer than PCRE2's,",
        " * and normalizes with tables older than utf8proc's; matching HF means using HF's view of each",
        f" * code point. Measured from tokenizers {tokenizers.__version__} against Unicode "
        f"{unicodedata.unidata_version} (PCRE2 10.42)",
        " * and utf8proc. See tokenizer_text.c for how the tables are used. */",
        '#include "tokenizer_internal.h"',
        "",
        "/* Code points whose general category in Oniguruma differs from Unicode "
        f"{unicodedata.unidata_version}: mostly characters",
        " * assigned since, which PCRE2 sees as Cn. */",
        "const flint_tok_cat_range flint_tok_onig_extra[] = {",
    ]
    rows = sorted((a, b, name) for name, cps in extra.items() for a, b in ranges(cps))
    for a, b, name in rows:
        lines.append(f'    {{0x{a:05X}, 0x{b:05X}, "{name}"}},')
    lines += ["};", f"const int flint_tok_onig_extra_n = {len(rows)};", "",
              "/* Code points utf8proc normalizes but tokenizers' NFC/NFD/NFKC/NFKD leave alone (a starter",
              " * without decomposition in HF's older tables). Sorted ranges. */",
              "const uint32_t flint_tok_norm_unknown[][2] = {"]
    nr = ranges(unknown)
    for k in range(0, len(nr), 4):
        lines.append("    " + " ".join(f"{{0x{a:05X}, 0x{b:05X}}}," for a, b in nr[k:k + 4]))
    lines += ["};", f"const int flint_tok_norm_unknown_n = {len(nr)};", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"{path}: {len(rows)} category ranges, {len(nr)} normalization ranges", file=sys.stderr)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(REPO), "shared"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "tokenizer"))
    ap.add_argument("--unicode-table", metavar="C_FILE",
                    help="write core/tokenizer_unicode.c (HF's Unicode view) instead of the fixture")
    a = ap.parse_args(argv[1:])
    if a.unicode_table:
        write_unicode_table(a.unicode_table)
        return 0
    os.makedirs(a.out, exist_ok=True)

    print("texts:", file=sys.stderr)
    real = real_texts(os.path.join(a.shared, "data"))
    edges = [("edge", t) for t in edge_texts()]
    added = [("added", t) for t in added_token_texts()]
    texts = real + edges + added
    n_real = len(real)
    assert n_real >= 2000, n_real
    with open(os.path.join(a.out, "texts.jsonl"), "w", encoding="utf-8") as f:
        for s, t in texts:
            f.write(dumps(text_record(s, t)) + "\n")

    tmp = tempfile.mkdtemp()
    gpt2_json = os.path.join(tmp, "gpt2.json")
    subprocess.run([sys.executable, os.path.join(HERE, "gpt2_to_tokenizer_json.py"),
                    os.path.join(a.shared, "tokenizers", "gpt2", "encoder.json"),
                    os.path.join(a.shared, "tokenizers", "gpt2", "vocab.bpe"), gpt2_json], check=True)

    # name -> (Tokenizer, where the C test finds tokenizer.json, which texts)
    everything = list(range(len(texts)))
    subset = [i for i in range(n_real) if i % SUBSET_EVERY == 0] + list(range(n_real, len(texts)))
    # gpt2mini_nodec encodes exactly as gpt2mini: only its decodes are recorded.
    tks = {
        "qwen3": (Tokenizer.from_file(os.path.join(a.shared, "tokenizers", "qwen3", "tokenizer.json")),
                  "@shared/tokenizers/qwen3/tokenizer.json", everything),
        "gpt2": (Tokenizer.from_file(gpt2_json), "@gpt2", everything),
        # the embedded model's own byte-level BPE (drafter/train/tok.py), read from models/
        "flint_tiny": (Tokenizer.from_file(os.path.join(REPO, "models", "flint-tiny", "tokenizer.json")),
                       "@models/flint-tiny/tokenizer.json", everything),
    }
    for name, t in make_llama2c(a.shared).items():
        tks[name] = (t, f"{name}/tokenizer.json", everything if name == "llama2c" else subset)
    for name, t in make_gpt2mini(gpt2_json).items():
        tks[name] = (t, f"{name}/tokenizer.json", [] if name == "gpt2mini_nodec" else subset)
    for name, (t, where, idx) in tks.items():
        if not where.startswith("@"):
            os.makedirs(os.path.join(a.out, name), exist_ok=True)
            t.save(os.path.join(a.out, where), pretty=False)
            tks[name] = (Tokenizer.from_file(os.path.join(a.out, where)), where, idx)
    main_toks = ("qwen3", "gpt2", "llama2c", "flint_tiny")

    # open_dir fixture: tokenizer_config.json in the object forms (bos as {"content": ...},
    # chat_template as the list of named templates)
    with open(os.path.join(a.out, "llama2c", "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False,
                   "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                                 "rstrip": False, "single_word": False},
                   "eos_token": "</s>", "unk_token": "<unk>",
                   "chat_template": [{"name": "tool_use", "template": "{{ tools }}"},
                                     {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"}]},
                  f, indent=2)

    manifest = []
    for name, (tok, where, idx) in tks.items():
        rng = random.Random(f"{SEED}:decode:{name}")
        main_tok = name in main_toks
        path = os.path.join(a.out, f"{name}.jsonl")
        if not idx:
            path = os.devnull
        with open(path, "w", encoding="utf-8") as f:
            for k, i in enumerate(idx):
                text = texts[i][1]
                ids = tok.encode(text, add_special_tokens=False).ids
                rec = {"ids": ids64(ids)}
                if i != k:  # the text index, when it is not the line number
                    rec["t"] = i
                sp = tok.encode(text, add_special_tokens=True).ids
                if sp != ids and k < SP_FIRST:
                    rec["sp"] = wrap_or_full(sp, ids)
                if main_tok or k < DEC_VARIANT:
                    # decodes: "dec" only when it differs from the text, "dsk" when it differs from dec
                    dec = tok.decode(ids, skip_special_tokens=False)
                    dsk = tok.decode(ids, skip_special_tokens=True)
                    if dec != text:
                        put_str(rec, "dec", dec)
                    if dsk != dec:
                        put_str(rec, "dsk", dsk)
                f.write(dumps(rec) + "\n")
        with open(os.path.join(a.out, f"{name}.decode.jsonl"), "w", encoding="utf-8") as f:
            for rec in decode_cases(name, tok, rng):
                f.write(dumps(rec) + "\n")
        vocab = tok.get_vocab(with_added_tokens=True)
        probe_strs = sorted(vocab)[:: max(1, len(vocab) // 40)]
        manifest.append({
            "name": name, "tokenizer": where, "texts": len(idx),
            "decoded_texts": len(idx) if main_tok else min(len(idx), DEC_VARIANT),
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "probes": {s: vocab[s] for s in probe_strs},
            "special": sorted(t.content for t in tok.get_added_tokens_decoder().values() if t.special),
        })
        print(f"  {name}: {len(idx)} texts", file=sys.stderr)
    with open(os.path.join(a.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump({"real_texts": n_real, "tokenizers": manifest}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
