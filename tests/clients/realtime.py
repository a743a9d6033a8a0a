#!/usr/bin/env python3
"""realtime.py: a Realtime API session over WebSocket, both ends, for
tests/it/clients.rs: the server in the shape of vLLM's Realtime API
(`/v1/realtime`, streaming transcription), and the clients its users run:
the OpenAI Python SDK's realtime client and the `websockets` library (which
the SDK runs on, and vLLM's own examples use).

Usage:
  realtime.py serve        prints the port it listens on (127.0.0.1), and
                           serves until its stdin closes or it is killed
  realtime.py client URL   runs every client scenario against URL
                           (http://HOST:PORT) and prints one JSON object:
                           per scenario, the events read, or its error

The server, per session: `session.created` before the client says anything;
each `input_audio_buffer.append` is kept (base64 audio, counted in bytes);
on `input_audio_buffer.commit` it streams one `transcription.delta` per
word of a transcript as long as the audio (one word per 1,000 bytes), a few
milliseconds apart, then `transcription.done` with the text and its usage;
a close is answered (the server closes first, as RFC 6455 asks). The GPU
server itself cannot run here; this speaks its events.
"""
import asyncio
import base64
import json
import sys

import websockets


def transcript(audio_bytes):
    return [f" word{i}" for i in range(max(1, audio_bytes // 1000))]


async def session(ws):
    if ws.request.path.split("?")[0] != "/v1/realtime":
        await ws.close(code=1008, reason="unknown path")
        return
    await ws.send(json.dumps({"type": "session.created", "id": "sess-1"}))
    audio = 0
    async for message in ws:
        event = json.loads(message)
        kind = event.get("type")
        if kind == "input_audio_buffer.append":
            audio += len(base64.b64decode(event["audio"]))
        elif kind == "input_audio_buffer.commit":
            words = transcript(audio)
            for word in words:
                await ws.send(json.dumps({"type": "transcription.delta", "delta": word}))
                await asyncio.sleep(0.002)
            usage = {"prompt_tokens": audio // 100, "completion_tokens": len(words)}
            done = {"type": "transcription.done", "text": "".join(words), "usage": usage}
            await ws.send(json.dumps(done))
            audio = 0


async def serve():
    async with websockets.serve(session, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        print(port, flush=True)
        # Until stdin closes (the test ends) or the process is killed.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def audio_events(chunks):
    """Three chunks of audio of 2,000 bytes each, then the commit."""
    events = []
    for i in range(chunks):
        pcm = bytes((i * 7 + j) % 256 for j in range(2000))
        events.append({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})
    events.append({"type": "input_audio_buffer.commit"})
    return events


async def openai_realtime(base):
    """The OpenAI SDK's realtime client, given the server's base URL as a
    vLLM user gives it (`base_url=http://…/v1`): it connects to
    ws://…/v1/realtime?model=…"""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)
    read = []
    async with client.realtime.connect(model="voxtral", max_retries=0) as connection:
        for event in audio_events(3):
            await connection.send(event)
        async for event in connection:
            read.append(event.type)
            if event.type == "transcription.done":
                text, usage = event.text, event.usage
                break
    return {"events": read, "text": text, "usage": usage}


async def websockets_client(base):
    """The `websockets` library, as vLLM's realtime examples use it."""
    url = base.replace("http://", "ws://", 1) + "/v1/realtime?model=voxtral"
    read = []
    async with websockets.connect(url, max_size=2**20) as ws:
        read.append(json.loads(await ws.recv())["type"])
        for event in audio_events(5):
            await ws.send(json.dumps(event))
        while True:
            event = json.loads(await ws.recv())
            read.append(event["type"])
            if event["type"] == "transcription.done":
                break
        await ws.close()
        closed = ws.close_code
    return {"events": read, "text": event["text"], "usage": event["usage"], "close_code": closed}


async def clients(base):
    results = {}
    for name, scenario in [("openai_realtime", openai_realtime), ("websockets", websockets_client)]:
        try:
            results[name] = await asyncio.wait_for(scenario(base), 30)
        except Exception as e:  # reported, never raised: the test shows it
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(results))


def main():
    if sys.argv[1:2] == ["serve"]:
        asyncio.run(serve())
    elif sys.argv[1:2] == ["client"] and len(sys.argv) == 3:
        asyncio.run(clients(sys.argv[2].rstrip("/")))
    else:
        sys.exit("usage: realtime.py serve | realtime.py client URL")


if __name__ == "__main__":
    main()
