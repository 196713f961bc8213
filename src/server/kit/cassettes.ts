import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { createPrivateFile, writePrivateFile } from "../../store/private-files.js";
import { piecesAroundSecrets, redactSecrets } from "../../store/secrets.js";
import { ConfigError } from "../config/load.js";
import { GatewayError } from "../errors.js";
import type { UpstreamRequest } from "../providers/h1-client.js";
import type {
  StreamAnswer,
  UpstreamHeaders,
  UpstreamProvider,
  WholeAnswer,
} from "../providers/http-upstream.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { sleep } from "../time/sleep.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";
import {
  type CanonicalRequest,
  canonicalBody,
  differenceCount,
  firstDifference,
  relativePath,
  requestHash,
  slugOf,
  valueAt,
} from "./canonical.js";
import type { CassetteOptions } from "./types.js";

export type { CassetteMode, CassetteOptions } from "./types.js";

const cassetteOptionsSchema = z.object({
  dir: z.string().min(1),
  mode: z.enum(["record", "replay", "record-missing"]),
  timing: z.enum(["recorded", "none"]).optional(),
});

/**
 * The cassettes a gateway was given, and how: `gateway serve`'s flags, or `startGateway`'s
 * option in the user's code. A miss tells the user how to record it in the words they used.
 */
export interface ShelfOptions extends CassetteOptions {
  from: "flags" | "option";
}

/** `startGateway`'s option as a caller may have typed it (JavaScript callers included). */
export function parseCassetteOptions(
  input: CassetteOptions,
  from: ShelfOptions["from"] = "option",
): ShelfOptions {
  const parsed = cassetteOptionsSchema.safeParse(input);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
    throw new ConfigError(problems, "cassettes option");
  }
  return { ...parsed.data, from };
}

const responseHeaders = z.record(z.string(), z.string());

const cassetteSchema = z.object({
  /** Which sending of its request this was while recording: 2 for the second (absent: the first). */
  occurrence: z.number().int().min(1).optional(),
  request: z.object({
    provider: z.string(),
    method: z.string(),
    path: z.string(),
    headers: z.record(z.string(), z.string()).optional(),
    body: z.unknown(),
  }),
  response: z
    .object({
      /** Absent for a call that failed before its answer (`failure`). */
      status: z.number().int().optional(),
      headers: responseHeaders,
      /** Milliseconds from the request to the whole answer (not for streams). */
      ms: z.number().optional(),
      body: z.unknown().optional(),
      text: z.string().optional(),
      base64: z.string().optional(),
      /** A stream, as the pieces arrived, with their time from the request. */
      chunks: z.array(z.object({ ms: z.number(), text: z.string() })).optional(),
      /** The stream broke after its chunks. */
      cut: z.boolean().optional(),
      /**
       * The call failed with no answer: refused, cut before its answer was whole, or past a time
       * bound (`timeout`). A replay fails it the same way, so the client gets the same error.
       */
      failure: z.object({ error: z.string(), timeout: z.boolean().optional() }).optional(),
    })
    .refine((response) => response.status !== undefined || response.failure !== undefined, {
      message: "a response has a status or a failure",
    }),
});

export type Cassette = z.infer<typeof cassetteSchema>;
type RecordedResponse = Cassette["response"];
type StreamChunk = NonNullable<RecordedResponse["chunks"]>[number];

/** The answer headers worth keeping: what the gateway reads, and what tells the body apart. */
const keptHeaders = ["content-type", "retry-after"];

interface Entry {
  file: string;
  cassette: Cassette;
}

const occurrenceOf = (entry: Entry): number => entry.cassette.occurrence ?? 1;

/**
 * Cassette files in one directory: one exchange per pretty-printed JSON file named
 * `<slug>-<hash8>.json`, matched by the hash of the canonical request in the file (so a
 * hand-edited request still matches what it now says). A request sent again while recording
 * has a file per sending (`<slug>-<hash8>-<n>.json`, `occurrence: n`), and the n-th sending of
 * a replay gets the n-th answer: two tests that send the same request get what each was answered.
 */
export class CassetteShelf {
  /** By request hash, each request's recordings in the order they were sent. */
  private entries: Map<string, Entry[]> | undefined;
  /** How many times this gateway has sent each request so far. */
  private readonly sent = new Map<string, number>();

  /**
   * `addOnly` (record-missing, which shares its folder with other gateways): a file is never
   * replaced. Of two gateways that record the same sending at once the first to finish keeps its
   * file, and the other replays it from then on, as the replay will.
   */
  constructor(
    readonly dir: string,
    private readonly addOnly = false,
  ) {}

