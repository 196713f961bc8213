import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { mockImage } from "../../src/server/providers/mock/media/index.js";

/** What the fake provider received, for assertions on what the gateway forwarded. */
export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface FakeOpenAIMedia {
  /** Base URL to put in a provider's `base_url` (ends in /v1). */
  baseUrl: string;
  received: ReceivedRequest[];
  close(): Promise<void>;
}

/** Bytes the fake returns for speech; not real mp3, but recognisable end to end. */
export const fakeSpeechBytes = Buffer.from("ID3\u0004fake-mp3-from-upstream");
export const fakeTranscriptText = "the upstream heard this";
export const providerSecretText = "provider-internal-detail sk-leaky-1234";

/**
 * An OpenAI-compatible media provider on 127.0.0.1. `status=NNN` anywhere in the request body
 * makes it fail with that status and an error body the gateway must never pass on.
 */
export async function startFakeOpenAIMedia(): Promise<FakeOpenAIMedia> {
  const received: ReceivedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const path = req.url ?? "";
      received.push({ path, headers: req.headers, body });
      const forced = /status=(\d{3})/.exec(body.toString("latin1"));
      if (forced) {
        res.writeHead(Number(forced[1]), { "content-type": "application/json" });
        res.end(
          JSON.stringify({ error: { message: providerSecretText, type: "invalid_request_error" } }),
        );
        return;
      }
      if (path === "/v1/images/generations") {
        const json = JSON.parse(body.toString("utf8")) as {
          prompt: string;
          n?: number;
          size?: string;
        };
        const data = Array.from({ length: json.n ?? 1 }, (_, i) => ({
          b64_json: mockImage(`${json.prompt} upstream ${i}`, json.size ?? "64x64").toString(
            "base64",
          ),
        }));
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ created: 1_700_000_000, data, usage: imageUsage(30, 12) }));
        return;
      }
      if (path === "/v1/images/edits") {
        void answerEdit(req.headers["content-type"] ?? "", body).then(([status, answer]) => {
          res.writeHead(status, { "content-type": "application/json" });
          res.end(JSON.stringify(answer));
        });
        return;
      }
      if (path === "/v1/embeddings") {
        const [status, answer] = answerEmbeddings(body);
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(answer));
        return;
      }
      if (path === "/v1/audio/speech") {
        res.writeHead(200, { "content-type": "audio/mpeg" });
        res.end(fakeSpeechBytes);
        return;
      }
      if (path === "/v1/audio/transcriptions") {
        void answerTranscription(req.headers["content-type"] ?? "", body).then(
          ([status, type, answer]) => {
            res.writeHead(status, { "content-type": type });
            res.end(answer);
          },
        );
        return;
      }
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "no such route" } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

const invalid = (message: string): [number, object] => [
  400,
  { error: { message, type: "invalid_request_error", param: null, code: null } },
];

/** OpenAI's image edits: a multipart form with the image(s), a prompt and a model. */
async function answerEdit(contentType: string, body: Buffer): Promise<[number, object]> {
  let form: FormData;
  try {
    form = await new Response(body, { headers: { "content-type": contentType } }).formData();
  } catch {
    return invalid("expected multipart/form-data");
  }
  const images = [...form.getAll("image"), ...form.getAll("image[]")];
  if (images.length === 0 || images.some((image) => typeof image === "string")) {
    return invalid("image is required");
  }
  const prompt = form.get("prompt");
  const model = form.get("model");
  if (typeof prompt !== "string" || typeof model !== "string") {
    return invalid("prompt and model are required");
  }
  const size = form.get("size");
  const n = Number(form.get("n") ?? 1);
  const data = Array.from({ length: n }, (_, i) => ({
    b64_json: mockImage(
      `${prompt} edited upstream ${i}`,
      typeof size === "string" ? size : "64x64",
    ).toString("base64"),
  }));
  return [200, { created: 1_700_000_001, data, usage: imageUsage(10, 7) }];
}

/** An image answer's usage as OpenAI reports it (GPT image models). */
function imageUsage(input: number, output: number) {
  return {
    input_tokens: input,
    input_tokens_details: { text_tokens: input, image_tokens: 0 },
    output_tokens: output,
    total_tokens: input + output,
  };
}

/**
 * OpenAI's transcriptions: text for text formats, JSON otherwise; verbose_json has the timed
 * segments, and the words with `timestamp_granularities[]=word` (which needs verbose_json).
 */
async function answerTranscription(
  contentType: string,
  body: Buffer,
): Promise<[number, string, string]> {
  const json = (status: number, answer: object): [number, string, string] => [
    status,
    "application/json",
    JSON.stringify(answer),
  ];
  let form: FormData;
  try {
    form = await new Response(body, { headers: { "content-type": contentType } }).formData();
  } catch {
    return json(...invalid("expected multipart/form-data"));
  }
  const format = form.get("response_format") ?? "json";
  const granularities = form.getAll("timestamp_granularities[]");
  if (granularities.length > 0 && format !== "verbose_json") {
    return json(...invalid("timestamp_granularities requires response_format=verbose_json"));
  }
  if (format === "text") return [200, "text/plain", fakeTranscriptText];
  if (format !== "verbose_json") {
    return json(200, { text: fakeTranscriptText, usage: { type: "duration", seconds: 7 } });
  }
  const words = fakeTranscriptText.split(" ").map((word, i) => ({
    word,
    start: i * 1.5,
    end: i * 1.5 + 1.2,
  }));
  const segment = {
    id: 0,
    seek: 0,
    start: 0,
    end: 7,
    text: ` ${fakeTranscriptText}`,
    tokens: [50364, 264, 29126, 2198, 341],
    temperature: 0,
    avg_logprob: -0.2,
    compression_ratio: 0.9,
    no_speech_prob: 0.01,
  };
  return json(200, {
    task: "transcribe",
    language: "english",
    duration: 7,
    text: fakeTranscriptText,
    ...(granularities.includes("word") ? { words } : {}),
    ...(granularities.length === 0 || granularities.includes("segment")
      ? { segments: [segment] }
      : {}),
    usage: { type: "duration", seconds: 7 },
  });
}

/** OpenAI's embeddings: fixed small vectors, in float or base64 as asked. */
function answerEmbeddings(body: Buffer): [number, object] {
  let json: { model?: unknown; input?: unknown; encoding_format?: unknown };
  try {
    json = JSON.parse(body.toString("utf8"));
  } catch {
    return invalid("body must be JSON");
  }
  if (typeof json.model !== "string" || json.input === undefined) {
    return invalid("model and input are required");
  }
  const inputs =
    Array.isArray(json.input) && typeof json.input[0] !== "number" ? json.input : [json.input];
  const vector = [0.6, 0.8];
  const data = inputs.map((_, index) => ({
    object: "embedding",
    index,
    embedding:
      json.encoding_format === "base64"
        ? Buffer.from(new Float32Array(vector).buffer).toString("base64")
        : vector,
  }));
  return [
    200,
    { object: "list", data, model: json.model, usage: { prompt_tokens: 9, total_tokens: 9 } },
  ];
}
