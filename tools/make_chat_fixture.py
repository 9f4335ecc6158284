#!/usr/bin/env python3
"""Render reference chat prompts with the real Qwen3 Jinja template (from shared/tokenizers/qwen3)
so tests/test_chat.c can check flint's C renderer against it.

usage: python3 tools/make_chat_fixture.py [--shared ../shared] [--out tests/fixtures/chat/qwen3.json]
Needs jinja2 (as transformers uses it)."""
import argparse
import json
import os

import jinja2

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"},
     {"role": "user", "content": "Tell me a joke.\n"}],
    [{"role": "user", "content": "Q1"},
     {"role": "assistant", "content": "<think>\nlet me think\n</think>\n\nA1"},
     {"role": "user", "content": "Q2"}],
    [{"role": "user", "content": "Q1"},
     {"role": "assistant", "content": "<think>\nreasoning here\n</think>\n\nfinal answer"}],
    [{"role": "user", "content": "weather?"},
     {"role": "assistant", "content": "calling a tool"},
     {"role": "tool", "content": "{\"temp\": 20}"},
     {"role": "tool", "content": "{\"rain\": false}"},
     {"role": "assistant", "content": "<think>ok</think>It is 20 degrees."}],
    [{"role": "system", "content": "sys"}, {"role": "user", "content": "a"},
     {"role": "system", "content": "late system"}, {"role": "user", "content": "  spaced  "}],
    [{"role": "user", "content": "中文 emoji 🎉 and\ttabs"}],
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "chat",
                                                  "qwen3.json"))
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.shared, "tokenizers", "qwen3", "tokenizer_config.json")))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(cfg["chat_template"])
    cases = []
    for msgs in CONVERSATIONS:
        for gen, think in ((True, True), (True, False), (False, True)):
            kw = {"messages": msgs, "add_generation_prompt": gen}
            if not think:
                kw["enable_thinking"] = False
            cases.append({"messages": msgs, "add_generation_prompt": gen, "enable_thinking": think,
                          "text": tmpl.render(**kw)})
    with open(a.out, "w") as f:
        json.dump({"template": "qwen3", "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {a.out}")


if __name__ == "__main__":
    main()
