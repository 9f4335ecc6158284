#!/usr/bin/env python3
"""End-to-end tests of `flint serve` over real sockets, one group per ctest entry:

  python3 tests/test_server.py FLINT_BINARY SOURCE_DIR GROUP [LOAD_SECONDS]

Every group converts models/stories260K (a real Llama-2 model with a llama2 chat template) into a
temp dir, makes a random DSpark drafter for it (acceptance ~0, but every speculative path runs),
starts servers on free ports and talks to them with the openai SDK, curl, http.client and raw
sockets. Groups:
  api         openai SDK chat + completions, streaming and not, usage + usage.speculative; curl -N
              SSE framing; /v1/models, /health, /metrics names; per-request speculative controls;
              stop strings, prompt forms, logprobs, prefix-cache cached_tokens; tools with the
              reasoning / tool-call parsers
  stream      a seeded streamed text equals the non-streamed text, alone and under concurrent load
              (beside unseeded requests whose draft lengths the scheduler chooses),
              also token by token
  robust      malformed JSON, wrong types, missing fields, unknown model 404, body over limit 413,
              context overflow 400, max_tokens <= 0 400, n > 1 400, invalid UTF-8 400, queue full
              429 (fast); the server stays up
  notready    503 from /health and /v1/* until the model is loaded
  auth        --api-key and FLINT_API_KEY: missing, wrong and right keys
  timeouts    stalled headers / body are closed; long generations are not; a client that does not
              read is cancelled without stalling the others; a stream waiting longer than the timeout
              for its first token is kept open by SSE keep-alive comments
  disconnect  32 streams cut mid-way free their slots and KV blocks within a second; a queued
              request whose client left is cancelled too
  shutdown    SIGTERM: no new connections, in-flight streams finish (or end with an SSE error after
              the grace period), exit 0
  default     no model argument: the embedded pair (flint-tiny + flint-tiny-dspark, K = 7) under the name
              flint-tiny; greedy text equal with and without speculation, streamed and not; tool_choice
              "required" and a named function through the openai SDK, streamed and not
  multiturn   a 4-turn agent session over a 2,000-token system prompt (flint-tiny): cached_tokens, TTFT of
              turns 2-4 <= 25% of turn 1's, the same greedy texts with prefix caching off
  load        256 concurrent streaming clients for LOAD_SECONDS (60) with `flint load`: no failures,
              replayed texts identical (no lost or duplicated tokens), resident memory stable
Prints "N passed, N failed" and exits 1 on any failure.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

FLINT, SRC, GROUP = sys.argv[1], sys.argv[2], sys.argv[3]
LOAD_SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", file=sys.stderr, flush=True)
    return cond


TMP = tempfile.mkdtemp(prefix="flint_server_test_")
MODEL = os.path.join(TMP, "s260")
DRAFTER = os.path.join(TMP, "s260d")
SPEC = json.dumps({"model": DRAFTER, "method": "dspark", "num_speculative_tokens": 4})
# fixed K = 4 with the random drafter: requests take seconds (dynamic draft lengths, the default,
# skip its useless drafts and finish them in a fraction of one); for tests that need a request
# to be still running a moment later
SPEC_FIXED = json.dumps({"model": DRAFTER, "method": "dspark", "num_speculative_tokens": 4, "dynamic_draft": False})


def make_models():
    subprocess.run([FLINT, "convert", "llama2c", "--weights", f"{SRC}/models/stories260K/stories260K.bin",
                    "--tokenizer", f"{SRC}/models/stories260K/tok512.bin", "--out", MODEL],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, f"{SRC}/tools/make_random_drafter.py", MODEL, DRAFTER],
                   check=True, stdout=subprocess.DEVNULL)


# ==== a server process ====

SERVERS = []


class Server:
    def __init__(self, *args, env=None, spec=True, wait=True, model=None, spec_config=None):
        cmd = [FLINT, "serve", model or MODEL, "--port", "0", "--log-interval", "0"]
        if spec:
            cmd += ["--speculative-config", spec_config or SPEC]
        cmd += list(args)
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=env if env is not None else os.environ.copy())
        SERVERS.append(self)
        self.log, self.port = [], None
        got = threading.Event()

        def reader():
            for line in self.p.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[0-9.]+:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    got.set()
            got.set()

        threading.Thread(target=reader, daemon=True).start()
        got.wait(30)
        if self.port is None:
            raise RuntimeError("the server did not start:\n" + "".join(self.log))
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if request(self.port, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the server never became ready:\n" + "".join(self.log))

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None

    def alive(self):
        return self.p.poll() is None

    def text(self):
        return "".join(self.log)


# ==== HTTP helpers ====

def request(port, method, path, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def post(port, path, body, **kw):
    s, h, d = request(port, "POST", path, body, **kw)
    try:
        j = json.loads(d)
    except ValueError:
        j = None
    return s, h, j, d


def sse_events(data):
    """The JSON events of an SSE body; checks the framing: every event is one 'data: ' line and a
    blank line, and the body ends with exactly one 'data: [DONE]'."""
    text = data.decode()
    ok = text.endswith("data: [DONE]\n\n") and text.count("data: [DONE]") == 1
    events = []
    for block in text.split("\n\n")[:-1]:
        if not block.startswith("data: ") or "\n" in block:
            ok = False
            continue
        if block == "data: [DONE]":
            continue
        events.append(json.loads(block[6:]))
    return events, ok


def stream_text(events):
    out = []
    for e in events:
        for ch in e.get("choices", []):
            d = ch.get("delta")
            t = d.get("content") if d is not None else ch.get("text")
            if t:
                out.append(t)
    return "".join(out)


def metrics(port):
    s, _, d = request(port, "GET", "/metrics")
    out = {}
    for line in d.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"


def chat_body(text="Tell me a story about a cat.", **kw):
    b = {"messages": [{"role": "user", "content": text}], "max_tokens": 40}
    b.update(kw)
    return b


def cmpl_body(text="Once upon a time", **kw):
    b = {"prompt": text, "max_tokens": 40}
    b.update(kw)
    return b


def raw_stream(port, body, path=CMPL, rcvbuf=None):
    """A streaming request on a raw socket (the caller reads, cuts or stalls it)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def read_until(s, needle, count=1, timeout=30):
    s.settimeout(timeout)
    buf = b""
    while buf.count(needle) < count:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def read_all(s, timeout=120):
    s.settimeout(timeout)
    buf = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        buf += chunk
    return buf