  /** Counts one more sending of the request: 1 the first time this gateway sends it, then 2... */
  nextOccurrence(hash: string): number {
    const occurrence = (this.sent.get(hash) ?? 0) + 1;
    this.sent.set(hash, occurrence);
    return occurrence;
  }

  /** The recording of the request's n-th sending: the n-th, or the last one there is. */
  find(hash: string, occurrence: number): Entry | undefined {
    const recorded = this.index().get(hash);
    if (!recorded) return undefined;
    return recorded.findLast((entry) => occurrenceOf(entry) <= occurrence) ?? recorded[0];
  }

  /**
   * A recording that sends the request for the first time records its sendings anew: the files
   * of later sendings an earlier recording made go, so a replay gets none this run did not see.
   */
  forgetLaterSendings(hash: string): void {
    const recorded = this.index().get(hash);
    if (!recorded) return;
    for (const entry of recorded.filter((e) => occurrenceOf(e) > 1)) {
      try {
        rmSync(join(this.dir, entry.file), { force: true });
      } catch (err) {
        console.error(`cassettes: could not remove ${join(this.dir, entry.file)} (${codeOf(err)})`);
      }
    }
    this.index().set(
      hash,
      recorded.filter((e) => occurrenceOf(e) === 1),
    );
  }

  /** Rescans the directory: files may have been added since the last look. */
  rescan(): void {
    this.entries = undefined;
  }

  all(): Entry[] {
    return [...this.index().values()].flat();
  }

  /**
   * Writes the exchange's file. One that cannot be written (the directory gone or read-only)
   * loses the recording, said on stderr; the client still gets what its provider answered.
   */
  save(
    request: CanonicalRequest,
    response: RecordedResponse,
    secrets: string[],
    occurrence = 1,
  ): string | undefined {
    const hash = requestHash(request);
    const name = `${slugOf(request)}-${hash.slice(0, 8)}${occurrence > 1 ? `-${occurrence}` : ""}.json`;
    const cassette: Cassette = {
      ...(occurrence > 1 ? { occurrence } : {}),
      request: sortedRequest(request),
      response: response.chunks
        ? { ...response, chunks: chunksAroundSecrets(response.chunks, secrets) }
        : response,
    };
    const file = join(this.dir, name);
    // No provider credential or gateway key reaches a file, wherever an answer echoed one.
    const text = redactSecrets(`${JSON.stringify(cassette, null, 2)}\n`, secrets);
    let added = true;
    try {
      if (this.addOnly) added = createPrivateFile(file, text);
      else writePrivateFile(file, text);
    } catch (err) {
      console.error(
        `cassettes: could not write ${file} (${codeOf(err)}); this exchange is not recorded`,
      );
      return undefined;
    }
    if (!added) {
      console.error(
        `cassettes: ${file} was recorded meanwhile by another gateway; its recording is kept, this answer is not`,
      );
      this.rescan();
      return name;
    }
    this.remember(this.index(), hash, { file: name, cassette });
    return name;
  }

  /** One recording per sending: the one remembered last (files are read in name order) wins. */
  private remember(entries: Map<string, Entry[]>, hash: string, entry: Entry): void {
    const recorded = (entries.get(hash) ?? []).filter(
      (e) => occurrenceOf(e) !== occurrenceOf(entry),
    );
    recorded.push(entry);
    recorded.sort((a, b) => occurrenceOf(a) - occurrenceOf(b));
    entries.set(hash, recorded);
  }

  private index(): Map<string, Entry[]> {
    if (this.entries) return this.entries;
    const entries = new Map<string, Entry[]>();
    let names: string[] = [];
    try {
      names = readdirSync(this.dir)
        .filter((n) => n.endsWith(".json"))
        .sort();
    } catch {
      // No directory yet: nothing recorded.
    }
    for (const name of names) {
      let parsed: ReturnType<typeof cassetteSchema.safeParse>;
      try {
        parsed = cassetteSchema.safeParse(JSON.parse(readFileSync(join(this.dir, name), "utf8")));
      } catch {
        parsed = cassetteSchema.safeParse(undefined);
      }
      if (!parsed.success) {
        console.error(`cassettes: ${join(this.dir, name)} is not a cassette; skipped`);
        continue;
      }
      this.remember(entries, requestHash(parsed.data.request), {
        file: name,
        cassette: parsed.data,
      });
    }
    this.entries = entries;
    return entries;
  }
}

/**
 * A stream's chunks with each secret in one chunk: the chunks one runs across (the connection
 * may split an echoed key anywhere) are kept as one, at the time of the last of them.
 */
