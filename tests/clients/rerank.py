#!/usr/bin/env python3
"""rerank.py: reranking over HTTP, both ends, for tests/it/clients.rs: a
server that answers `/v1/rerank`, `/v2/rerank` and `/rerank` in the shapes
Cohere, Jina and vLLM answer in, and `/score` and `/v1/score` as vLLM
does, and the clients RAG pipelines rerank with (Cohere's Python SDK, v1
and v2, and httpx as Jina's and vLLM's docs post).

Usage:
  rerank.py serve        prints the port it listens on (127.0.0.1), and
                         serves until its stdin closes or it is killed
  rerank.py client URL   runs every client scenario against URL
                         (http://HOST:PORT) and prints one JSON object:
                         per scenario, what it read, or its error

The server scores each (query, document) pair from their text and answers
the best `top_n` (all when absent or 0) first. A model named `rerank-…`
answers as Cohere does (`id`, `results` of `index` and `relevance_score`,
`meta` billing search units: no model, no token count); `jina-…` as Jina
does (`model`, `usage.total_tokens`, then `results`, each echoing its
document); `Qwen/Qwen3-Reranker…` as SGLang serves it (a bare array of
`score`, `document`, `index` and `meta_info`: no model, no token count);
any other as vLLM does (`id`, `model`, `usage` with `prompt_tokens` and
`total_tokens`, then `results`, each echoing its document). `/score` answers vLLM's `{"id", "object", "created", "model",
"data", "usage"}` for `text_1` against each of `text_2`. The tokens are
one per word of the query and of the document, for each pair. The GPU
servers cannot run here; this speaks their wire formats.
"""
import hashlib

from both_ends import main, run_all

DOCUMENTS = [
    f"passage {i}: tide pools hold anemones, hermit crabs and limpets " + "and kelp " * 500
    for i in range(300)
]
QUERY = "which animals shelter in tide pools"


def score(query, document):
    seed = hashlib.sha256((query + "\0" + document).encode()).digest()
    return round(int.from_bytes(seed[:4], "little") / 2**32, 6)


def tokens(text):
    return len(text.split())


def text_of(document):
    return document["text"] if isinstance(document, dict) else document


async def rerank(request):
    from aiohttp import web

    body = await request.json()
    model, query = body["model"], body["query"]
    documents = [text_of(d) for d in body["documents"]]
    ranked = sorted(range(len(documents)), key=lambda i: -score(query, documents[i]))
    top = body.get("top_n") or len(documents)
    count = sum(tokens(query) + tokens(d) for d in documents)
    if model.startswith("Qwen/Qwen3-Reranker"):
        items = [
            {"score": score(query, documents[i]), "document": documents[i], "index": i,
             "meta_info": {"id": f"r{i}", "finish_reason": None}}
            for i in ranked[:top]
        ]
        return web.json_response(items)
    if model.startswith("rerank-"):
        results = [{"index": i, "relevance_score": score(query, documents[i])} for i in ranked[:top]]
        meta = {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}
        return web.json_response({"id": "07734bd2-2473", "results": results, "meta": meta})
    results = [
        {"index": i, "document": {"text": documents[i]}, "relevance_score": score(query, documents[i])}
        for i in ranked[:top]
    ]
    if model.startswith("jina-"):
        answer = {"model": model, "usage": {"total_tokens": count}, "results": results}
    else:
        for r in results:
            r["document"]["multi_modal"] = None
        usage = {"prompt_tokens": count, "total_tokens": count}
        answer = {"id": "rerank-3f1c2a9b", "model": model, "usage": usage, "results": results}
    return web.json_response(answer)


async def score_pairs(request):
    from aiohttp import web

    body = await request.json()
    first, seconds = body["text_1"], body["text_2"]
    seconds = seconds if isinstance(seconds, list) else [seconds]
    data = [
        {"index": i, "object": "score", "score": score(first, text)}
        for i, text in enumerate(seconds)
    ]
    count = sum(tokens(first) + tokens(text) for text in seconds)
    usage = {"prompt_tokens": count, "total_tokens": count, "completion_tokens": 0}
    answer = {
        "id": "score-8c2d6e0f",
        "object": "list",
        "created": 1764990000,
        "model": body["model"],
        "data": data,
        "usage": dict(usage, prompt_tokens_details=None),
    }
    return web.json_response(answer)


