import { existsSync, mkdirSync, rmdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { performanceNow } from "../../host-timers.js";
import { ConfigError } from "../config/load.js";
import type { UpstreamRequest } from "../providers/h1-client.js";
import {
  type StreamAnswer,
  UpstreamHttp,
  type UpstreamProvider,
  type WholeAnswer,
} from "../providers/http-upstream.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { type CanonicalRequest, requestHash as requestHashOf } from "./canonical.js";
import {
  type CassetteOptions,
  CassetteShelf,
  canonicalRequest,
  cassetteMiss,
  credentialsOf,
  keptHeadersOf,
  recordedBody,
  replayStream,
  replayWhole,
} from "./cassettes.js";
import type { UpstreamCapture } from "./inspect.js";

/**
 * Upstream HTTP for the test kit: replays and records cassettes, and tells the request inspector
 * what went upstream. Built instead of the plain UpstreamHttp only when one of them is on, so a
 * gateway without them pays nothing for either.
 */
export class KitUpstream extends UpstreamHttp {
  private readonly shelf: CassetteShelf | undefined;
  /** The directories the cassette folder's creation made, the outermost first. */
  private readonly made: string[] = [];

  constructor(
    private readonly cassettes: CassetteOptions | undefined,
    private readonly capture: UpstreamCapture | undefined,
    answerLimitBytes?: number,
  ) {
    super(answerLimitBytes);
    if (cassettes) {
      // A mistyped replay directory would turn every request into a miss: say so at start-up.
      if (cassettes.mode === "replay" && !existsSync(cassettes.dir)) {
        throw new ConfigError([`dir: ${cassettes.dir} does not exist`], "cassettes option");
      }
      if (cassettes.mode !== "replay") {
        const target = resolve(cassettes.dir);
        const first = mkdirSync(target, { recursive: true, mode: 0o700 });
        for (let dir = target; first !== undefined; dir = dirname(dir)) {
          this.made.unshift(dir);
          if (dir === first || dirname(dir) === dir) break;
        }
      }
      this.shelf = new CassetteShelf(cassettes.dir);
    }
  }

  /**
   * A start that was refused: the cassette folder it made goes, innermost first (nothing was
   * recorded in it, as nothing was served; a folder something else put a file in stays).
   */
  override async abandon(): Promise<void> {
    await super.abandon();
    for (const dir of this.made.splice(0).reverse()) {
      try {
        rmdirSync(dir);
      } catch {
        return;
      }
    }
  }

  private get timing(): boolean {
    return this.cassettes?.timing === "recorded";
  }

  protected override async sendWhole(
    options: UpstreamRequest,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<WholeAnswer> {
    const sent = this.capture?.sent(provider, options);
    const answer = await this.wholeFromShelfOrLive(options, signal, provider);
    sent?.answered(answer);
    return answer;
  }

  protected override async openStream(
    options: UpstreamRequest,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<StreamAnswer> {
    const sent = this.capture?.sent(provider, options);
    const answer = await this.streamFromShelfOrLive(options, signal, provider);
    if (!sent) return answer;
    const { statusCode, headers } = answer;
    return { statusCode, headers, body: sent.streamed(statusCode, answer.body) };
  }

  private async wholeFromShelfOrLive(
    options: UpstreamRequest,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<WholeAnswer> {
    const shelf = this.shelf;
    if (!shelf) return super.sendWhole(options, signal, provider);
    const request = canonicalRequest(options, provider);
    const found = this.lookup(shelf, request);
    if (found) return replayWhole(found.response, this.timing, signal);
    const started = performanceNow();
    const answer = await super.sendWhole(options, signal, provider);
    const headers = keptHeadersOf(answer.headers);
    shelf.save(
      request,
      {
        status: answer.status,
        headers,
        ms: Math.round(performanceNow() - started),
        ...recordedBody(headers["content-type"] ?? "", answer.body),
      },
      credentialsOf(options, provider),
    );
    return answer;
  }

  private async streamFromShelfOrLive(
    options: UpstreamRequest,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<StreamAnswer> {
    const shelf = this.shelf;
    if (!shelf) return super.openStream(options, signal, provider);
    const request = canonicalRequest(options, provider);
    const found = this.lookup(shelf, request);
    if (found) return replayStream(found.response, this.timing, signal);
    const started = performanceNow();
    const answer = await super.openStream(options, signal, provider);
    const headers = keptHeadersOf(answer.headers);
    const secrets = credentialsOf(options, provider);
    return {
      statusCode: answer.statusCode,
      headers: answer.headers,
      body: recordingStream(answer.body, signal, started, (chunks, cut) =>
        shelf.save(request, { status: answer.statusCode, headers, chunks, cut }, secrets),
      ),
    };
  }

  /** The cassette for this request; in replay mode a miss is the request's error, loudly. */
  private lookup(shelf: CassetteShelf, request: CanonicalRequest) {
    const hash = requestHashOf(request);
    let entry = shelf.find(hash);
    if (!entry && this.cassettes?.mode !== "record") {
      shelf.rescan();
      entry = shelf.find(hash);
    }
    if (entry && this.cassettes?.mode !== "record") return entry.cassette;
    if (this.cassettes?.mode === "replay") throw cassetteMiss(shelf, request);
    return undefined;
  }
}

/**
 * Passes a live stream on as it arrives and saves it once it ends: its chunks as text with their
 * time from the request (a character split between two chunks goes whole into the second), and
 * whether it broke. A stream the client left is not saved: it was not heard to its end.
 */
async function* recordingStream(
  body: AsyncIterable<Uint8Array>,
  signal: GoneSignal,
  started: number,
  save: (chunks: { ms: number; text: string }[], cut: boolean | undefined) => void,
): AsyncGenerator<Uint8Array> {
  const decoder = new TextDecoder();
  const chunks: { ms: number; text: string }[] = [];
  let cut = false;
  try {
    for await (const chunk of body) {
      const text = decoder.decode(chunk, { stream: true });
      if (text) chunks.push({ ms: Math.round(performanceNow() - started), text });
      yield chunk;
    }
  } catch (err) {
    cut = true;
    throw err;
  } finally {
    const rest = decoder.decode();
    if (rest) chunks.push({ ms: Math.round(performanceNow() - started), text: rest });
    if (!signal.aborted) save(chunks, cut || undefined);
  }
}