function chunksAroundSecrets(chunks: StreamChunk[], secrets: string[]): StreamChunk[] {
  return piecesAroundSecrets(
    chunks.map((chunk) => chunk.text),
    secrets,
  ).map((group) => ({
    ms: chunks[group[group.length - 1]].ms,
    text: group.map((index) => chunks[index].text).join(""),
  }));
}

/** What the request was sent to first, then its body (already sorted), for a file read top down. */
function sortedRequest(request: CanonicalRequest): CanonicalRequest {
  const { provider, method, path, headers, body } = request;
  return headers ? { provider, method, path, headers, body } : { provider, method, path, body };
}

/**
 * `value` with every string in it scrubbed of `secrets` and of gateway keys: what a provider
 * echoed is not shown, and a request is named and matched as its file holds it.
 */
export function scrubbed(value: unknown, secrets: string[]): unknown {
  if (typeof value === "string") return redactSecrets(value, secrets);
  if (Array.isArray(value)) return value.map((item) => scrubbed(item, secrets));
  if (value && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[key] = scrubbed(item, secrets);
    return out;
  }
  return value;
}

/** The canonical request of one upstream call. */
export function canonicalRequest(
  options: UpstreamRequest,
  provider: UpstreamProvider,
): CanonicalRequest {
  const headers = options.headers;
  const request: CanonicalRequest = {
    provider: provider.id,
    method: options.method,
    path: relativePath(options.path, provider.base_url),
    body: canonicalBody(options.body as string | Uint8Array, headers["content-type"] ?? ""),
  };
  if (headers["anthropic-beta"]) request.headers = { "anthropic-beta": headers["anthropic-beta"] };
  return request;
}

/** The headers each wire sends its key in besides Authorization (Gemini's `x-goog-api-key`). */
const keyHeaders = new Set(["x-api-key", "api-key", "x-goog-api-key"]);

/**
 * The query parameters of a base URL that carry a credential (Gemini's `key`, a `token`, a
 * signature's `sig`, Azure's `code`). Scrubbing goes by value, so a parameter such as
 * `api-version` is left alone: its value scrubbed from a recorded request would no longer match
 * the request it was recorded for.
 */
const credentialParameter = /key|token|secret|sig|pass|auth|code|credential/i;

/**
 * The credentials a call carried, in its headers and its provider's base URL, so a recording can
 * be scrubbed of them.
 */
export function credentialsOf(options: UpstreamRequest, provider: UpstreamProvider): string[] {
  const headers = options.headers;
  const out: string[] = [];
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (lower === "authorization") out.push(value.replace(/^Bearer\s+/i, ""), value);
    else if (keyHeaders.has(lower)) out.push(value);
  }
  out.push(...queryCredentials(provider.base_url));
  return out;
}

/** The values of a base URL's credential parameters, as written and as decoded. */
function queryCredentials(baseUrl: string | null): string[] {
  const unhashed = baseUrl?.split("#")[0] ?? "";
  const mark = unhashed.indexOf("?");
  if (mark < 0) return [];
  const out: string[] = [];
  for (const pair of unhashed.slice(mark + 1).split("&")) {
    const equals = pair.indexOf("=");
    if (equals < 0 || !credentialParameter.test(pair.slice(0, equals))) continue;
    const value = pair.slice(equals + 1);
    out.push(value);
    try {
      out.push(decodeURIComponent(value.replaceAll("+", " ")));
    } catch {
      // Not percent-encoded text: the value as written is all there is.
    }
  }
  return out;
}

export function keptHeadersOf(headers: UpstreamHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of keptHeaders) {
    const value = headers[name];
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  return out;
}

/** A whole answer as the cassette keeps it: JSON as JSON, text types as text, anything else (audio) base64. */
export function recordedBody(
  contentType: string,
  body: Buffer,
): Pick<RecordedResponse, "body" | "text" | "base64"> {
  if (/json/.test(contentType)) {
    try {
      return { body: JSON.parse(body.toString("utf8")) };
    } catch {
      // Kept as text below.
    }
  }
  if (/^text\/|json|xml|event-stream/.test(contentType)) return { text: body.toString("utf8") };
  return { base64: body.toString("base64") };
}

function bodyBytes(response: RecordedResponse): Buffer {
  if (response.base64 !== undefined) return Buffer.from(response.base64, "base64");
  if (response.text !== undefined) return Buffer.from(response.text);
  if (response.chunks) return Buffer.from(response.chunks.map((c) => c.text).join(""));
  return Buffer.from(response.body === undefined ? "" : JSON.stringify(response.body));
}

