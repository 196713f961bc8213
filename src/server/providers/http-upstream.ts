import type { Agent, Dispatcher } from "undici";
import { UpstreamFailure } from "../dispatch/types.js";
import { rejectionReason, retryAfterMs } from "./classify.js";

/** Bounded read of an error body, only to classify it. */
const maxErrorBodyBytes = 64 * 1024;

export interface UpstreamResponse {
  status: number;
  body: Dispatcher.ResponseData["body"];
}

/**
 * Pooled keep-alive HTTP to upstreams (undici), shared by every provider wire. Global fetch costs
 * about five times the CPU per request; the hot path does not use it.
 */
export class UpstreamHttp {
  private agent: Agent | undefined;
  private loading: Promise<Agent> | undefined;

  /**
   * Loads undici (about a tenth of a second) after start-up rather than before the ready line;
   * the gateway calls this once it listens, so the first upstream request rarely waits for it.
   */
  warm(): Promise<Agent> {
    this.loading ??= import("undici").then(({ Agent }) => {
      this.agent = new Agent({ keepAliveTimeout: 30_000, connections: 256, pipelining: 1 });
      return this.agent;
    });
    return this.loading;
  }

  async post(
    url: string,
    headers: Record<string, string>,
    // Bytes too: multipart uploads (audio transcriptions) are built as one buffer.
    body: string | Uint8Array,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<UpstreamResponse> {
    let response: Dispatcher.ResponseData;
    try {
      const target = targetOf(url);
      const agent = this.agent ?? (await this.warm());
      response = await agent.request({
        origin: target.origin,
        path: target.path,
        method: "POST",
        headers,
        body,
        signal,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
    } catch (err) {
      if (signal.aborted) throw err;
      throw new UpstreamFailure("unavailable", isTimeout(err) ? 504 : 502);
    }
    const { statusCode } = response;
    if (statusCode >= 200 && statusCode < 300) return { status: statusCode, body: response.body };
    const text = await readBounded(response.body);
    if (statusCode === 429) {
      throw new UpstreamFailure(
        "rate_limited",
        429,
        "upstream_rejected",
        retryAfterMs(response.headers["retry-after"]),
      );
    }
    // The provider refused the credential, not the request: the key cools down like a 429 and the
    // caller sees a provider failure (503), never a rejection of their own body.
    if (statusCode === 401) throw new UpstreamFailure("unauthorized", 503);
    if (statusCode >= 400 && statusCode < 500) {
      throw new UpstreamFailure("rejected", statusCode, rejectionReason(statusCode, text));
    }
    throw new UpstreamFailure("unavailable", statusCode);
  }

  async close(): Promise<void> {
    if (this.loading) await (await this.loading).close();
  }
}

/**
 * Upstream URLs come from the provider config, so there are few of them: parse each once instead
 * of on every request (a WHATWG URL parse is a few microseconds on the hot path).
 */
const targetCache = new Map<string, { origin: string; path: string }>();
const maxCachedTargets = 1024;
function targetOf(url: string): { origin: string; path: string } {
  let target = targetCache.get(url);
  if (!target) {
    const parsed = new URL(url);
    target = { origin: parsed.origin, path: parsed.pathname + parsed.search };
    // Bounded in case a caller ever builds URLs per request.
    if (targetCache.size >= maxCachedTargets) targetCache.clear();
    targetCache.set(url, target);
  }
  return target;
}

const timeoutCodes = new Set([
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "UND_ERR_CONNECT_TIMEOUT",
]);

function isTimeout(err: unknown): boolean {
  return timeoutCodes.has((err as { code?: string } | null)?.code ?? "");
}

async function readBounded(body: AsyncIterable<Buffer | Uint8Array>): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      if (size < maxErrorBodyBytes) parts.push(Buffer.from(chunk));
      size += chunk.length;
    }
  } catch {
    // A broken error body still classifies by status.
  }
  return Buffer.concat(parts).toString("utf8").slice(0, maxErrorBodyBytes);
}

/**
 * The body of a streaming answer. A cut or an idle timeout while reading is the provider failing:
 * before the first piece it becomes 503 upstream_error, after it the route's stream error event.
 */
export async function* streamedBody(body: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  try {
    for await (const chunk of body) yield chunk;
  } catch (err) {
    throw new UpstreamFailure("unavailable", isTimeout(err) ? 504 : 502);
  }
}

/** Reads a whole JSON success body; a body that is not JSON is an upstream failure, not ours. */
export async function readJsonBody<T>(body: Dispatcher.ResponseData["body"]): Promise<T> {
  try {
    return (await body.json()) as T;
  } catch {
    throw new UpstreamFailure("unavailable", 502);
  }
}

export function joinUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, "")}${path}`;
}
