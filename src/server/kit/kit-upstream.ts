import { accessSync, constants, mkdirSync, rmdirSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { performanceNow } from "../../host-timers.js";
import { type FolderLock, lockFolder } from "../backends/folder-lock.js";
import { ConfigError } from "../config/load.js";
import type { UpstreamRequest } from "../providers/h1-client.js";
import {
  failedCall,
  type StreamAnswer,
  UpstreamHttp,
  type UpstreamProvider,
  type WholeAnswer,
} from "../providers/http-upstream.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { type CanonicalRequest, requestHash as requestHashOf } from "./canonical.js";
import {
  type Cassette,
  CassetteShelf,
  canonicalRequest,
  cassetteMiss,
  credentialsOf,
  keptHeadersOf,
  recordedBody,
  recordedFailure,
  replayStream,
  replayWhole,
  type ShelfOptions,
  scrubbed,
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
  private readonly made: string[];
  /** A recording's hold on its folder, for as long as this gateway runs. */
  private recording: FolderLock | undefined;

  constructor(
    private readonly cassettes: ShelfOptions | undefined,
    private readonly capture: UpstreamCapture | undefined,
    answerLimitBytes?: number,
  ) {
    super(answerLimitBytes);
    this.made = cassettes ? cassetteDirectory(cassettes) : [];
    if (cassettes && cassettes.mode !== "replay") {
      this.recording = recordingLock(cassettes);
      if (!this.recording) {
        this.removeMade();
        throw recordingRefused(cassettes);
      }
    }
    if (cassettes)
      this.shelf = new CassetteShelf(cassettes.dir, cassettes.mode === "record-missing");
  }

  override async close(): Promise<void> {
    await super.close();
    this.recording?.release();
    this.recording = undefined;
  }

  /**
   * A start that was refused: its hold on the cassette folder goes, and the folder it made,
   * innermost first (nothing was recorded in it, as nothing was served; a folder something else
   * put a file in stays).
   */
  override async abandon(): Promise<void> {
    await super.abandon();
    this.recording?.release();
    this.recording = undefined;
    this.removeMade();
  }

  private removeMade(): void {
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
    const secrets = credentialsOf(options, provider);
    const request = shelvedRequest(options, provider, secrets);
    const found = this.lookup(shelf, request);
    if ("replay" in found) return replayWhole(found.replay, this.timing, signal);
    const started = performanceNow();
    let answer: WholeAnswer;
    try {
      answer = await super.sendWhole(options, signal, provider);
    } catch (err) {
      saveFailure(shelf, request, err, signal, started, secrets, found.record);
      throw err;
    }
    const headers = keptHeadersOf(answer.headers);
    shelf.save(
      request,
      {
        status: answer.status,
        headers,
        ms: Math.round(performanceNow() - started),
        ...recordedBody(headers["content-type"] ?? "", answer.body),
      },
      secrets,
      found.record,
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
    const secrets = credentialsOf(options, provider);
    const request = shelvedRequest(options, provider, secrets);
    const found = this.lookup(shelf, request);
    if ("replay" in found) return replayStream(found.replay, this.timing, signal);
    const started = performanceNow();
    let answer: StreamAnswer;
    try {
      answer = await super.openStream(options, signal, provider);
    } catch (err) {
      saveFailure(shelf, request, err, signal, started, secrets, found.record);
      throw err;
    }
    const headers = keptHeadersOf(answer.headers);
    return {
      statusCode: answer.statusCode,
      headers: answer.headers,
      body: recordingStream(answer.body, signal, started, (chunks, cut) =>
        shelf.save(
          request,
          { status: answer.statusCode, headers, chunks, cut },
          secrets,
          found.record,
        ),
      ),
    };
  }

  /**
   * The recording that answers this sending of the request, or the sending to record (its count
   * among this gateway's sendings of it); in replay mode a miss is the request's error, loudly.
   */
  private lookup(
    shelf: CassetteShelf,
    request: CanonicalRequest,
  ): { replay: Cassette["response"] } | { record: number } {
    const hash = requestHashOf(request);
    const occurrence = shelf.nextOccurrence(hash);
    if (this.cassettes?.mode === "record") {
      if (occurrence === 1) shelf.forgetLaterSendings(hash);
      return { record: occurrence };
    }
    let entry = shelf.find(hash, occurrence);
    if (!entry) {
      shelf.rescan();
      entry = shelf.find(hash, occurrence);
    }
    if (entry) return { replay: entry.cassette.response };
    if (this.cassettes?.mode === "replay") throw cassetteMiss(shelf, request, this.cassettes.from);
    return { record: occurrence };
  }
}

/**
 * Records a call that failed before its answer (refused, cut, past a time bound), so that a replay
 * fails it the same way: a suite that recorded a flaky provider replays what it met. A call whose
 * client left is not recorded: its outcome was never heard.
 */
function saveFailure(
  shelf: CassetteShelf,
  request: CanonicalRequest,
  err: unknown,
  signal: GoneSignal,
  started: number,
  secrets: string[],
  occurrence: number,
): void {
  const how = failedCall(err, signal);
  // Nor a call the gateway's own close cut: that was not the provider.
  if (how === "client left" || (err as { code?: unknown })?.code === "UPSTREAM_AGENT_CLOSED")
    return;
  const ms = Math.round(performanceNow() - started);
  shelf.save(request, recordedFailure(err, how === "timeout", ms), secrets, occurrence);
}

/**
 * The request as its cassette file holds it: canonical, and scrubbed of the call's credentials and
 * of gateway keys, so that what is matched, named and quoted in a miss is what the file says.
 */
function shelvedRequest(
  options: UpstreamRequest,
  provider: UpstreamProvider,
  secrets: string[],
): CanonicalRequest {
  return scrubbed(canonicalRequest(options, provider), secrets) as CanonicalRequest;
}

/**
 * The cassette folder, checked (and for a recording made) at start-up: a mistyped replay
 * directory would turn every request into a miss, and one a recording cannot write into every
 * exchange into a lost one. Answers the directories it made, the outermost first.
 */
function cassetteDirectory(cassettes: ShelfOptions): string[] {
  const refused = (why: string) =>
    new ConfigError([`dir: ${cassettes.dir} ${why}`], optionName(cassettes));
  const target = resolve(cassettes.dir);
  const made: string[] = [];
  if (cassettes.mode !== "replay") {
    let first: string | undefined;
    try {
      first = mkdirSync(target, { recursive: true, mode: 0o700 });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw refused(code === "EEXIST" ? "is not a directory" : `cannot be made (${code ?? err})`);
    }
    for (let dir = target; first !== undefined; dir = dirname(dir)) {
      made.unshift(dir);
      if (dir === first || dirname(dir) === dir) break;
    }
  }
  let isDirectory: boolean;
  try {
    isDirectory = statSync(target).isDirectory();
  } catch {
    throw refused("does not exist");
  }
  if (!isDirectory) throw refused("is not a directory");
  if (cassettes.mode !== "replay") {
    try {
      accessSync(target, constants.W_OK);
    } catch {
      throw refused("is not writable");
    }
  }
  return made;
}

/**
 * A recording's hold on its folder. `record` replaces the files of each request it sends (the
 * later sendings of an earlier recording go), so it records alone: another recorder's files
 * would go with them. `record-missing` only adds files, and shares the folder with others like
 * it.
 */
function recordingLock(cassettes: ShelfOptions): FolderLock | undefined {
  return lockFolder(cassettes.dir, cassettes.mode === "record" ? "exclusive" : "shared");
}

/** Why a recording cannot have its folder, in the words the user started it with. */
function recordingRefused(cassettes: ShelfOptions): ConfigError {
  const flags = cassettes.from === "flags";
  const record = flags ? "--record" : 'mode "record"';
  const addOnly = flags ? "--replay with --record-missing" : 'mode "record-missing"';
  const why =
    cassettes.mode === "record"
      ? `is being recorded into by another gateway, and a recording (${record}) replaces the files of the requests it sends, so it records alone`
      : `is being recorded by another gateway (${record}), which replaces the files of the requests it sends`;
  return new ConfigError(
    [
      `dir: ${cassettes.dir} ${why}: give each gateway a folder of its own (one per test file), ` +
        `or record with ${addOnly}, which only adds files and shares its folder`,
    ],
    optionName(cassettes),
  );
}

/** What the user gave the cassette folder as: serve's flag, or startGateway's option. */
function optionName(cassettes: ShelfOptions): string {
  if (cassettes.from === "option") return "cassettes option";
  return `${cassettes.mode === "record" ? "--record" : "--replay"} folder`;
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
    if (failedCall(undefined, signal) !== "client left") save(chunks, cut || undefined);
  }
}