def scenarios(url):
    import cohere
    import httpx

    def read(ranks, prompt_tokens, model, query, documents):
        """What a client read, and the bytes of text it sent."""
        return {
            "ranks": [[index, round(s, 6)] for index, s in ranks],
            "prompt_tokens": prompt_tokens,
            "model": model,
            "text_bytes": len(query.encode()) + sum(len(d.encode()) for d in documents),
        }

    v2 = cohere.ClientV2(api_key="test-key", base_url=url, timeout=10)
    v1 = cohere.Client(api_key="test-key", base_url=url, timeout=10)

    def cohere_v2():
        # Cohere's own shape: no model, no token count.
        docs = DOCUMENTS[:20]
        r = v2.rerank(model="rerank-v3.5", query=QUERY, documents=docs, top_n=5)
        ranks = [(x.index, x.relevance_score) for x in r.results]
        return read(ranks, None, None, QUERY, docs)

    def cohere_v2_on_vllm():
        # vLLM's `/v2/rerank`, as its docs call it with Cohere's SDK.
        docs = DOCUMENTS[:40]
        r = v2.rerank(model="BAAI/bge-reranker-v2-m3", query=QUERY, documents=docs, top_n=3)
        ranks = [(x.index, x.relevance_score) for x in r.results]
        # The SDK keeps the members it does not know.
        return read(ranks, r.usage["prompt_tokens"], r.model, QUERY, docs)

    def cohere_v1():
        docs = DOCUMENTS[:10]
        r = v1.rerank(model="rerank-english-v3.0", query=QUERY, documents=docs)
        ranks = [(x.index, x.relevance_score) for x in r.results]
        return read(ranks, None, None, QUERY, docs)

    def by_hand(path, body):
        with httpx.Client(timeout=10) as h:
            r = h.post(f"{url}{path}", json=body)
            r.raise_for_status()
            return r.json()

    def jina_all():
        # Every document echoed: about 1.2 MB, past max_event_bytes.
        model = "jina-reranker-v2-base-multilingual"
        answer = by_hand("/v1/rerank", {"model": model, "query": QUERY, "documents": DOCUMENTS})
        ranks = [(x["index"], x["relevance_score"]) for x in answer["results"]]
        return read(ranks, answer["usage"]["total_tokens"], answer["model"], QUERY, DOCUMENTS)

    def vllm_rerank():
        model = "BAAI/bge-reranker-v2-m3"
        docs = DOCUMENTS[:8]
        answer = by_hand("/rerank", {"model": model, "query": QUERY, "documents": docs})
        ranks = [(x["index"], x["relevance_score"]) for x in answer["results"]]
        return read(ranks, answer["usage"]["prompt_tokens"], answer["model"], QUERY, docs)

    def sglang_rerank():
        # SGLang's `/v1/rerank`, as its docs post it.
        model = "Qwen/Qwen3-Reranker-0.6B"
        docs = DOCUMENTS[:6]
        items = by_hand("/v1/rerank", {"model": model, "query": QUERY, "documents": docs})
        ranks = [(x["index"], x["score"]) for x in items]
        return read(ranks, None, None, QUERY, docs)

    def vllm_score():
        model = "BAAI/bge-reranker-v2-m3"
        docs = DOCUMENTS[:4]
        answer = by_hand("/score", {"model": model, "text_1": QUERY, "text_2": docs})
        ranks = [(x["index"], x["score"]) for x in answer["data"]]
        return read(ranks, answer["usage"]["prompt_tokens"], answer["model"], QUERY, docs)

    return run_all(
        [
            ("cohere_v2", cohere_v2),
            ("cohere_v2_on_vllm", cohere_v2_on_vllm),
            ("cohere_v1", cohere_v1),
            ("jina_all", jina_all),
            ("vllm_rerank", vllm_rerank),
            ("sglang_rerank", sglang_rerank),
            ("vllm_score", vllm_score),
        ]
    )


if __name__ == "__main__":
    routes = [(path, rerank) for path in ["/v1/rerank", "/v2/rerank", "/rerank"]]
    routes += [(path, score_pairs) for path in ["/score", "/v1/score"]]
    main(__doc__, routes, scenarios)
