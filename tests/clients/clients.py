#!/usr/bin/env python3
"""clients.py: the Python clients tokenclock's users run, each through one
base URL (tokenclock's, or the simulator's for the reference).

Usage: clients.py BASE_URL [--only NAME,...]

Prints one JSON object: per scenario, what the client made of the
responses (text, usage, event kinds, status; nothing that differs between
two runs, such as ids or times), or {"error": ...} if the client failed.
"requests" counts the requests sent. tests/it/clients.rs runs it against
the simulator directly and through tokenclock and compares the two: a
client that chokes on tokenclock's framing, or reads other text through
it, fails that test.

The simulator's text is keyed by the request body, so both runs send the
same bodies and get the same words.
"""
import asyncio
import json
import sys

import aiohttp
import anthropic
import httpx
import openai
import requests
from huggingface_hub import InferenceClient

PROMPT = [{"role": "user", "content": "Say something about clocks."}]
CHAT = {"model": "m", "messages": PROMPT, "stream": True, "max_tokens": 12}
SENT = {"requests": 0}


def sent(n=1):
    SENT["requests"] += n


def sse_texts(lines):
    """The `content` of each OpenAI chat chunk in SSE `lines` (bytes)."""
    texts = []
    for line in lines:
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[len(b"data: "):])
        for choice in chunk.get("choices") or []:
            texts.append(choice.get("delta", {}).get("content") or "")
    return "".join(texts)


def openai_chat_stream(base):
    """The OpenAI SDK, a streamed chat: every chunk, without usage."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    sent()
    chunks = list(client.chat.completions.create(model="m", messages=PROMPT, stream=True, max_tokens=12))
    return {
        "chunks": len(chunks),
        "text": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
        "finish": [c.choices[0].finish_reason for c in chunks if c.choices][-1],
        "usage_chunks": sum(1 for c in chunks if c.usage is not None),
    }


def openai_chat_stream_usage(base):
    """The OpenAI SDK, a streamed chat that asks for usage."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    sent()
    stream = client.chat.completions.create(
        model="m", messages=PROMPT, stream=True, max_tokens=10, stream_options={"include_usage": True}
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens]
    return {"text": text, "usage": usage}


def openai_chat_whole(base):
    """The OpenAI SDK, a chat answered whole; the SDK accepts gzip, and the
    simulator, as OpenAI, compresses a whole answer then."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    sent()
    raw = client.chat.completions.with_raw_response.create(model="m", messages=PROMPT, max_tokens=9)
    answer = raw.parse()
    return {
        "encoding": raw.headers.get("content-encoding"),
        "text": answer.choices[0].message.content,
        "usage": [answer.usage.prompt_tokens, answer.usage.completion_tokens],
    }


def openai_completions_stream(base):
    """The OpenAI SDK, a streamed legacy completion."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    sent()
    chunks = list(client.completions.create(model="m", prompt="Clocks", stream=True, max_tokens=8))
    return {"chunks": len(chunks), "text": "".join(c.choices[0].text for c in chunks if c.choices)}