/**
 * A call that failed with no answer, as its cassette keeps it (`err` scrubbed of the call's
 * credentials when the file is written).
 */
export function recordedFailure(
  err: unknown,
  timeout: boolean,
  ms: number,
): Pick<RecordedResponse, "headers" | "ms" | "failure"> {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  const said = typeof message === "string" && message !== "" ? message : String(err);
  const error = typeof code === "string" && !said.includes(code) ? `${code}: ${said}` : said;
  return { headers: {}, ms, failure: timeout ? { error, timeout } : { error } };
}

/** The failure a replay gives for a recorded one: what the live call's failure became. */
function replayedFailure(failure: NonNullable<RecordedResponse["failure"]>): UpstreamFailure {
  return new UpstreamFailure("unavailable", failure.timeout ? 504 : 502);
}

/** A recorded whole answer, as the live call would have returned it (or failed). */
export async function replayWhole(
  response: RecordedResponse,
  timing: boolean,
  signal: GoneSignal,
): Promise<WholeAnswer> {
  if (timing) await sleep(response.ms ?? 0, signal);
  if (response.failure || response.status === undefined)
    throw replayedFailure(response.failure ?? { error: "no status recorded" });
  return { status: response.status, headers: response.headers, body: bodyBytes(response) };
}

/** A recorded stream, chunk by chunk as it was recorded (with its gaps when `timing`). */
export async function replayStream(
  response: RecordedResponse,
  timing: boolean,
  signal: GoneSignal,
): Promise<StreamAnswer> {
  if (response.failure || response.status === undefined) {
    if (timing) await sleep(response.ms ?? 0, signal);
    throw replayedFailure(response.failure ?? { error: "no status recorded" });
  }
  async function* body(): AsyncGenerator<Uint8Array> {
    if (!response.chunks) {
      yield bodyBytes(response);
      return;
    }
    let clock = 0;
    for (const chunk of response.chunks) {
      if (timing) await sleep(chunk.ms - clock, signal);
      clock = chunk.ms;
      yield Buffer.from(chunk.text);
    }
    if (response.cut) throw new Error("the recorded stream broke here");
  }
  return { statusCode: response.status, headers: response.headers, body: body() };
}

/**
 * A request with no cassette in replay mode: a 400 (a test's request that differs from its
 * recording is the test's to fix, and SDKs do not retry a 400) naming the nearest cassette and
 * the first field that differs.
 */
export function cassetteMiss(
  shelf: CassetteShelf,
  request: CanonicalRequest,
  from: ShelfOptions["from"],
): GatewayError {
  const where = `${request.method} ${request.provider} ${request.path}`;
  let message = `No cassette in ${shelf.dir} for ${where}; replay never calls a provider.`;
  const nearest = nearestCassette(shelf, request);
  if (nearest) {
    const sameTarget =
      nearest.cassette.request.provider === request.provider &&
      nearest.cassette.request.path === request.path;
    const now = sameTarget ? request.body : request;
    const recorded = sameTarget ? nearest.cassette.request.body : nearest.cassette.request;
    const field = firstDifference(now, recorded) ?? "(headers)";
    message +=
      ` Nearest: ${nearest.file}, which differs at ${field}` +
      ` (recorded ${shown(valueAt(recorded, field))}, now ${shown(valueAt(now, field))}).`;
  } else {
    message += " The directory holds no cassette.";
  }
  message +=
    from === "flags"
      ? " Record it with --record-missing, or record again (--record)."
      : ' Record it with cassettes: { mode: "record-missing" }, or record again (mode: "record").';
  console.error(`cassettes: miss: ${message}`);
  return new GatewayError(400, "bad_request", message);
}

function nearestCassette(shelf: CassetteShelf, request: CanonicalRequest): Entry | undefined {
  const all = shelf.all();
  const sameTarget = all.filter(
    (e) =>
      e.cassette.request.provider === request.provider && e.cassette.request.path === request.path,
  );
  const pool = sameTarget.length > 0 ? sameTarget : all;
  let best: Entry | undefined;
  let bestCount = Number.POSITIVE_INFINITY;
  for (const entry of pool) {
    const count = differenceCount(request, entry.cassette.request);
    if (count < bestCount) {
      best = entry;
      bestCount = count;
    }
  }
  return best;
}

function shown(value: unknown): string {
  if (value === undefined) return "nothing";
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function codeOf(err: unknown): string {
  return (err as NodeJS.ErrnoException)?.code ?? String(err);
}
