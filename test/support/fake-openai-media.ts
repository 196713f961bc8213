import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { mockImage } from "../../src/server/media/index.js";

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
        res.end(JSON.stringify({ created: 1_700_000_000, data, usage: { total_tokens: 42 } }));
        return;
      }
      if (path === "/v1/audio/speech") {
        res.writeHead(200, { "content-type": "audio/mpeg" });
        res.end(fakeSpeechBytes);
        return;
      }
      if (path === "/v1/audio/transcriptions") {
        if (/name="response_format"\r\n\r\ntext\r\n/.test(body.toString("latin1"))) {
          res.writeHead(200, { "content-type": "text/plain" });
          res.end(fakeTranscriptText);
          return;
        }
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({ text: fakeTranscriptText, usage: { type: "duration", seconds: 7 } }),
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
