#!/usr/bin/env bash
# Makes the venv tests/it/clients.rs runs tests/clients/clients.py with:
# target/venv-clients, with the HTTP clients and SDKs tokenclock's users
# put in front of it, pinned. With brotli, zstandard and backports.zstd
# installed, httpx and aiohttp ask for `br` and `zstd` as they do in the
# field (aiohttp's `speedups` extra installs brotli, LiteLLM pulls
# zstandard in; aiohttp reads zstd with backports.zstd);
# tests/clients/compressing_upstream.py compresses with them.
# huggingface_hub's InferenceClient is TGI's own client (LangChain's
# HuggingFaceEndpoint uses it). websockets runs the OpenAI SDK's realtime
# client, and tests/clients/realtime.py's server and client; ollama is
# Ollama's own Python client (tests/clients/embeddings.py); numpy is what
# InferenceClient's feature_extraction returns its vectors in (TEI's
# clients, tests/clients/embeddings.py); cohere is Cohere's Python SDK,
# which RAG pipelines rerank with, against Cohere or vLLM
# (tests/clients/rerank.py). Run by
# tests/run.sh; a failure fails the run (the client tests fail, never
# skip, without it).
set -euo pipefail
exec bash "$(dirname "$0")/../venv.sh" clients \
  openai==3.63.0 anthropic==2.17.0 httpx==0.29.0 requests==2.34.2 aiohttp==3.14.5 \
  brotli==1.2.0 zstandard==0.25.0 backports.zstd==1.8.0 huggingface_hub==2.4.0 \
  websockets==15.0.1 ollama==0.6.3 numpy==2.3.5 \
  cohere==7.3.1
