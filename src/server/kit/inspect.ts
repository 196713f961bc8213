import { AsyncLocalStorage } from "node:async_hooks";
import type { RequestListener } from "node:http";
import { microToIdr } from "../../store/money.js";
import type { ListedRequest, RequestLogReadsRepository } from "../../store/request-log-reads.js";
import { readLoggedEndpoint } from "../../store/request-source.js";
import type { Ledger, Reservation } from "../billing/ledger.js";
import type { UpstreamRequest } from "../providers/h1-client.js";
import type { UpstreamProvider, WholeAnswer } from "../providers/http-upstream.js";
import { canonicalBody, relativePath } from "./canonical.js";
import { credentialsOf, scrubbed } from "./cassettes.js";
import type { CapturedBody, InspectedRequest, RequestsQuery, UpstreamExchange } from "./types.js";

export type { CapturedBody, InspectedRequest, RequestsQuery, UpstreamExchange } from "./types.js";

/** Bodies larger than this are kept as their size only: a capture is for reading, not archiving. */
const maxCapturedBytes = 1024 * 1024;

export const defaultCaptureLimit = 100;

interface Captured {
  id?: string;
  received: Buffer[];
  receivedBytes: number;
  contentType: string;
  upstream: UpstreamExchange[];
  answered: Buffer[];
  answeredBytes: number;
  answerType: string;
  status?: number;
}

/** What the upstream side tells the inspector about one call. */
export interface UpstreamCapture {
  sent(provider: UpstreamProvider, options: UpstreamRequest): SentCall | undefined;
}

export interface SentCall {
  answered(answer: WholeAnswer): void;
  streamed(status: number, body: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array>;
}

/**
 * Recent requests for tests to assert on. The list is the request log (which the gateway writes
 * anyway), newest first; with `captureBodies` each entry also carries what the gateway received,
 * sent upstream and answered, kept in memory for the last `limit` admitted requests. Capture
 * wraps the server's listener and the upstream calls only when it is on.
 */
export class RequestInspector implements UpstreamCapture {
  private readonly context = new AsyncLocalStorage<Captured>();
  private readonly captures = new Map<string, Captured>();

  constructor(
    private readonly requestLog: RequestLogReadsRepository,
    private readonly capture: { limit: number } | undefined,
  ) {}

  get capturing(): boolean {
    return this.capture !== undefined;
  }

  /** Recent requests, newest first. */
  async requests(query: RequestsQuery = {}): Promise<InspectedRequest[]> {
    const filter = {
      model: query.model,
      status: query.status,
      limit: Math.min(1000, Math.max(1, query.limit ?? 50)),
    };
    return this.inspected(await this.requestLog.recent(filter));
  }

  private inspected(rows: ListedRequest[]): InspectedRequest[] {
    return rows.map((row) => {
      const entry: InspectedRequest = {
        id: row.id,
        time: new Date(row.created_at).toISOString(),
        finished_at: row.finished_at === null ? null : new Date(row.finished_at).toISOString(),
        ...readLoggedEndpoint(row.endpoint),
        model: row.model,
        provider: row.provider_id,
        served_model: row.served_model ?? null,
        status: row.status,
        error_code: row.error_code,
        state: row.state,
        stream: row.stream === 1,
        account: row.account_id,
        key: { id: row.key_id, label: row.key_label },
        payment: row.payment,
        cost_micro: row.cost_micro,
        cost_idr: microToIdr(row.cost_micro),
        usage: { input_tokens: row.input_tokens, output_tokens: row.output_tokens },
      };
      if (row.tools_omitted) entry.tools_omitted = JSON.parse(row.tools_omitted) as string[];
      if (row.job_id) entry.job_id = row.job_id;
      const captured = this.captures.get(row.id);
      if (captured) {
        entry.received = shownBody(captured.received, captured.receivedBytes, captured.contentType);
        entry.upstream = captured.upstream;
        entry.answer = {
          status: captured.status,
          body: shownBody(captured.answered, captured.answeredBytes, captured.answerType),
        };
      }
      return entry;
    });
  }

  /** Serves each request inside its capture: what arrives and what leaves is copied. */
  listener(inner: RequestListener): RequestListener {
    if (!this.capture) return inner;
    return (incoming, outgoing) => {
      const captured: Captured = {
        received: [],
        receivedBytes: 0,
        contentType: String(incoming.headers["content-type"] ?? ""),
        upstream: [],
        answered: [],
        answeredBytes: 0,
        answerType: "",
      };
      // The HTTP parser pushes each body chunk into the request stream: a copy taken there
      // leaves the routes' own reading of the body untouched.
      const push = incoming.push;
      incoming.push = (chunk: unknown, encoding?: BufferEncoding) => {
        if (chunk !== null && chunk !== undefined) keep(captured, "received", chunk);
        return push.call(incoming, chunk, encoding);
      };
      const writeHead = outgoing.writeHead;
      outgoing.writeHead = ((status: number, ...rest: unknown[]) => {
        captured.answerType = contentTypeIn(rest) ?? captured.answerType;
        return (writeHead as (...args: unknown[]) => typeof outgoing).call(
          outgoing,
          status,
          ...rest,
        );
      }) as typeof outgoing.writeHead;
      const write = outgoing.write;
      outgoing.write = ((chunk: unknown, ...rest: unknown[]) => {
        keep(captured, "answered", chunk);
        return (write as (...args: unknown[]) => boolean).call(outgoing, chunk, ...rest);
      }) as typeof outgoing.write;
      const end = outgoing.end;
      outgoing.end = ((chunk?: unknown, ...rest: unknown[]) => {
        if (chunk !== undefined && typeof chunk !== "function") keep(captured, "answered", chunk);
        captured.status = outgoing.statusCode;
        const declared = outgoing.getHeader("content-type");
        if (declared !== undefined) captured.answerType = String(declared);
        return (end as (...args: unknown[]) => typeof outgoing).call(outgoing, chunk, ...rest);
      }) as typeof outgoing.end;
      this.context.run(captured, () => inner(incoming, outgoing));
    };
  }