def openai_responses_stream(base):
    """The OpenAI SDK, a streamed Responses API answer: every event's kind."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    sent()
    events = list(client.responses.create(model="m", input="Clocks", stream=True, max_output_tokens=8))
    done = [e for e in events if e.type == "response.completed"]
    usage = done[0].response.usage if done else None
    return {
        "kinds": [e.type for e in events],
        "text": "".join(e.delta for e in events if e.type == "response.output_text.delta"),
        "usage": [usage.input_tokens, usage.output_tokens] if usage else None,
    }


def anthropic_stream(base):
    """The Anthropic SDK, a streamed message and its final usage."""
    client = anthropic.Anthropic(base_url=base, api_key="sk-ant-test", max_retries=0)
    sent()
    with client.messages.stream(model="m", max_tokens=11, messages=PROMPT) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    return {
        "text": text,
        "stop": final.stop_reason,
        "usage": [final.usage.input_tokens, final.usage.output_tokens],
    }


def anthropic_whole(base):
    """The Anthropic SDK, a message answered whole."""
    client = anthropic.Anthropic(base_url=base, api_key="sk-ant-test", max_retries=0)
    sent()
    message = client.messages.create(model="m", max_tokens=7, messages=PROMPT)
    return {"text": "".join(b.text for b in message.content), "usage": message.usage.output_tokens}


def aiohttp_keep_alive(base):
    """aiohttp (llhttp, a strict parser): three streamed chats and a
    models list on one session; the connection is reused."""

    async def run():
        out, ports = [], set()
        async with aiohttp.ClientSession() as session:
            for n in range(3):
                sent()
                body = dict(CHAT, max_tokens=6 + n)
                async with session.post(base + "/v1/chat/completions", json=body) as response:
                    ports.add(response.connection.transport.get_extra_info("sockname")[1])
                    data = b""
                    async for piece in response.content.iter_any():
                        data += piece
                    out.append([response.status, sse_texts(data.split(b"\n"))])
            sent()
            async with session.get(base + "/v1/models") as response:
                out.append([response.status, [m["id"] for m in (await response.json())["data"]]])
        return {"answers": out, "connections": len(ports)}

    return asyncio.run(run())


def requests_ollama_ndjson(base):
    """requests, a streamed Ollama chat (NDJSON) read line by line."""
    with requests.Session() as session:
        sent()
        body = {"model": "m", "messages": PROMPT, "stream": True, "options": {"num_predict": 7}}
        response = session.post(base + "/api/chat", json=body, stream=True)
        lines = [json.loads(line) for line in response.iter_lines() if line]
    return {
        "status": response.status_code,
        "lines": len(lines),
        "text": "".join(l.get("message", {}).get("content", "") for l in lines),
        "done": [lines[-1].get("done"), lines[-1].get("eval_count")],
    }


def httpx_chunked_upload_and_keep_alive(base):
    """httpx: a request body sent chunked (a generator), then two more
    streamed chats on the same connection."""
    out, ports = [], set()
    with httpx.Client(timeout=30) as client:
        for n in range(3):
            sent()
            body = json.dumps(dict(CHAT, max_tokens=5 + n)).encode()
            content = iter([body[:20], body[20:]]) if n == 0 else body
            headers = {"content-type": "application/json"}
            with client.stream("POST", base + "/v1/chat/completions", content=content, headers=headers) as response:
                ports.add(response.extensions["network_stream"].get_extra_info("client_addr")[1])
                lines = [line.encode() for line in response.iter_lines()]
                out.append([response.status_code, response.http_version, sse_texts(lines)])
    return {"answers": out, "connections": len(ports)}


def hf_text_generation_stream(base):
    """huggingface_hub's InferenceClient given a TGI URL (as LangChain's
    HuggingFaceEndpoint uses it): a streamed text generation, POST to the
    server's root, every token with its details."""
    client = InferenceClient(model=base)
    sent()
    tokens = list(client.text_generation("Say something about clocks.", max_new_tokens=9, stream=True, details=True))
    last = tokens[-1].details
    return {
        "events": len(tokens),
        "text": "".join(t.token.text for t in tokens if not t.token.special),
        "details": [last.finish_reason, last.generated_tokens],
    }


def hf_text_generation_whole(base):
    """huggingface_hub's InferenceClient, a whole text generation with its
    details (TGI answers POST / with an array of one)."""
    client = InferenceClient(model=base)
    sent()
    out = client.text_generation("Say something about clocks.", max_new_tokens=8, details=True)
    return {"text": out.generated_text, "details": [out.details.finish_reason, out.details.generated_tokens]}


