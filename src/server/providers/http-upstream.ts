import { Agent, type Dispatcher, errors as undiciErrors } from "undici";
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
  private readonly agent = new Agent({
    keepAliveTimeout: 30_000,
    connections: 256,
    pipelining: 1,
  });

  async post(
    url: string,
    headers: Record<string, string>,
    body: string,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<UpstreamResponse> {
    let response: Dispatcher.ResponseData;
    try {
      response = await this.agent.request({
        origin: new URL(url).origin,
        path: pathOf(url),
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
      throw new UpstreamFailure("rate_limited", 429, "upstream_rejected", retryAfterMs(response.headers["retry-after"]));
    }
    if (statusCode >= 400 && statusCode < 500) {
      throw new UpstreamFailure("rejected", statusCode, rejectionReason(statusCode, text));
    }
    throw new UpstreamFailure("unavailable", statusCode);
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

const pathCache = new Map<string, string>();
function pathOf(url: string): string {
  let path = pathCache.get(url);
  if (!path) {
    const parsed = new URL(url);
    path = parsed.pathname + parsed.search;
    pathCache.set(url, path);
  }
  return path;
}

function isTimeout(err: unknown): boolean {
  return (
    err instanceof undiciErrors.HeadersTimeoutError ||
    err instanceof undiciErrors.BodyTimeoutError ||
    err instanceof undiciErrors.ConnectTimeoutError
  );
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