  /** Learns each admitted request's id (the request log's), which joins its capture to its row. */
  watch(ledger: Ledger): void {
    if (!this.capture) return;
    const limit = this.capture.limit;
    const reserve = ledger.reserve.bind(ledger);
    const learn = (reservation: Reservation, captured: Captured | undefined): Reservation => {
      if (captured && captured.id === undefined) {
        captured.id = reservation.id;
        this.captures.set(reservation.id, captured);
        if (this.captures.size > limit) {
          const oldest = this.captures.keys().next().value;
          if (oldest !== undefined) this.captures.delete(oldest);
        }
      }
      return reservation;
    };
    ledger.reserve = (input) => {
      const reservation = reserve(input);
      const captured = this.context.getStore();
      return reservation instanceof Promise
        ? reservation.then((placed) => learn(placed, captured))
        : learn(reservation, captured);
    };
  }

  sent(provider: UpstreamProvider, options: UpstreamRequest): SentCall | undefined {
    const captured = this.context.getStore();
    if (!captured) return undefined;
    const headers = options.headers;
    const exchange: UpstreamExchange = {
      provider: provider.id,
      path: relativePath(options.path, provider.base_url),
      body: sentBody(options.body as string | Uint8Array, headers["content-type"] ?? ""),
    };
    captured.upstream.push(exchange);
    // Headers are never kept; a provider that repeats its key in the answer is scrubbed of it.
    const secrets = credentialsOf(options, provider);
    return {
      answered({ status, headers, body }) {
        exchange.status = status;
        const shown = shownBody([body], body.length, String(headers["content-type"] ?? ""));
        exchange.answer = scrubbed(shown, secrets);
      },
      streamed(status, body) {
        exchange.status = status;
        return copied(body, (text) => {
          exchange.answer = scrubbed(text, secrets);
        });
      },
    };
  }
}

async function* copied(
  body: AsyncIterable<Uint8Array>,
  done: (text: string) => void,
): AsyncGenerator<Uint8Array> {
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      size += chunk.length;
      if (size <= maxCapturedBytes) parts.push(Buffer.from(chunk));
      yield chunk;
    }
  } finally {
    done(
      size <= maxCapturedBytes
        ? Buffer.concat(parts).toString("utf8")
        : `(${size} bytes, not kept)`,
    );
  }
}

/** The content type among writeHead's optional reason phrase and headers (object or flat list). */
function contentTypeIn(args: unknown[]): string | undefined {
  for (const arg of args) {
    if (Array.isArray(arg)) {
      for (let i = 0; i + 1 < arg.length; i += 2) {
        if (String(arg[i]).toLowerCase() === "content-type") return String(arg[i + 1]);
      }
    } else if (arg && typeof arg === "object") {
      for (const [name, value] of Object.entries(arg)) {
        if (name.toLowerCase() === "content-type") return String(value);
      }
    }
  }
  return undefined;
}

function keep(captured: Captured, side: "received" | "answered", chunk: unknown): void {
  const bytes =
    typeof chunk === "string"
      ? Buffer.from(chunk)
      : chunk instanceof Uint8Array
        ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
        : undefined;
  if (!bytes) return;
  const size = side === "received" ? "receivedBytes" : "answeredBytes";
  captured[size] += bytes.length;
  if (captured[size] <= maxCapturedBytes) captured[side].push(Buffer.from(bytes));
}

function shownBody(parts: Buffer[], size: number, contentType: string): CapturedBody {
  if (size > maxCapturedBytes) return `(${size} bytes, not kept)`;
  const bytes = Buffer.concat(parts);
  if (/json/.test(contentType)) {
    try {
      return JSON.parse(bytes.toString("utf8"));
    } catch {
      // Shown as text.
    }
  }
  if (contentType.startsWith("multipart/form-data")) return canonicalBody(bytes, contentType);
  const text = bytes.toString("utf8");
  return Buffer.from(text).equals(bytes) ? text : `(${size} bytes of ${contentType || "data"})`;
}

function sentBody(body: string | Uint8Array, contentType: string): CapturedBody {
  const bytes = typeof body === "string" ? Buffer.from(body) : Buffer.from(body);
  return shownBody([bytes], bytes.length, contentType);
}
