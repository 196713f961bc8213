// Records ./cassettes once: the gateway of ./gateway.json in record mode, its provider pointed at
// a small OpenAI-compatible upstream on 127.0.0.1, asked what test/kit.test.ts asks offline.
// Point `base_url` and `api_keys` at a real provider to freeze real answers instead; no key is
// ever written to a cassette. Run: npm run record (after `npm run test:examples` installed the package).
import { readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { startGateway } from "model-gateway";
import OpenAI from "openai";

const here = (path) => new URL(path, import.meta.url).pathname;
const config = JSON.parse(readFileSync(here("gateway.json"), "utf8"));
const provider = config.providers[0];
const appKey = config.accounts[0].keys[0].value;
const usage = { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 };

/** Answers as the OpenAI API does, and refuses what it would refuse. */
const upstream = createServer((req, res) => {
  let raw = "";
  req.on("data", (piece) => {
    raw += piece;
  });
  req.on("end", async () => {
    const fail = (status, message) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message, type: "invalid_request_error" } }));
    };
    if (req.method !== "POST" || req.url !== "/v1/chat/completions") return fail(404, "Not found");
    if (req.headers.authorization !== `Bearer ${provider.api_keys[0]}`) {
      return fail(401, "Incorrect API key provided");
    }
    const body = JSON.parse(raw);
    if (typeof body.model !== "string" || !Array.isArray(body.messages)) {
      return fail(400, "model and messages are required");
    }
    const base = { id: "chatcmpl-recorded", created: 1_900_000_000, model: body.model };
    if (!body.stream) {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(
        JSON.stringify({
          ...base,
          object: "chat.completion",
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: "Hello from the recorded model." },
              finish_reason: "stop",
            },
          ],
          usage,
        }),
      );
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = (delta, finish_reason = null) => ({
      ...base,
      object: "chat.completion.chunk",
      choices: [{ index: 0, delta, finish_reason }],
    });
    const events = [
      chunk({ role: "assistant", content: "" }),
      ...["Streamed ", "from the ", "recording."].map((content) => chunk({ content })),
      chunk({}, "stop"),
    ];
    if (body.stream_options?.include_usage) events.push({ ...chunk({}), choices: [], usage });
    // Apart in time, so the cassette keeps the stream's pieces as a real provider sends them.
    for (const event of events) {
      res.write(`data: ${JSON.stringify(event)}\n\n`);
      await sleep(20);
    }
    res.end("data: [DONE]\n\n");
  });
});
await new Promise((resolve) => upstream.listen(0, "127.0.0.1", resolve));
provider.base_url = `http://127.0.0.1:${upstream.address().port}/v1`;

const dir = here("cassettes");
rmSync(dir, { recursive: true, force: true });
const gateway = await startGateway({ config, db: ":memory:", cassettes: { dir, mode: "record" } });
try {
  const openai = new OpenAI({ apiKey: appKey, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
  const answer = await openai.chat.completions.create({
    model: "app-chat",
    messages: [{ role: "user", content: "Say hello to the CI" }],
  });
  console.log("chat:", answer.choices[0].message.content);
  const stream = await openai.chat.completions.create({
    model: "app-chat",
    stream: true,
    messages: [{ role: "user", content: "Stream a greeting" }],
  });
  let text = "";
  for await (const part of stream) text += part.choices[0]?.delta?.content ?? "";
  console.log("stream:", text);
} finally {
  await gateway.close();
  upstream.close();
}
console.log(`cassettes recorded in ${dir}`);
