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
    [{"role": "user", "content": "Q"},
     {"role": "assistant", "content": "A", "reasoning_content": "\nthinking it over\n"}],
]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city, \"now\".",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "City name, e.g. Zürich"},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}},
]

TOOL_CONVERSATIONS = [
    [{"role": "user", "content": "Weather in Paris?"}],
    [{"role": "system", "content": "You are a helpful agent."}, {"role": "user", "content": "Weather in Paris?"}],
    [{"role": "user", "content": "Weather in Paris and Rome?"},
     {"role": "assistant", "content": "",
      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                     {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}}]},
     {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "{\"temp\": 25}"}],
    [{"role": "user", "content": "Weather?"},
     {"role": "assistant", "content": "Let me check.",
      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
     {"role": "tool", "content": "sunny"},
     {"role": "assistant", "content": "<think>\nok\n</think>\n\nIt is sunny."},
     {"role": "user", "content": "thanks"}],
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "chat",
                                                  "qwen3.json"))
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.shared, "tokenizers", "qwen3", "tokenizer_config.json")))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    # transformers' |tojson: json.dumps with ensure_ascii=False and default separators
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    tmpl = env.from_string(cfg["chat_template"])
    cases = []
    for tools, convs in ((None, CONVERSATIONS), (TOOLS, TOOL_CONVERSATIONS)):
        for msgs in convs:
            for gen, think in ((True, True), (True, False), (False, True)):
                kw = {"messages": msgs, "add_generation_prompt": gen}
                if tools:
                    kw["tools"] = tools
                if not think:
                    kw["enable_thinking"] = False
                case = {"messages": msgs, "add_generation_prompt": gen, "enable_thinking": think,
                        "text": tmpl.render(**kw)}
                if tools:
                    case["tools"] = tools
                cases.append(case)
    with open(a.out, "w") as f:
        json.dump({"template": "qwen3", "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} cases to {a.out}")


if __name__ == "__main__":
    main()
