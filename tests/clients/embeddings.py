#!/usr/bin/env python3
"""embeddings.py: embeddings over HTTP, both ends, for tests/it/clients.rs:
a server that answers `/v1/embeddings` and `/embeddings` in the shapes
OpenAI and vLLM answer in, `/api/embed` and `/api/embeddings` as Ollama
does, and `POST /`, `/embed`, `/rerank` and `/predict` as Text Embeddings
Inference (TEI) does, and the clients their users run (the OpenAI Python
SDK, Ollama's Python client, huggingface_hub's InferenceClient, and httpx
as a RAG pipeline posts by hand).

Usage:
  embeddings.py serve        prints the port it listens on (127.0.0.1), and
                             serves until its stdin closes or it is killed
  embeddings.py client URL   runs every client scenario against URL
                             (http://HOST:PORT) and prints one JSON object:
                             per scenario, what it read, or its error

The server reads `input` (a string, a list of strings, or token ids),
`model`, `encoding_format` and `dimensions`, and answers one vector per
input, its numbers drawn from the input's text, `encoding_format: base64`
as OpenAI packs them (little-endian float32, base64). A model named
`text-embedding…` answers as OpenAI does: the JSON indented by 2 spaces,
`data` first, then `model` and `usage`, compressed with gzip when the
client accepts it; any other model as vLLM does: compact, `id`, `created`
and `model` before `data`. `usage.prompt_tokens` is one token per word of
each text input, one per id of a token-id input. `/api/embed` answers
Ollama's `{"model", "embeddings", "total_duration", "load_duration",
"prompt_eval_count"}`, the count as above; its former route
`/api/embeddings` answers `{"embedding": [...]}` for one `prompt`, with no
count. TEI's routes answer as its router does: `POST /` and `/embed` a
bare array of 1,024-number vectors for `inputs` (a string or a list),
`/rerank` `[{"index", "score"}]` for `query` and `texts`, best first,
`/predict` `[{"score", "label"}]` for `inputs`, each with the headers
TEI's router adds to every answer (`x-compute-type`, `x-compute-tokens`,
its count of the tokens run, one per word here, the query once per text
for `/rerank`, and its times in ms). The GPU servers cannot run here;
this speaks their wire formats.
"""
import base64
import hashlib
import json
import struct

from both_ends import main, run_all

TEXTS = [f"chunk {i} of a document about tide pools and the animals in them" for i in range(96)]


def vector(text, dims):
    seed = hashlib.sha256(text.encode()).digest()
    return [((seed[d % 32] + d * 37) % 255 - 127) / 1270.0 for d in range(dims)]


def tokens(item):
    return len(item) if isinstance(item, list) else len(str(item).split())


async def embeddings(request):
    from aiohttp import web

    body = await request.json()
    model = body["model"]
    inputs = body["input"]
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    dims = int(body.get("dimensions") or 1536)
    data = []
    for i, item in enumerate(inputs):
        v = vector(json.dumps(item), dims)
        if body.get("encoding_format") == "base64":
            v = base64.b64encode(struct.pack(f"<{dims}f", *v)).decode()
        data.append({"object": "embedding", "index": i, "embedding": v})
    prompt = sum(tokens(item) for item in inputs)
    usage = {"prompt_tokens": prompt, "total_tokens": prompt}
    if model.startswith("text-embedding"):
        answer = {"object": "list", "data": data, "model": model, "usage": usage}
        response = web.Response(
            text=json.dumps(answer, indent=2), content_type="application/json"
        )
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            # gzip, as OpenAI answers (aiohttp would pick deflate first).
            response.enable_compression(web.ContentCoding.gzip)
        return response
    answer = {
        "id": "embd-6a1f0c",
        "object": "list",
        "created": 1764990000,
        "model": model,
        "data": data,
        "usage": dict(usage, completion_tokens=0, prompt_tokens_details=None),
    }
    return web.Response(
        text=json.dumps(answer, separators=(",", ":")), content_type="application/json"
    )


async def ollama_embed(request):
    from aiohttp import web

    body = await request.json()
    inputs = body.get("input", body.get("prompt"))
    if isinstance(inputs, str):
        inputs = [inputs]
    vectors = [vector(text, 768) for text in inputs]
    if request.path == "/api/embeddings":
        return web.json_response({"embedding": vectors[0]})
    answer = {
        "model": body["model"],
        "embeddings": vectors,
        "total_duration": 41200541,
        "load_duration": 2095833,
        "prompt_eval_count": sum(tokens(text) for text in inputs),
    }
    return web.json_response(answer)


def tei_headers(tokens, chars):
    """The headers TEI's router adds to every answer (`ResponseMetadata`)."""
    return {
        "x-compute-type": "gpu+optimized",
        "x-compute-time": "6",
        "x-compute-characters": str(chars),
        "x-compute-tokens": str(tokens),
        "x-total-time": "6",
        "x-tokenization-time": "0",
        "x-queue-time": "1",
        "x-inference-time": "4",
    }


