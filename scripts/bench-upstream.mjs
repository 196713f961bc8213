// A fake OpenAI-compatible upstream for the benchmark: keep-alive, a fixed small JSON answer, and
// a small SSE answer when the body asks for a stream. A body with `metadata.bench_pace_ms` gets a
// paced stream instead, as a provider sends one: the stream stays open and its chunks leave one at
// a time, that many ms apart (`pacedEvents` events reach a client that did not ask for usage). Run as a child process (it reports its URL
// over IPC) so its CPU does not count against the gateway's event loop.
import { createServer } from "node:http";

const completion = JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion",
  created: 1_700_000_000,
  model: "bench-upstream",
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: "Hello from the bench." },
      finish_reason: "stop",
    },
  ],
  usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 },
});

const chunk = (delta, finish = null) =>
  `data: ${JSON.stringify({
    id: "chatcmpl-bench",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "bench-upstream",
    choices: [{ index: 0, delta, finish_reason: finish }],
  })}\n\n`;

const usageChunk = `data: ${JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion.chunk",
  created: 1_700_000_000,
  model: "bench-upstream",
  choices: [],
  usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 },
})}\n\n`;

const streamFirst = chunk({ role: "assistant", content: "Hello" });
const streamRest = `${chunk({ content: " from the bench." }) + chunk({}, "stop") + usageChunk}data: [DONE]\n\n`;

// A paced stream: the first chunk, then one chunk every `pace` ms, the finish and the usage chunk.
// What a client that did not ask for usage receives (the usage chunk is the gateway's own) counts
// `pacedEvents` events with the closing `[DONE]`.
const pacedContent = 49;
export const pacedEvents = pacedContent + 3;
export const pacedChunks = [
  streamFirst,
  ...Array.from({ length: pacedContent }, (_, i) => chunk({ content: ` word${i}` })),
  chunk({}, "stop"),
  `${usageChunk}data: [DONE]\n\n`,
];
const paceField = /"bench_pace_ms":"(\d+)"/;

function sendPaced(res, pace) {
  let next = 0;
  const send = () => {
    if (res.destroyed) return;
    const piece = pacedChunks[next++];
    if (next === pacedChunks.length) res.end(piece);
    else {
      res.write(piece);
      // Pace 0 (the paced rows' warm-up): the same chunks, each on a later turn, without the wait.
      if (pace === 0) setImmediate(send);
      else setTimeout(send, pace);
    }
  };
  send();
}

export function startFakeUpstream(port = 0) {
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (part) => {
      body += part;
    });
    req.on("end", () => {
      if (body.includes('"stream":true')) {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        const paced = paceField.exec(body);
        if (paced) {
          sendPaced(res, Number(paced[1]));
          return;
        }
        // Two writes: the first chunk leaves at once, as a real model's first token would.
        res.write(streamFirst);
        res.end(streamRest);
        return;
      }
      res.writeHead(200, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(completion),
      });
      res.end(completion);
    });
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((resolve) => {
    server.listen(port, "127.0.0.1", () => {
      resolve({
        url: `http://127.0.0.1:${server.address().port}`,
        close: () => new Promise((r) => server.close(r)),
      });
    });
  });
}

if (process.send && process.argv.includes("--child")) {
  const upstream = await startFakeUpstream();
  process.send({ url: upstream.url });
  // Bounded: the parent kills it, and it goes by itself if the parent disappears.
  process.on("disconnect", () => process.exit(0));
}