def requests_sglang_generate(base):
    """requests on SGLang's native /generate, streamed, read as SGLang's
    docs read it: each event's `text` is the whole text so far."""
    sent()
    body = {"text": "Say something about clocks.", "sampling_params": {"max_new_tokens": 7}, "stream": True}
    response = requests.post(base + "/generate", json=body, stream=True)
    text, events = "", 0
    for line in response.iter_lines():
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        data = json.loads(line[5:])
        text, events = data["text"], events + 1
    return {"status": response.status_code, "events": events, "text": text, "tokens": data["meta_info"]["completion_tokens"]}


def requests_llamacpp_infill(base):
    """requests on llama.cpp's /infill (fill-in-the-middle), streamed as
    llama.vscode's completion is read, then a whole one: each event's
    `content` is the next piece, the last event has the count."""
    sent()
    body = {"model": "m", "input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", "n_predict": 7, "stream": True}
    response = requests.post(base + "/infill", json=body, stream=True)
    text, events, last = "", 0, {}
    for line in response.iter_lines():
        if not line.startswith(b"data:"):
            continue
        last = json.loads(line[5:])
        text, events = text + last["content"], events + 1
    sent()
    whole = requests.post(base + "/infill", json=dict(body, stream=False, n_predict=5)).json()
    return {
        "status": response.status_code,
        "events": events,
        "text": text,
        "tokens": [last["tokens_predicted"], last["stop"]],
        "whole": [whole["content"], whole["tokens_predicted"]],
    }


def openai_chat_stream_closed_early(base):
    """The OpenAI SDK closes a slow stream after three chunks (a user who
    pressed stop): the stream ends there for the client, without an error."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    sent()
    stream = client.chat.completions.create(
        model="m",
        messages=PROMPT,
        stream=True,
        max_tokens=200,
        extra_headers={"x-sim-schedule": "ttft_ms=10,gap_ms=50,tokens=200"},
    )
    texts = []
    for chunk in stream:
        texts.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
        if len(texts) == 3:
            break
    stream.close()
    return {"chunks": len(texts), "text": "".join(texts)}


def httpx_vllm_token_ids(base):
    """httpx on vLLM's token-in/token-out /inference/v1/generate, as RL
    rollout workers call it: the prompt as token ids, each event's choice
    the step's `token_ids` and no text, a usage chunk at the end."""
    sent()
    body = {
        "model": "m",
        "token_ids": [9906, 11, 1917, 0],
        "sampling_params": {"max_tokens": 6},
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    ids, usage = [], {}
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", base + "/inference/v1/generate", json=body) as response:
            for line in response.iter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                for choice in chunk["choices"]:
                    ids.extend(choice["token_ids"])
                usage = chunk.get("usage") or usage
            status = response.status_code
    return {"status": status, "ids": ids, "usage": [usage.get("prompt_tokens"), usage.get("completion_tokens")]}


# Not run unless asked for (`--only`): it ends its request early.
CANCELLING = [openai_chat_stream_closed_early]

SCENARIOS = [
    openai_chat_stream,
    openai_chat_stream_usage,
    openai_chat_whole,
    openai_completions_stream,
    openai_responses_stream,
    anthropic_stream,
    anthropic_whole,
    aiohttp_keep_alive,
    requests_ollama_ndjson,
    httpx_chunked_upload_and_keep_alive,
    hf_text_generation_stream,
    hf_text_generation_whole,
    requests_sglang_generate,
    requests_llamacpp_infill,
    httpx_vllm_token_ids,
]


def main():
    base = sys.argv[1].rstrip("/")
    only = None
    if len(sys.argv) > 3 and sys.argv[2] == "--only":
        only = set(sys.argv[3].split(","))
    results = {}
    for scenario in SCENARIOS + CANCELLING:
        wanted = scenario.__name__ in only if only is not None else scenario not in CANCELLING
        if not wanted:
            continue
        try:
            results[scenario.__name__] = scenario(base)
        except Exception as e:  # reported, so one failure shows with the rest
            results[scenario.__name__] = {"error": f"{type(e).__name__}: {e}"}
    results["requests"] = SENT["requests"]
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