async def tei(request):
    from aiohttp import web

    body = await request.json()
    if request.path == "/rerank":
        query, texts = body["query"], body["texts"]
        ranks = [
            {"index": i, "score": vector(query + text, 1)[0]} for i, text in enumerate(texts)
        ]
        ranks.sort(key=lambda r: r["score"], reverse=True)
        count = sum(tokens(query) + tokens(text) for text in texts)
        chars = sum(len(query) + len(text) for text in texts)
        return web.json_response(ranks, headers=tei_headers(count, chars))
    inputs = body["inputs"]
    batch = inputs if isinstance(inputs, list) else [inputs]
    count = sum(tokens(text) for text in batch)
    chars = sum(len(text) for text in batch)
    if request.path == "/predict":
        score = abs(vector(batch[0], 1)[0])
        answer = [{"score": 1 - score, "label": "positive"}, {"score": score, "label": "negative"}]
    else:
        answer = [vector(text, 1024) for text in batch]
    return web.json_response(answer, headers=tei_headers(count, chars))


def summary(vectors, usage, model):
    """What a client read: how many vectors, their size, a digest of all
    their numbers (rounded as float32 keeps them), the usage and model."""
    digest = hashlib.sha256()
    for v in vectors:
        digest.update(json.dumps([round(x, 5) for x in v]).encode())
    return {
        "vectors": len(vectors),
        "dims": len(vectors[0]) if vectors else 0,
        "digest": digest.hexdigest(),
        "prompt_tokens": usage["prompt_tokens"],
        "model": model,
    }


def scenarios(url):
    import httpx
    import ollama
    import openai
    from huggingface_hub import InferenceClient

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
    def sdk(**kwargs):
        raw = client.embeddings.with_raw_response.create(**kwargs)
        r = raw.parse()
        read = summary([d.embedding for d in r.data], r.usage.model_dump(), r.model)
        read["encoding"] = raw.headers.get("content-encoding")
        return read

    def openai_batch_base64():
        # The SDK asks for base64 unless told otherwise, and decodes it.
        return sdk(model="text-embedding-3-small", input=TEXTS)

    def openai_batch_float():
        # 96 vectors of 1,536 numbers as text: about 4 MB, past max_event_bytes.
        return sdk(model="text-embedding-3-large", input=TEXTS, encoding_format="float")

    def vllm_batch_float():
        return sdk(model="BAAI/bge-m3", input=TEXTS[:64], encoding_format="float", dimensions=1024)

    def vllm_token_ids():
        return sdk(model="BAAI/bge-m3", input=[101, 7592, 2088, 102], encoding_format="float")

    def httpx_one():
        # A RAG pipeline's hand-made request, on LiteLLM's path.
        with httpx.Client(timeout=10) as h:
            r = h.post(
                f"{url}/embeddings",
                json={"model": "intfloat/e5-small", "input": "where do hermit crabs live"},
            )
            r.raise_for_status()
            answer = r.json()
        vectors = [d["embedding"] for d in answer["data"]]
        return summary(vectors, answer["usage"], answer["model"])

    ollama_client = ollama.Client(host=url)

    def ollama_embed_batch():
        # As LangChain's OllamaEmbeddings calls it.
        r = ollama_client.embed(model="nomic-embed-text", input=TEXTS)
        return summary(r.embeddings, {"prompt_tokens": r.prompt_eval_count}, r.model)

    def ollama_embeddings_former():
        r = ollama_client.embeddings(model="nomic-embed-text", prompt="where do limpets live")
        return summary([r.embedding], {"prompt_tokens": None}, None)

    hf = InferenceClient(model=url)

    def hf_feature_extraction():
        # What LangChain's HuggingFaceEndpointEmbeddings calls: `POST /`.
        vectors = hf.feature_extraction(TEXTS[:16]).tolist()
        count = sum(tokens(text) for text in TEXTS[:16])
        return summary(vectors, {"prompt_tokens": count}, None)

    def tei_by_hand(path, body):
        # As LlamaIndex's TextEmbeddingsInference posts (httpx), reading
        # TEI's count from its head.
        with httpx.Client(timeout=10) as h:
            r = h.post(f"{url}{path}", json=body)
            r.raise_for_status()
            return r.json(), int(r.headers["x-compute-tokens"])

    def tei_embed_batch():
        vectors, count = tei_by_hand("/embed", {"inputs": TEXTS[:48], "truncate": True})
        return summary(vectors, {"prompt_tokens": count}, None)

    def tei_rerank():
        query = "which animals live in tide pools"
        ranks, count = tei_by_hand("/rerank", {"query": query, "texts": TEXTS[:20]})
        return {"ranks": ranks, "prompt_tokens": count, "model": None}

    def tei_predict():
        labels, count = tei_by_hand("/predict", {"inputs": "I love tide pools"})
        return {"labels": labels, "prompt_tokens": count, "model": None}

    return run_all(
        [
            ("openai_batch_base64", openai_batch_base64),
            ("openai_batch_float", openai_batch_float),
            ("vllm_batch_float", vllm_batch_float),
            ("vllm_token_ids", vllm_token_ids),
            ("httpx_one", httpx_one),
            ("ollama_embed_batch", ollama_embed_batch),
            ("ollama_embeddings_former", ollama_embeddings_former),
            ("hf_feature_extraction", hf_feature_extraction),
            ("tei_embed_batch", tei_embed_batch),
            ("tei_rerank", tei_rerank),
            ("tei_predict", tei_predict),
        ]
    )


if __name__ == "__main__":
    routes = [("/v1/embeddings", embeddings), ("/embeddings", embeddings)]
    routes += [("/api/embed", ollama_embed), ("/api/embeddings", ollama_embed)]
    routes += [(path, tei) for path in ["/", "/embed", "/rerank", "/predict"]]
    main(__doc__, routes, scenarios)