def dechunk(raw):
    """Headers and the de-chunked body of a raw HTTP/1.1 response."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    body = b""
    while rest:
        line, _, rest = rest.partition(b"\r\n")
        n = int(line.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        body += rest[:n]
        rest = rest[n + 2:]
    return head.decode(errors="replace"), body


def wait_for(cond, timeout, step=0.02):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


# ==== groups ====

def group_api():
    from openai import OpenAI
    srv = Server()
    port = srv.port
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    check(model == MODEL, f"/v1/models names the model ({model})")

    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me a story."}],
                                       max_tokens=24, seed=7, temperature=0.8)
    check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), "chat object and id")
    check(r.choices[0].message.role == "assistant" and isinstance(r.choices[0].message.content, str) and
          len(r.choices[0].message.content) > 0, "chat message content")
    check(r.choices[0].finish_reason in ("stop", "length"), "chat finish_reason")
    u = r.usage
    check(u.prompt_tokens > 0 and 0 < u.completion_tokens <= 24 and u.total_tokens == u.prompt_tokens +
          u.completion_tokens, "chat usage counts")
    spec = (u.model_extra or {}).get("speculative")
    check(isinstance(spec, dict) and {"num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens",
                                      "mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram",
                                      "accepted_per_position"} <= set(spec), f"usage.speculative fields: {spec}")
    check(spec and spec["num_spec_steps"] > 0 and len(spec["acceptance_histogram"]) == 5 and
          len(spec["accepted_per_position"]) == 4, "usage.speculative counts (K = 4)")

    chunks = list(client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi there"}],
                                                 max_tokens=24, seed=7, stream=True,
                                                 stream_options={"include_usage": True}))
    check(len(chunks) >= 3, f"chat stream has chunks ({len(chunks)})")
    check(chunks[0].choices[0].delta.role == "assistant", "first chunk carries the role")
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    check(len(finals) == 1, "exactly one chunk with finish_reason")
    last = chunks[-1]
    check(last.choices == [] and last.usage is not None and last.usage.completion_tokens > 0,
          "the last chunk carries usage and no choices")
    check(all(c.usage is None for c in chunks[:-1]), "the other chunks have usage null")
    check("speculative" in (last.usage.model_extra or {}), "streamed usage.speculative")

    r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=20, seed=3)
    check(r.object == "text_completion" and len(r.choices[0].text) > 0 and r.usage.completion_tokens > 0,
          "completions, not streamed")
    chunks = list(client.completions.create(model=model, prompt="Once upon a time", max_tokens=20, seed=3,
                                            stream=True, stream_options={"include_usage": True}))
    check("".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text,
          "streamed completion equals the non-streamed one")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
          "streamed completion usage")

    # per-request speculative controls, through the SDK's extra_body
    r = client.completions.create(model=model, prompt="Once", max_tokens=20, seed=1, extra_body={
        "speculative": {"enabled": False}, "ignore_eos": True})
    sp = r.usage.model_extra["speculative"]
    check(sp["num_spec_steps"] == 0 and sp["num_draft_tokens"] == 0 and r.usage.completion_tokens == 20,
          f"speculative disabled per request: {sp}")
    r = client.completions.create(model=model, prompt="Once", max_tokens=20, seed=1, extra_body={
        "speculative": {"max_draft_tokens": 2}, "ignore_eos": True})
    sp = r.usage.model_extra["speculative"]
    check(sp["num_spec_steps"] > 0 and sp["num_draft_tokens"] <= 2 * sp["num_spec_steps"],
          f"max_draft_tokens caps the draft: {sp}")
    # the server schedules draft lengths by confidence (the drafter has a confidence head); a
    # seeded sampled request, or one that says "dynamic": false, drafts the fixed K every step
    check((client.models.list().data[0].model_extra or {}).get("speculative", {}).get("dynamic_draft") is True,
          "/v1/models: dynamic_draft true")
    for extra in ({"speculative": {"dynamic": False}, "temperature": 0}, {"temperature": 0.8}):
        r = client.completions.create(model=model, prompt="Once", max_tokens=20, seed=1,
                                      extra_body=dict(extra, ignore_eos=True))
        sp = r.usage.model_extra["speculative"]
        # (the last two steps draft fewer: a step emits at most the tokens left)
        check(sp["num_spec_steps"] > 0 and sp["num_draft_tokens"] >= 4 * (sp["num_spec_steps"] - 2),
              f"{extra}: every step drafts K = 4 (pinned): {sp}")
    s, _, j, _ = post(port, CMPL, cmpl_body(max_tokens=4, speculative={"dynamic": "no"}))
    check(s == 400 and j["error"]["param"] == "speculative.dynamic", f"speculative.dynamic must be a boolean ({j})")
    # stop strings, prompt forms
    s, _, j, _ = post(port, CMPL, cmpl_body(max_tokens=60, seed=5, temperature=0))
    full = j["choices"][0]["text"]
    word = full.split()[3] if len(full.split()) > 4 else None
    if check(word is not None, "a long enough text to cut"):
        s, _, j, _ = post(port, CMPL, cmpl_body(max_tokens=60, seed=5, temperature=0, stop=[word, "zzzz"]))
        check(s == 200 and j["choices"][0]["finish_reason"] == "stop" and word not in j["choices"][0]["text"] and
              full.startswith(j["choices"][0]["text"]), "a stop string ends the text before it")
    s, _, j, _ = post(port, CMPL, {"prompt": ["Once upon a time"], "max_tokens": 8, "seed": 1})
    check(s == 200, "prompt as a list of one string")
    s, _, j, _ = post(port, CMPL, {"prompt": [1, 403, 407], "max_tokens": 8, "seed": 1})
    check(s == 200 and j["usage"]["prompt_tokens"] == 3, "prompt as token ids")

    # logprobs: completions (N alternatives), chat through the SDK, streamed == not streamed
    s, _, j, _ = post(port, CMPL, cmpl_body(max_tokens=12, seed=4, logprobs=3, ignore_eos=True))
    lp = j["choices"][0]["logprobs"]
    check(s == 200 and len(lp["tokens"]) == 12 and len(lp["token_logprobs"]) == 12 and len(lp["text_offset"]) == 12
          and all(len(t) <= 3 for t in lp["top_logprobs"]) and all(x <= 0 for x in lp["token_logprobs"]),
          f"completions logprobs ({lp})")
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=10,
                                       seed=9, logprobs=True, top_logprobs=2, temperature=0,
                                       extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    check(len(content) == 10 and all(len(c.top_logprobs) == 2 for c in content),
          "chat logprobs: one entry per token with 2 alternatives")
    check(all(c.top_logprobs[0].token == c.token and abs(c.top_logprobs[0].logprob - c.logprob) < 1e-6
              for c in content), "greedy: the chosen token is the most likely one")
    streamed = []
    for c in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=10,
                                            seed=9, logprobs=True, top_logprobs=2, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}):
        if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content:
            streamed += c.choices[0].logprobs.content
    check([(c.token, round(c.logprob, 5)) for c in streamed] == [(c.token, round(c.logprob, 5)) for c in content],
          "streamed logprobs equal the non-streamed ones")
    # structured output: every response parses and follows the schema, streamed or not; a schema
    # the grammar cannot handle is a 400 naming the keyword
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "legs": {"type": "integer"}, "kind": {"enum": ["cat", "dog"]}},
              "required": ["name", "legs", "kind"]}
    rf = {"type": "json_schema", "json_schema": {"name": "pet", "schema": schema}}
    for seed in range(4):
        s, _, j, _ = post(port, CHAT, chat_body(max_tokens=120, seed=seed, temperature=1.0, response_format=rf))
        obj = json.loads(j["choices"][0]["message"]["content"]) if s == 200 else None
        check(s == 200 and j["choices"][0]["finish_reason"] == "stop" and set(obj) <= {"name", "legs", "kind"}
              and isinstance(obj["legs"], int) and obj["kind"] in ("cat", "dog") and len(obj["name"]) <= 10,
              f"json_schema response follows the schema ({j})")
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me"}],
                                       max_tokens=300, seed=5, response_format={"type": "json_object"})
    # a free-form object may outgrow max_tokens (as with OpenAI); when it ends by itself it parses
    check(r.choices[0].finish_reason == "length" or isinstance(json.loads(r.choices[0].message.content), dict),
          f"json_object through the SDK ({r.choices[0].finish_reason}: {r.choices[0].message.content!r})")
    s, _, j, _ = post(port, CHAT, chat_body(response_format={"type": "json_schema",
                                                             "json_schema": {"schema": {"$ref": "#/x"}}}))
    check(s == 400 and "$ref" in j["error"]["message"], "unsupported schema keyword is a 400 naming it")
    # prefix caching: the same long prompt again comes from the cache
    long_prompt = "Once upon a time there was a little girl named Lily who loved to play in the park. " * 3
    post(port, CMPL, cmpl_body(long_prompt, max_tokens=4))
    s, _, j, _ = post(port, CMPL, cmpl_body(long_prompt, max_tokens=4))
    cached = j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    check(s == 200 and cached >= 16, f"a repeated prompt reports cached_tokens ({cached} of "
                                     f"{j['usage']['prompt_tokens']})")
    check(metrics(port).get("flint:prefix_cache_hits_total", 0) >= cached, "prefix cache hits in /metrics")

    # curl -N: well-formed SSE ending in data: [DONE]
    out = subprocess.run(["curl", "-sN", f"http://127.0.0.1:{port}{CHAT}", "-H", "Content-Type: application/json",
                          "-d", json.dumps(chat_body(stream=True, stream_options={"include_usage": True}))],
                         capture_output=True, timeout=60)
    events, ok = sse_events(out.stdout)
    check(out.returncode == 0 and ok and len(events) >= 2, "curl -N streams well-formed SSE ending in [DONE]")
    check(events and events[-1].get("usage", {}).get("speculative") is not None, "curl sees usage.speculative")

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    s, _, j, _ = post(port, CHAT, chat_body(tools=tools))
    check(s == 400 and j["error"]["param"] == "tools", "tools without --tool-call-parser: 400")

    s, h, d = request(port, "GET", "/health")
    check(s == 200 and json.loads(d)["status"] == "ok", "/health is 200 when ready")
    m = metrics(port)
    names = ["flint:spec_decode_num_drafts_total", "flint:spec_decode_num_draft_tokens_total",
             "flint:spec_decode_num_accepted_tokens_total",
             'flint:spec_decode_num_accepted_tokens_per_pos_total{position="0"}',
             'flint:spec_decode_num_accepted_tokens_per_pos_total{position="3"}',
             "flint:time_to_first_token_seconds_count", "flint:time_per_output_token_seconds_count",
             "flint:e2e_request_latency_seconds_count", "flint:num_requests_waiting", "flint:num_requests_running",
             "flint:kv_blocks_used", "flint:kv_blocks_total", 'flint:requests_total{finish_reason="stop"}',
             'flint:requests_total{finish_reason="length"}', "process_resident_memory_bytes",
             "flint:device_memory_bytes", "flint:cuda_graphs", "flint:cuda_graph_captures_total",
             "flint:cuda_graph_capture_seconds", "flint:cuda_graph_memory_bytes", "flint:engine_forward_steps_total",
             "flint:engine_step_seconds_total", "flint:engine_host_seconds_total"]
    for n in names:
        check(n in m, f"/metrics has {n}")
    check(m.get("flint:device_memory_bytes") == 0 and m.get("flint:cuda_graphs") == 0 and
          m.get("flint:cuda_graph_memory_bytes") == 0,
          "a CPU server reports no device memory and no graphs")
    check(m.get("flint:spec_decode_num_drafts_total", 0) > 0 and m.get("flint:e2e_request_latency_seconds_count", 0)
          >= 8, "/metrics counters moved")
    check(m.get("flint:engine_forward_steps_total", 0) > 0 and
          0 < m.get("flint:engine_host_seconds_total", 0) <= m.get("flint:engine_step_seconds_total", 0),
          "/metrics: the engine's host time is positive and within its steps' wall time")
    # a finished request's slot and blocks are freed by the engine's next step: give it a moment
    idle = wait_for(lambda: (lambda m: m.get("flint:kv_blocks_used") == 0 and
                             m.get("flint:num_requests_running") == 0)(metrics(port)), 2.0)
    check(idle, "idle: nothing held")
    check(any("/v1/chat/completions 200" in line and "prompt=" in line for line in srv.log),
          "one info line per request")
    check(srv.stop() == 0, "exit 0 on SIGTERM")

    # an agent-style server: ChatML template, reasoning and tool-call output parsers. stories260K
    # never writes <think> or <tool_call>, so this checks the plumbing (tools rendered, the
    # history's tool calls and reasoning accepted, parsed output streamed == not streamed); the
    # parsing itself is tests/test_parsers.c and test_server_unit.c
    srv = Server("--chat-template", "chatml", "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes",
                 "--enable-auto-tool-choice")
    port = srv.port
    msgs = [{"role": "user", "content": "Paris?"},
            {"role": "assistant", "content": None, "reasoning_content": "tool",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    # the byte-level tok512 vocabulary spells ChatML's tags out, so keep the tool list tiny
    body = {"messages": msgs, "tools": [{"type": "function", "function": {"name": "w"}}], "max_tokens": 30, "seed": 11,
            "chat_template_kwargs": {"enable_thinking": False}}
    s, _, j, _ = post(port, CHAT, body)
    check(s == 200 and j["choices"][0]["finish_reason"] in ("stop", "length") and
          isinstance(j["choices"][0]["message"]["content"], str), f"tools accepted and rendered ({s}: {j})")
    if s != 200:
        j = {"choices": [{"message": {"content": None}}]}
    s, _, d = request(port, "POST", CHAT, dict(body, stream=True, stream_options={"include_usage": True}))
    events, ok = sse_events(d)
    check(ok and stream_text(events) == j["choices"][0]["message"]["content"],
          "parsed output: streamed equals not streamed")
    s, _, j2, _ = post(port, CHAT, dict(body, tool_choice="none"))
    check(s == 200, "tool_choice none")
    check(srv.stop() == 0, "exit 0")


def group_stream():
    srv = Server()
    port = srv.port
    cases = []
    for i in range(12):
        kind = CHAT if i % 2 else CMPL
        body = (chat_body if kind == CHAT else cmpl_body)(f"Story number {i}: a dog and a", max_tokens=48,
                                                           seed=100 + i, temperature=0.9)
        if i % 3 == 0:
            body["stop"] = ["zq", "."]
        cases.append((kind, body))
    ref = []
    for kind, body in cases:  # alone, not streamed
        s, _, j, _ = post(port, kind, body)
        ch = j["choices"][0]
        ref.append(((ch["message"]["content"] if kind == CHAT else ch["text"]), j["usage"]["completion_tokens"]))
    for tbt in (False, True):  # alone, streamed (and one token per event)
        for (kind, body), (want, ntok) in zip(cases, ref):
            b = dict(body, stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True,
                                                        "token_by_token": tbt})
            s, _, d = request(port, "POST", kind, b)
            events, ok = sse_events(d)
            got = stream_text(events)
            check(s == 200 and ok and got == want, f"alone, token_by_token={tbt}: streamed text equals non-streamed "
                                                   f"({got!r} vs {want!r})")
            check(events[-1]["usage"]["completion_tokens"] == ntok, "same completion_tokens")
            if tbt:
                counts = [e["usage"]["completion_tokens"] for e in events if e.get("choices") and
                          stream_text([e])]
                steps = [b - a for a, b in zip([0] + counts, counts)]
                check(all(x >= 1 for x in steps) and len(counts) >= ntok // 2,
                      f"token by token: one token per event ({steps})")
    # under concurrent load: 24 streams and 12 non-streamed at once, twice over
    results = {}

    def worker(n, kind, body, stream):
        b = dict(body, stream=True, stream_options={"include_usage": True}) if stream else body
        s, _, d = request(port, "POST", kind, b)
        if stream:
            events, ok = sse_events(d)
            results[n] = (stream_text(events), ok and s == 200)
        else:
            j = json.loads(d)
            ch = j["choices"][0]
            results[n] = ((ch["message"]["content"] if kind == CHAT else ch["text"]), s == 200)

    threads = []
    for rep in range(2):
        for i, (kind, body) in enumerate(cases):
            threads.append(threading.Thread(target=worker, args=((rep, i, "s"), kind, body, True)))
            threads.append(threading.Thread(target=worker, args=((rep, i, "n"), kind, body, rep == 0 and i % 2)))
    # beside them, unseeded sampled requests whose draft lengths the scheduler chooses (the seeded
    # ones draft the fixed K: their tokens must not depend on what runs beside them)
    for i in range(8):
        threads.append(threading.Thread(target=worker, args=(("free", i, "n"), CMPL, cmpl_body(
            f"Free story {i}", max_tokens=64, temperature=1.0), False)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (rep, i, _), (text, ok) in sorted((k, v) for k, v in results.items() if k[0] != "free"):
        check(ok and text == ref[i][0], f"under concurrent load: request {i} (rep {rep}) equals the reference")
    check(all(results.get(("free", i, "n"), ("", False))[1] for i in range(8)), "the unseeded requests complete")
    check(srv.stop() == 0, "exit 0")


def group_robust():
    srv = Server("--max-body-bytes", "4096")
    port = srv.port

    def err(s, j, status, code=None, param=None, what=""):
        e = (j or {}).get("error", {})
        ok = s == status and isinstance(e.get("message"), str) and "type" in e and "param" in e and "code" in e
        if code is not None:
            ok = ok and e.get("code") == code
        if param is not None:
            ok = ok and e.get("param") == param
        check(ok, f"{what}: want {status} {code or ''} {param or ''}, got {s} {j}")

    s, _, j, _ = post(port, CMPL, '{"prompt": "x", ')
    err(s, j, 400, what="malformed JSON")
    s, _, j, _ = post(port, CMPL, "not json at all")
    err(s, j, 400, what="not JSON")
    s, _, j, _ = post(port, CMPL, {"prompt": "x", "max_tokens": "ten"})
    err(s, j, 400, param="max_tokens", what="wrong type: max_tokens")
    s, _, j, _ = post(port, CHAT, {"messages": "hello"})
    err(s, j, 400, param="messages", what="wrong type: messages")
    s, _, j, _ = post(port, CMPL, {"prompt": "x", "temperature": [1]})
    err(s, j, 400, param="temperature", what="wrong type: temperature")
    s, _, j, _ = post(port, CMPL, {"prompt": "x", "stream": "yes"})
    err(s, j, 400, param="stream", what="wrong type: stream")
    s, _, j, _ = post(port, CMPL, {"max_tokens": 5})
    err(s, j, 400, param="prompt", what="missing prompt")
    s, _, j, _ = post(port, CHAT, {"model": MODEL})
    err(s, j, 400, param="messages", what="missing messages")
    s, _, j, _ = post(port, CHAT, {"messages": [{"content": "x"}]})
    err(s, j, 400, param="messages[0].role", what="missing role")
    s, _, j, _ = post(port, CMPL, {"prompt": "x", "model": "gpt-9"})
    err(s, j, 404, code="model_not_found", param="model", what="unknown model")
    s, h, d = request(port, "POST", CMPL, json.dumps({"prompt": "x" * 5000}))
    check(s == 413, f"body over the limit: 413 (got {s})")
    try:
        j = json.loads(d)
    except ValueError:
        j = None
    err(s, j, 413, code="request_too_large", what="body over the limit: an OpenAI error object, not libevent's page")
    s, h, d = request(port, "PUT", CMPL, "{}")
    try:
        j = json.loads(d)
    except ValueError:
        j = None
    check(s in (405, 501) and isinstance(j, dict) and "error" in j, f"PUT: {s} with an error object (got {d[:80]!r})")
    s, _, j, _ = post(port, CMPL, {"prompt": "Once upon a time", "max_tokens": 600})
    err(s, j, 400, code="context_length_exceeded", what="prompt + max_tokens over the context")
    s, _, j, _ = post(port, CMPL, {"prompt": "Once " * 600, "max_tokens": 5})
    err(s, j, 400, code="context_length_exceeded", what="prompt alone over the context")
    for v in (0, -1):
        s, _, j, _ = post(port, CMPL, {"prompt": "x", "max_tokens": v})
        err(s, j, 400, param="max_tokens", what=f"max_tokens = {v}")
    s, _, j, _ = post(port, CHAT, chat_body(max_completion_tokens=0))
    err(s, j, 400, param="max_completion_tokens", what="max_completion_tokens = 0")
    s, _, j, _ = post(port, CMPL, {"prompt": "x", "n": 2})
    err(s, j, 400, param="n", what="n > 1")
    s, _, j, _ = post(port, CMPL, b'{"prompt": "caf\xc3"}')
    err(s, j, 400, what="invalid UTF-8 (cut character)")
    s, _, j, _ = post(port, CMPL, b'{"prompt": "\xff\xfe"}')
    err(s, j, 400, what="invalid UTF-8 (bytes FF FE)")
    s, _, j, _ = post(port, CMPL, {"prompt": "x", "stream_options": {"include_usage": True}})
    err(s, j, 400, param="stream_options", what="stream_options without stream")
    s, _, j, _ = post(port, CMPL, {"prompt": [5000]})
    err(s, j, 400, param="prompt", what="token id outside the vocabulary")
    s, _, j, _ = post(port, "/v1/embeddings", {"input": "x"})
    err(s, j, 404, what="unknown route")
    s, _, d = request(port, "GET", CMPL)
    check(s == 405, "GET on a POST route: 405")
    check(srv.alive(), "the server is still running after every bad request")
    s, _, j, _ = post(port, CMPL, cmpl_body(max_tokens=5))
    check(s == 200 and j["usage"]["completion_tokens"] > 0, "and still serves")
    m = metrics(port)
    check(m.get('flint:requests_rejected_total{status="400"}', 0) >= 15, "rejections are counted")
    check(srv.stop() == 0, "exit 0")

    # queue full: 1 slot + 1 queued; the third request is refused at once (fixed K: the running
    # request outlasts the check)
    srv = Server("--max-num-seqs", "1", "--max-queue", "1", spec_config=SPEC_FIXED)
    port = srv.port
    long_req = {"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "stream": True}
    a = raw_stream(port, long_req)
    read_until(a, b"data: ", 1)  # running
    b = raw_stream(port, long_req)
    read_until(b, b"\r\n\r\n", 1)  # accepted, queued
    t0 = time.time()
    s, h, j, _ = post(port, CMPL, cmpl_body(max_tokens=5))
    dt = time.time() - t0
    err(s, j, 429, code="queue_full", what="queue full")
    check(dt < 0.5 and h.get("retry-after") == "1", f"429 comes fast ({dt * 1e3:.0f} ms) with Retry-After")
    a.close()
    b.close()
    check(wait_for(lambda: metrics(port)["flint:num_requests_running"] == 0 and
                   metrics(port)["flint:num_requests_waiting"] == 0, 5), "the slots free up after the cut")
    s, _, j, _ = post(port, CMPL, cmpl_body(max_tokens=5))
    check(s == 200, "then requests are accepted again")
    check(srv.stop() == 0, "exit 0")


def group_notready():
    srv = Server("--debug-load-delay-ms", "3000", wait=False)
    port = srv.port
    s, _, d = request(port, "GET", "/health")
    check(s == 503 and json.loads(d)["status"] == "loading", f"/health 503 while loading ({s})")
    s, h, j, _ = post(port, CHAT, chat_body())
    check(s == 503 and j["error"]["code"] == "model_not_ready" and h.get("retry-after"),
          f"chat 503 while loading ({s})")
    s, _, d = request(port, "GET", "/v1/models")
    check(s == 503, "/v1/models 503 while loading")
    s, _, d = request(port, "GET", "/metrics")
    check(s == 200 and "flint:ready 0" in d.decode(), "/metrics says not ready")
    srv.wait_ready()
    s, _, j, _ = post(port, CHAT, chat_body(max_tokens=5))
    check(s == 200, "served once loaded")
    check(srv.stop() == 0, "exit 0")
    # a model that cannot be loaded: the server says why and exits 1
    p = subprocess.run([FLINT, "serve", os.path.join(TMP, "missing"), "--port", "0"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 1 and "config.json" in p.stderr, f"a missing model: exit 1 naming the file ({p.returncode})")


def group_auth():
    from openai import OpenAI, AuthenticationError
    key = "sk-flint-test-0123456789"
    for how in ("flag", "env"):
        env = os.environ.copy()
        if how == "flag":
            srv = Server("--api-key", key, env=env)
        else:
            env["FLINT_API_KEY"] = key
            srv = Server(env=env)
        port = srv.port
        s, h, j, _ = post(port, CHAT, chat_body(max_tokens=4))
        check(s == 401 and j["error"]["code"] == "invalid_api_key" and "bearer" in h.get("www-authenticate", "").lower(),
              f"{how}: missing key -> 401 ({s})")
        s, _, d = request(port, "GET", "/v1/models")
        check(s == 401, f"{how}: /v1/models needs the key too")
        for bad in ("Bearer wrong", "Bearer " + key[:-1], "Bearer " + key + "x", "Basic " + key, key, "Bearer "):
            s, _, j, _ = post(port, CHAT, chat_body(max_tokens=4), headers={"Authorization": bad})
            check(s == 401 and j["error"]["type"] == "invalid_request_error", f"{how}: '{bad}' -> 401 ({s})")
        s, _, j, _ = post(port, CHAT, "{bad json", headers={})
        check(s == 401, f"{how}: authentication comes before parsing")
        for good in ("Bearer " + key, "bearer " + key):
            s, _, j, _ = post(port, CHAT, chat_body(max_tokens=4), headers={"Authorization": good})
            check(s == 200, f"{how}: '{good[:7]}...' -> 200 ({s})")
        check(request(port, "GET", "/health")[0] == 200 and request(port, "GET", "/metrics")[0] == 200,
              f"{how}: /health and /metrics stay open")
        c = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        check(r.usage.completion_tokens > 0, f"{how}: the SDK with the right key")
        try:
            OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="nope", max_retries=0).models.list()
            check(False, f"{how}: the SDK with a wrong key must fail")
        except AuthenticationError:
            check(True, "")
        check(srv.stop() == 0, "exit 0")


def closed_within(sock, limit):
    """Seconds until the server closes a connection we stopped talking on (None: still open)."""
    sock.settimeout(limit)
    t0 = time.time()
    try:
        while sock.recv(4096):
            pass
        return time.time() - t0
    except (socket.timeout, TimeoutError):
        return None
    except OSError:
        return time.time() - t0


def group_timeouts():
    srv = Server("--timeout", "2", "--stream-buffer-bytes", "2048")
    port = srv.port
    # stalled before any byte, inside the headers, inside the body
    idle = socket.create_connection(("127.0.0.1", port))
    hdr = socket.create_connection(("127.0.0.1", port))
    hdr.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")
    body = socket.create_connection(("127.0.0.1", port))
    body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
    for name, sck in (("no bytes", idle), ("half the headers", hdr), ("half the body", body)):
        t = closed_within(sck, 8)
        check(t is not None and t < 7, f"a client stalled at {name} is closed by the read timeout ({t})")
        sck.close()
    # a generation longer than the timeout is not cut: the timeout is for silence, not for work
    res = []

    def long_one(i):
        s, _, j, _ = post(port, CMPL, {"prompt": "Once", "max_tokens": 450, "ignore_eos": True, "seed": i})
        res.append(s == 200 and j["usage"]["completion_tokens"] == 450)

    t0 = time.time()
    ts = [threading.Thread(target=long_one, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"8 long requests took {time.time() - t0:.1f} s with a 2 s timeout")
    check(len(res) == 8 and all(res), "long generations complete despite the 2 s timeout")
    # a client that does not read: cancelled, and nobody else waits for it
    before = metrics(port).get('flint:requests_total{finish_reason="cancelled"}', 0)
    stalled = raw_stream(port, {"prompt": "Once", "max_tokens": 480, "ignore_eos": True, "stream": True,
                                "stream_options": {"include_usage": True, "continuous_usage_stats": True,
                                                   "token_by_token": True}}, rcvbuf=1024)
    t0 = time.time()
    s, _, j, _ = post(port, CMPL, cmpl_body(max_tokens=30, ignore_eos=True))
    check(s == 200 and time.time() - t0 < 10, f"another client is served meanwhile ({time.time() - t0:.2f} s)")
    check(wait_for(lambda: metrics(port).get('flint:requests_total{finish_reason="cancelled"}', 0) == before + 1, 20),
          "the stalled stream is cancelled")
    check(wait_for(lambda: metrics(port)["flint:num_requests_running"] == 0, 5), "and its slot is free")
    t = closed_within(stalled, 10)
    check(t is not None, "and its connection is closed by the write timeout")
    stalled.close()
    if not check("not reading" in srv.text(), "the log says why"):
        print(srv.text()[-3000:], file=sys.stderr)
    check(srv.stop() == 0, "exit 0")
    # a stream whose first token is further away than the timeout (here: queued behind a long
    # request on a one-slot server) is kept open by SSE comments and ends complete
    srv = Server("--timeout", "1", "--max-num-seqs", "1", spec_config=SPEC_FIXED)
    port = srv.port
    ahead = [threading.Thread(target=lambda: post(port, CMPL, {"prompt": "Once", "max_tokens": 480, "ignore_eos": True}))
             for _ in range(8)]
    for t in ahead:
        t.start()
    time.sleep(0.3)
    t0 = time.time()
    s, h, d = request(port, "POST", CMPL, {"prompt": "Once", "max_tokens": 5, "stream": True})
    waited = time.time() - t0
    for t in ahead:
        t.join()
    text = d.decode(errors="replace")
    check(s == 200 and text.rstrip().endswith("data: [DONE]") and ": keep-alive" in text and waited > 1.5,
          f"a stream queued {waited:.1f} s behind a 1 s timeout stays open with keep-alive comments ({text[-120:]!r})")
    check(srv.stop() == 0, "exit 0")


def group_disconnect():
    srv = Server()
    port = srv.port
    m0 = metrics(port)
    socks = []
    for i in range(32):
        s = raw_stream(port, {"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "stream": True,
                              "seed": i}, path=CMPL)
        socks.append(s)
    for s in socks:
        read_until(s, b"data: ", 3)
    check(metrics(port)["flint:num_requests_running"] == 32, "32 streams running")
    for i, s in enumerate(socks):
        if i % 2:  # half with a reset, half with a normal close
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    t0 = time.time()
    ok = wait_for(lambda: (lambda m: m["flint:num_requests_running"] == 0 and m["flint:kv_blocks_used"] == 0)(
        metrics(port)), 1.0, step=0.01)
    dt = time.time() - t0
    m = metrics(port)
    check(ok, f"32 cut streams: 0 running and all KV blocks free within 1 s (took {dt:.3f} s; running "
              f"{m['flint:num_requests_running']}, KV used {m['flint:kv_blocks_used']})")
    print(f"32 cut streams freed in {dt * 1e3:.0f} ms")
    cancelled = m['flint:requests_total{finish_reason="cancelled"}'] - m0['flint:requests_total{finish_reason="cancelled"}']
    check(cancelled == 32, f"all 32 counted as cancelled ({cancelled})")
    check(m["flint:kv_blocks_used"] == 0 and m["flint:kv_blocks_total"] > 0, "KV pool whole again")
    check(srv.alive(), "the server is fine")
    check(srv.stop() == 0, "exit 0")

    # a queued, non-streamed request whose client leaves is cancelled before it ever runs (the
    # running one must outlast the check: fixed K)
    srv = Server("--max-num-seqs", "1", spec_config=SPEC_FIXED)
    port = srv.port
    a = raw_stream(port, {"prompt": "Once", "max_tokens": 480, "ignore_eos": True, "stream": True})
    read_until(a, b"data: ", 1)
    b = raw_stream(port, {"prompt": "Once", "max_tokens": 480, "ignore_eos": True})
    check(wait_for(lambda: metrics(port)["flint:num_requests_waiting"] == 1, 5), "one request waits")
    b.close()
    check(wait_for(lambda: metrics(port)["flint:num_requests_waiting"] == 0, 1.0), "its client left: it is gone "
                                                                                     "within a second")
    a.close()
    check(wait_for(lambda: metrics(port)["flint:num_requests_running"] == 0 and
                   metrics(port)["flint:kv_blocks_used"] == 0, 1.0), "and the running one too")
    m = metrics(port)
    check(m['flint:requests_total{finish_reason="cancelled"}'] == 2, "both cancelled")
    check(srv.stop() == 0, "exit 0")


def group_shutdown():
    # in-flight streams finish; new connections are refused; exit 0
    srv = Server()
    port = srv.port
    outs, pre = {}, {}

    def reader(i, s):
        outs[i] = dechunk(pre[i] + read_all(s))[1]

    socks = [raw_stream(port, {"prompt": "Once", "max_tokens": 150, "ignore_eos": True, "stream": True, "seed": i})
             for i in range(4)]
    for i, s in enumerate(socks):
        pre[i] = read_until(s, b"data: ", 1)
    ts = [threading.Thread(target=reader, args=(i, s)) for i, s in enumerate(socks)]
    for t in ts:
        t.start()
    srv.p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    check(refused, "no new connections after SIGTERM")
    for t in ts:
        t.join()
    for i in range(4):
        events, ok = sse_events(outs.get(i, b""))
        check(ok and any(e.get("choices") and e["choices"][0].get("finish_reason") == "length" for e in events),
              f"stream {i} finished normally during the grace period")
    rc = srv.p.wait(30)
    check(rc == 0, f"exit 0 after SIGTERM ({rc})")

    # the grace period runs out: the rest end with an SSE error event, then [DONE]; SIGINT works too
    srv = Server("--shutdown-timeout", "0.3", "--max-num-seqs", "2")
    port = srv.port
    socks = [raw_stream(port, {"prompt": "Once", "max_tokens": 480, "ignore_eos": True, "stream": True, "seed": i})
             for i in range(4)]
    for i, s in enumerate(socks):
        pre[i] = read_until(s, b"\r\n\r\n", 1)
    outs = {}
    ts = [threading.Thread(target=reader, args=(i, s)) for i, s in enumerate(socks)]
    for t in ts:
        t.start()
    time.sleep(0.2)
    srv.p.send_signal(signal.SIGINT)
    for t in ts:
        t.join()
    n_err = 0
    for i in range(4):
        events, ok = sse_events(outs.get(i, b""))
        errs = [e for e in events if "error" in e]
        n_err += bool(errs)
        check(ok, f"stream {i} ends with [DONE]")
        if errs:
            check(errs[0]["error"]["code"] == "shutting_down" and "error" in events[-1],
                  f"stream {i}: the error event is the last before [DONE]")
    check(n_err >= 2, f"the streams still running after the grace period got an error event ({n_err})")
    rc = srv.p.wait(30)
    check(rc == 0, f"exit 0 after SIGINT ({rc})")


def group_load():
    srv = Server("--max-num-seqs", "64", "--max-queue", "256")
    port = srv.port
    out, saved = os.path.join(TMP, "load.json"), os.path.join(TMP, "requests.jsonl")
    # ShareGPT from evals/data (or shared/data); a generated set when neither is there
    dataset = "sharegpt"
    probe = subprocess.run([FLINT, "load", "--url", f"http://127.0.0.1:{port}", "--dataset", dataset,
                            "--num-requests", "1", "--max-tokens", "1", "--max-prompt-chars", "300", "--quiet"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        dataset = os.path.join(TMP, "prompts.jsonl")
        with open(dataset, "w") as f:
            for i in range(500):
                f.write(json.dumps({"prompt": f"Tell me story {i} about a {['cat', 'dog', 'bird'][i % 3]}."}) + "\n")
    # the other modes of the generator, briefly: Poisson arrivals on completions, plain JSON replies
    for extra in (["--request-rate", "30", "--duration", "3", "--endpoint", "completions"],
                  ["--no-stream", "--num-requests", "24", "--concurrency", "8"]):
        q = subprocess.run([FLINT, "load", "--url", f"http://127.0.0.1:{port}", "--dataset", dataset,
                            "--max-prompt-chars", "300", "--max-tokens", "8", "--output", out, "--quiet"] + extra,
                           capture_output=True, text=True, timeout=120)
        r = json.load(open(out)) if q.returncode == 0 else {}
        check(q.returncode == 0 and r.get("failed") == 0 and r.get("completed", 0) > 0,
              f"flint load {' '.join(extra)}: {r.get('completed')} completed ({q.stderr[-300:]})")
    q = subprocess.run([FLINT, "load", "--url", "http://127.0.0.1:1", "--dataset", dataset, "--num-requests", "1"],
                       capture_output=True, text=True, timeout=60)
    check(q.returncode == 1 and "connect" in q.stderr, f"flint load without a server: exit 1 ({q.stderr.strip()})")
    cmd = [FLINT, "load", "--url", f"http://127.0.0.1:{port}", "--dataset", dataset, "--max-prompt-chars", "300",
           "--concurrency", "256", "--duration", str(LOAD_SECONDS), "--max-tokens", "32", "--temperature", "0.8",
           "--seed", "1000", "--output", out, "--save-requests", saved, "--timeout", "300",
           "--goodput", "ttft:60000,tpot:2000"]
    print(" ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=LOAD_SECONDS + 600)
    print(p.stdout)
    print(p.stderr[-2000:], file=sys.stderr)
    rep = json.load(open(out))
    check(p.returncode == 0 and rep["failed"] == 0, f"zero failed requests ({rep['failed']}: {rep['failures']})")
    check(rep["completed"] >= 256, f"completed {rep['completed']} requests")
    check(rep.get("spec_decode", {}).get("num_drafts", 0) > 0, "speculative counters moved")
    check(rep.get("goodput", {}).get("good_requests", -1) >= 0 and rep["ttft_ms"]["p99"] >= rep["ttft_ms"]["p50"] > 0
          and rep["itl_per_token_ms"]["n"] > 0, "the report has goodput, percentiles and per-token ITL")
    rss = rep.get("server_rss_mb", [])
    if check(len(rss) >= 4, f"RSS samples ({rss})"):
        warm = rss[2]  # after ~10 s of load
        check(max(rss[2:]) - warm < 24, f"resident memory stable after warm-up: {warm:.1f} -> max "
                                         f"{max(rss[2:]):.1f} MB (samples {['%.1f' % x for x in rss]})")
    # no lost or duplicated tokens: replay a sample of the streamed requests without streaming
    lines = [json.loads(line) for line in open(saved)]
    sample = lines[:: max(1, len(lines) // 64)][:64]
    same = 0
    for rec in sample:
        body = dict(rec["body"])
        body.pop("stream", None)
        body.pop("stream_options", None)
        s, _, j, _ = post(port, CHAT if "messages" in body else CMPL, body)
        ch = j["choices"][0]
        text = ch["message"]["content"] if "message" in ch else ch["text"]
        same += s == 200 and text == rec["text"] and j["usage"]["completion_tokens"] == rec["completion_tokens"]
    check(same == len(sample), f"replayed {len(sample)} streamed requests: {same} identical")
    idle = wait_for(lambda: (lambda m: m["flint:num_requests_running"] == 0 and m["flint:kv_blocks_used"] == 0 and
                             m["flint:num_requests_waiting"] == 0)(metrics(port)), 2.0)
    m = metrics(port)
    check(idle, f"nothing held after the load (running {m['flint:num_requests_running']}, waiting "
                f"{m['flint:num_requests_waiting']}, KV used {m['flint:kv_blocks_used']})")
    check(srv.stop() == 0, "exit 0")
    print(json.dumps({k: rep[k] for k in ("completed", "failed", "duration_s", "request_throughput",
                                          "output_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms",
                                          "server_rss_mb") if k in rep}))


def n_tokens(model_dir, text):
    out = subprocess.run([FLINT, "tokenize", model_dir, "--no-special"], input=text, capture_output=True, text=True,
                         check=True).stdout
    return len(out.split())


def group_multiturn():
    """An agent session: a 2,000-token system prompt shared by 4 turns. With prefix caching, turns
    2-4 reuse the cached blocks (cached_tokens) and their TTFT is at most a quarter of turn 1's;
    the greedy texts equal those of a server with caching off. flint-tiny's config says 2,048
    positions, which 4 turns over a 2,000-token prompt pass, so the test serves a copy whose
    config allows 4,096 (the weights are shared; RoPE needs no table beyond what max_len sizes)."""
    from openai import OpenAI
    src = os.path.abspath(f"{SRC}/models/flint-tiny")
    tiny = os.path.join(TMP, "flint-tiny-4k")
    os.makedirs(tiny)
    for f in os.listdir(src):
        if f == "config.json":
            cfg = json.load(open(os.path.join(src, f)))
            cfg["max_position_embeddings"] = 4096
            json.dump(cfg, open(os.path.join(tiny, f), "w"))
        else:
            os.symlink(os.path.join(src, f), os.path.join(tiny, f))
    # the system prompt: GSM8K test questions, cut to 2,000 tokens (+-5)
    qs = [json.loads(l)["turns"][0] for l in open(f"{SRC}/evals/data/gsm8k.jsonl", encoding="utf-8")]
    words = " ".join(qs[:60]).split(" ")
    lo, hi = 1, len(words)
    while lo < hi:  # the most words whose text stays within 2,000 tokens
        mid = (lo + hi + 1) // 2
        if n_tokens(tiny, " ".join(words[:mid])) <= 2000:
            lo = mid
        else:
            hi = mid - 1
    system = "You solve grade-school maths problems. Examples follow. " + " ".join(words[:lo])
    while n_tokens(tiny, system) > 2000:
        system = system.rsplit(" ", 1)[0]
    n_sys = n_tokens(tiny, system)
    check(1990 <= n_sys <= 2000, f"system prompt of ~2,000 tokens ({n_sys})")
    users = ["How many eggs does Janet sell?", "And how much money is that?", "Explain it step by step.",
             "Thanks. What was the first number?"]
    spec = json.dumps({"model": f"{SRC}/models/flint-tiny-dspark", "num_speculative_tokens": 7})

    def session(*flags):
        srv = Server(*flags, model=tiny, spec_config=spec)
        client = OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="unused", max_retries=0)
        msgs, out = [{"role": "system", "content": system}], []
        for u in users:
            msgs.append({"role": "user", "content": u})
            t0 = time.perf_counter()
            ttft, text, usage = None, "", None
            for c in client.chat.completions.create(model=tiny, messages=msgs, max_tokens=24, temperature=0,
                                                    stream=True, stream_options={"include_usage": True}):
                if c.choices and c.choices[0].delta.content:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text += c.choices[0].delta.content
                if c.usage:
                    usage = c.usage
            details = getattr(usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) if details else None
            out.append({"ttft": ttft, "text": text, "prompt": usage.prompt_tokens, "cached": cached})
            msgs.append({"role": "assistant", "content": text})
        check(srv.stop() == 0, "exit 0")
        return out

    on = session()
    off = session("--no-enable-prefix-caching")
    for i, (a, b) in enumerate(zip(on, off)):
        print(f"turn {i + 1}: prompt {a['prompt']} tokens, cached {a['cached']}, TTFT {a['ttft'] * 1000:.1f} ms "
              f"(caching off: {b['ttft'] * 1000:.1f} ms)", flush=True)
        check(a["text"] == b["text"] and a["text"], f"turn {i + 1}: the same greedy text with caching on and off")
    check(on[0]["cached"] == 0, f"turn 1 finds nothing cached ({on[0]['cached']})")
    for i in (1, 2, 3):
        check(on[i]["cached"] is not None and on[i]["cached"] >= on[i - 1]["prompt"] - 16,
              f"turn {i + 1}: cached_tokens {on[i]['cached']} cover the previous turn's prompt ({on[i - 1]['prompt']})")
        check(on[i]["ttft"] <= 0.25 * on[0]["ttft"],
              f"turn {i + 1}: TTFT {on[i]['ttft'] * 1000:.1f} ms <= 25% of turn 1's {on[0]['ttft'] * 1000:.1f} ms")
    check(all(b["cached"] in (0, None) for b in off), "caching off reports no cached tokens")


def default_server(*extra):
    """`flint serve` without a model argument (Server() always passes MODEL and SPEC)."""
    srv = Server.__new__(Server)
    srv.p = subprocess.Popen([FLINT, "serve", "--port", "0", "--log-interval", "0", *extra], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    SERVERS.append(srv)
    srv.log, srv.port = [], None
    for line in srv.p.stderr:
        srv.log.append(line)
        m = re.search(r"listening on http://[0-9.]+:(\d+)", line)
        if m:
            srv.port = int(m.group(1))
            break
    threading.Thread(target=lambda: [srv.log.append(x) for x in srv.p.stderr], daemon=True).start()
    if srv.port is None:
        raise RuntimeError("the server did not start:\n" + srv.text())
    srv.wait_ready()
    return srv


def group_default():
    """`flint serve` with no model: the embedded pair (models/flint-tiny + flint-tiny-dspark, K = 7)."""
    from openai import OpenAI
    if not os.path.exists(f"{SRC}/models/flint-tiny-dspark/config.json"):
        check(False, "models/flint-tiny-dspark is missing")
        return
    srv = default_server()
    port = srv.port
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    models = client.models.list().data
    check(len(models) == 1 and models[0].id == "flint-tiny", f"/v1/models serves flint-tiny ({[m.id for m in models]})")
    info = models[0].model_extra or {}
    check(info.get("speculative") == {"enabled": True, "num_speculative_tokens": 7, "dynamic_draft": True},
          f"speculative on with K = 7, lengths scheduled by confidence, by default ({info.get('speculative')})")
    q = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
         "How many clips did Natalia sell altogether in April and May?")
    msgs = [{"role": "user", "content": q}]
    r = client.chat.completions.create(model="flint-tiny", messages=msgs, max_tokens=96, temperature=0)
    sp = (r.usage.model_extra or {}).get("speculative") or {}
    check(sp.get("num_spec_steps", 0) > 0 and len(sp.get("accepted_per_position", [])) == 7,
          f"usage.speculative with 7 positions ({sp})")
    check(sp.get("mean_acceptance_length", 0) > 1.5, f"the trained drafter is accepted (AL {sp.get('mean_acceptance_length')})")
    off = client.chat.completions.create(model="flint-tiny", messages=msgs, max_tokens=96, temperature=0,
                                         extra_body={"speculative": {"enabled": False}})
    check(r.choices[0].message.content == off.choices[0].message.content and len(r.choices[0].message.content) > 20,
          "greedy text with speculation equals the text without")
    parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="flint-tiny", messages=msgs, max_tokens=96, temperature=0, stream=True) if c.choices]
    check("".join(parts) == r.choices[0].message.content, "streamed greedy text equals the non-streamed text")
    check(any("flint-tiny-dspark" in x for x in srv.log) and any("K = 7" in x for x in srv.log),
          "the log names the default drafter and K")
    check(srv.stop() == 0, "exit 0")

    # tool_choice "required" and a named function force one call through the grammar: the openai
    # SDK gets message.tool_calls (and delta.tool_calls when streaming) with arguments that parse
    # and follow the function's parameters
    srv = default_server("--tool-call-parser", "hermes", "--enable-auto-tool-choice")
    client = OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "current weather", "parameters": {
                 "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                 "required": ["city", "unit"]}}},
             {"type": "function", "function": {"name": "add", "parameters": {
                 "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                 "required": ["a", "b"]}}}]
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice, names in (("required", ("get_weather", "add")),
                          ({"type": "function", "function": {"name": "get_weather"}}, ("get_weather",))):
        what = f"tool_choice {json.dumps(choice)}"
        r = client.chat.completions.create(model="flint-tiny", messages=msgs, tools=tools, tool_choice=choice,
                                           temperature=0, max_tokens=200)
        calls = r.choices[0].message.tool_calls or []
        ok = len(calls) == 1 and calls[0].function.name in names and calls[0].id.startswith("call_")
        args = json.loads(calls[0].function.arguments) if ok else None
        if ok and calls[0].function.name == "get_weather":
            ok = set(args) == {"city", "unit"} and isinstance(args["city"], str) and args["unit"] in ("c", "f")
        elif ok:
            ok = set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
        check(ok and r.choices[0].finish_reason == "tool_calls" and not r.choices[0].message.content,
              f"{what}: one call that follows its schema ({r.choices[0]})")
        stream = list(client.chat.completions.create(model="flint-tiny", messages=msgs, tools=tools, tool_choice=choice,
                                                     temperature=0, max_tokens=200, stream=True))
        deltas = [t for c in stream if c.choices for t in (c.choices[0].delta.tool_calls or [])]
        name = "".join(t.function.name or "" for t in deltas if t.function)
        argtext = "".join(t.function.arguments or "" for t in deltas if t.function)
        check(calls and name == calls[0].function.name and json.loads(argtext or "null") == args and
              any(c.choices and c.choices[0].finish_reason == "tool_calls" for c in stream),
              f"{what}: streamed delta.tool_calls equal the non-streamed call")
    for bad, why in (("always", "unknown tool_choice"), ({"type": "function", "function": {"name": "nope"}}, "unknown function"),
                     ({"type": "function"}, "named choice without a function")):
        s, _, j, _ = post(srv.port, CHAT, {"messages": msgs, "tools": tools, "tool_choice": bad, "max_tokens": 5})
        check(s == 400 and j["error"]["param"] == "tool_choice", f"{why}: 400 on tool_choice ({s} {j})")
    s, _, j, _ = post(srv.port, CHAT, {"messages": msgs, "tool_choice": "required", "max_tokens": 5})
    check(s == 400 and j["error"]["param"] == "tool_choice", f"tool_choice required without tools: 400 ({s} {j})")
    s, _, j, _ = post(srv.port, CHAT, {"messages": msgs, "tools": tools, "tool_choice": "required", "max_tokens": 5,
                                       "response_format": {"type": "json_object"}})
    check(s == 400, f"tool_choice required with response_format: 400 ({s})")
    check(srv.stop() == 0, "exit 0 (tools server)")


GROUPS = {"default": group_default, "multiturn": group_multiturn, "api": group_api, "stream": group_stream, "robust": group_robust, "notready": group_notready,
          "auth": group_auth, "timeouts": group_timeouts, "disconnect": group_disconnect,
          "shutdown": group_shutdown, "load": group_load}

if __name__ == "__main__":
    try:
        make_models()
        GROUPS[GROUP]()
    except Exception as e:  # a crash of the test itself counts as a failure, with its trace
        import traceback
        traceback.print_exc()
        check(False, f"{GROUP}: {e!r}")
    finally:
        for srv in SERVERS:  # never leave a server behind
            if srv.p.poll() is None:
                srv.p.kill()
        subprocess.run(["rm", "-rf", TMP])
    print(f"test_server_{GROUP}: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
