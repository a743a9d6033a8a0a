// fetch.mjs: Node's own fetch (undici, whose parser is llhttp), the
// client of JavaScript SDKs and browsers' server-side code, through one
// base URL (tokenclock's, or the simulator's for the reference).
//
// Usage: node fetch.mjs BASE_URL
//
// Prints one JSON object, as tests/clients/clients.py does: per scenario
// what the client made of the responses, or {"error": ...}; "requests"
// counts the requests sent. tests/it/clients.rs compares the two runs.

const base = process.argv[2].replace(/\/$/, "");
const prompt = [{ role: "user", content: "Say something about clocks." }];
let requests = 0;

async function post(path, body) {
  requests += 1;
  return fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

// The body as it arrives, piece by piece, decoded into lines.
async function lines(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let pieces = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    pieces += 1;
    text += decoder.decode(value, { stream: true });
  }
  text += decoder.decode();
  return { lines: text.split("\n"), pieces };
}

// The JSON of each SSE `data:` line but `[DONE]`.
function data(all) {
  return all
    .filter((l) => l.startsWith("data: ") && l !== "data: [DONE]")
    .map((l) => JSON.parse(l.slice("data: ".length)));
}

const scenarios = {
  // A streamed chat, read incrementally.
  async chat_stream() {
    const response = await post("/v1/chat/completions", {
      model: "m", messages: prompt, stream: true, max_tokens: 12,
    });
    const chunks = data((await lines(response)).lines);
    return {
      status: response.status,
      type: response.headers.get("content-type"),
      chunks: chunks.length,
      text: chunks.map((c) => (c.choices[0] && c.choices[0].delta.content) || "").join(""),
    };
  },
  // A chat answered whole, its length declared.
  async chat_whole() {
    const response = await post("/v1/chat/completions", { model: "m", messages: prompt, max_tokens: 9 });
    const answer = await response.json();
    return { status: response.status, text: answer.choices[0].message.content, usage: answer.usage.completion_tokens };
  },
  // A streamed Anthropic message: named events.
  async anthropic_stream() {
    requests += 1;
    const response = await fetch(base + "/v1/messages", {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: "m", messages: prompt, stream: true, max_tokens: 8 }),
    });
    const all = (await lines(response)).lines;
    const events = data(all);
    return {
      status: response.status,
      kinds: all.filter((l) => l.startsWith("event: ")).map((l) => l.slice("event: ".length)),
      text: events.filter((e) => e.type === "content_block_delta").map((e) => e.delta.text).join(""),
    };
  },
  // A streamed Ollama generate (NDJSON).
  async ollama_generate() {
    const response = await post("/api/generate", { model: "m", prompt: "Clocks", stream: true, options: { num_predict: 6 } });
    const objects = (await lines(response)).lines.filter((l) => l).map((l) => JSON.parse(l));
    return {
      status: response.status,
      text: objects.map((o) => o.response || "").join(""),
      done: objects[objects.length - 1].done,
    };
  },
  // A GET with no body.
  async models() {
    requests += 1;
    const response = await fetch(base + "/v1/models");
    return { status: response.status, ids: (await response.json()).data.map((m) => m.id) };
  },
};

const results = {};
for (const [name, scenario] of Object.entries(scenarios)) {
  try {
    results[name] = await scenario();
  } catch (e) {
    results[name] = { error: `${e.name}: ${e.message}${e.cause ? ` (${e.cause})` : ""}` };
  }
}
results.requests = requests;
console.log(JSON.stringify(results));
