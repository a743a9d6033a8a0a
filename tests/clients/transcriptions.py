#!/usr/bin/env python3
"""transcriptions.py: speech to text over HTTP, both ends, for
tests/it/clients.rs: a server in the two shapes `/v1/audio/transcriptions`
and `/v1/audio/translations` answer in, and the clients their users run
(the OpenAI Python SDK, and httpx as vLLM's own example streams with it).

Usage:
  transcriptions.py serve        prints the port it listens on (127.0.0.1),
                                 and serves until its stdin closes or it is
                                 killed
  transcriptions.py client URL   runs every client scenario against URL
                                 (http://HOST:PORT) and prints one JSON
                                 object: per scenario, what it read, or its
                                 error

The server reads the request as the servers do, a multipart form (aiohttp's
parser): the audio file, `model`, `stream`, `stream_include_usage`,
`include[]`. Its transcript is one word per 1,000 bytes of audio. A model
named `gpt-4o…` answers as OpenAI does: `transcript.text.delta` events (one
`logprobs` entry per word when `include[]=logprobs`), then
`transcript.text.done` with the text and its token usage; any other model
as vLLM does (Whisper): `transcription.chunk` (or `translation.chunk`)
objects shaped as chat chunks, one per word, a usage chunk when
`stream_include_usage`, `[DONE]`. Unstreamed, a JSON body with the text and
its usage (in tokens for `gpt-4o…`, in seconds of audio otherwise). Events
go out a few milliseconds apart. The GPU servers themselves cannot run
here; this speaks their wire formats.
"""
import asyncio
import json

from both_ends import main, run_all

AUDIO = bytes(range(256)) * 47  # 12,032 bytes: 12 words


def transcript(audio_bytes):
    return [f" word{i}" for i in range(max(1, audio_bytes // 1000))]


def truthy(value):
    return str(value).lower() in ("true", "1", "yes", "on")


async def transcribe(request):
    from aiohttp import web

    form = await request.post()
    file = form.get("file")
    audio = len(file.file.read()) if hasattr(file, "file") else 0
    model = str(form.get("model", ""))
    words = transcript(audio)
    text = "".join(words)
    openai_shape = model.startswith("gpt-4o")
    prompt = audio // 100
    tokens = {
        "type": "tokens",
        "input_tokens": prompt,
        "input_token_details": {"text_tokens": 0, "audio_tokens": prompt},
        "output_tokens": len(words),
        "total_tokens": prompt + len(words),
    }
    if not truthy(form.get("stream", "false")):
        usage = tokens if openai_shape else {"type": "duration", "seconds": 1}
        return web.json_response({"text": text, "usage": usage})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)

    async def send(event):
        await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await asyncio.sleep(0.002)

    if openai_shape:
        logprobs = "logprobs" in form.getall("include[]", [])
        for word in words:
            event = {"type": "transcript.text.delta", "delta": word}
            if logprobs:
                event["logprobs"] = [
                    {"token": word, "logprob": -0.01, "bytes": list(word.encode())}
                ]
            await send(event)
        await send({"type": "transcript.text.done", "text": text, "usage": tokens})
    else:
        kind = "translation" if request.path.endswith("translations") else "transcription"
        base = {"id": "trsc-1", "object": f"{kind}.chunk", "created": 0, "model": model}
        for i, word in enumerate(words):
            choice = {"delta": {"content": word}}
            if i == len(words) - 1:
                choice.update(finish_reason="stop", stop_reason=None)
            await send(dict(base, choices=[choice]))
        if truthy(form.get("stream_include_usage", "false")):
            usage = {
                "prompt_tokens": prompt,
                "total_tokens": prompt + len(words),
                "completion_tokens": len(words),
            }
            await send(dict(base, choices=[], usage=usage))
        await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def dumped(event):
    return event.model_dump() if hasattr(event, "model_dump") else event


def scenarios(url):
    import httpx
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
    def openai_stream():
        stream = client.audio.transcriptions.create(
            model="gpt-4o-mini-transcribe",
            file=("speech.wav", AUDIO),
            stream=True,
            include=["logprobs"],
        )
        deltas, usage = [], None
        for event in stream:
            event = dumped(event)
            if event.get("type") == "transcript.text.delta":
                deltas.append([event["delta"], len(event.get("logprobs") or [])])
            elif event.get("type") == "transcript.text.done":
                usage = event.get("usage")
        return {"deltas": deltas, "usage": usage}

    def vllm_stream():
        # vLLM's flattened stream option, sent as a form field.
        stream = client.audio.transcriptions.create(
            model="openai/whisper-large-v3",
            file=("speech.wav", AUDIO),
            stream=True,
            extra_body={"stream_include_usage": True},
        )
        text, usage = [], None
        for event in stream:
            event = dumped(event)
            for choice in event.get("choices") or []:
                text.append((choice.get("delta") or {}).get("content"))
            usage = event.get("usage") or usage
        return {"text": text, "usage": usage}

    def httpx_translation_stream():
        # As vLLM's examples/online_serving/openai_transcription_client.py
        # streams: httpx, the form by hand, the SSE lines read one by one.
        data = {"model": "openai/whisper-large-v3", "stream": "true"}
        files = {"file": ("speech.wav", AUDIO, "audio/wav")}
        lines = []
        with httpx.Client(timeout=10) as h:
            with h.stream("POST", f"{url}/v1/audio/translations", data=data, files=files) as r:
                r.raise_for_status()
                for line in r.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        chunk = json.loads(line[len("data: "):])
                        lines.append(chunk["choices"][0]["delta"]["content"])
        return {"text": lines}

    def openai_whole():
        t = client.audio.transcriptions.create(
            model="gpt-4o-transcribe", file=("speech.wav", AUDIO)
        )
        return {"text": t.text, "usage": dumped(t.usage)}

    def whisper_whole():
        t = client.audio.translations.create(model="whisper-1", file=("speech.wav", AUDIO))
        return {"text": t.text}

    return run_all(
        [
            ("openai_stream", openai_stream),
            ("vllm_stream", vllm_stream),
            ("httpx_translation_stream", httpx_translation_stream),
            ("openai_whole", openai_whole),
            ("whisper_whole", whisper_whole),
        ]
    )


if __name__ == "__main__":
    routes = [("/v1/audio/transcriptions", transcribe), ("/v1/audio/translations", transcribe)]
    main(__doc__, routes, scenarios)
