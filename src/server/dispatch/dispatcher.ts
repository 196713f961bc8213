import { redactSecrets } from "../../store/secrets.js";
import { storageFaultKind } from "../../store/storage-fault.js";
import type { ByokRow, GatewayStore, ModelRow, ProviderRow } from "../../store/types.js";
import { GatewayError, providerFailed, upstreamRejection } from "../errors.js";
import { shownText } from "../http/shown-text.js";
import type { Attempt, Credential, ProviderContext } from "../providers/provider.js";
import { providerOf, servesNatively } from "../providers/registry.js";
import type { GoneSignal } from "../time/gone-signal.js";
import type {
  CompletionRequest,
  CompletionResult,
  JsonCompletion,
} from "../wire/completion-types.js";
import type { ResponsesRequest } from "../wire/responses-types.js";
import type { StreamCompletion, StreamPiece } from "../wire/stream-types.js";
import { StreamBroken } from "../wire/to-client.js";
import { outputLimit, rewritesBody } from "../wire/to-provider.js";
import { contextStrategySentence } from "../wire/translate/responses.js";
import {
  ExplainedRejection,
  InvalidRequest,
  UnsupportedRequest,
  UpstreamFailure,
} from "../wire/upstream-failure.js";
import type { CompactionSeal } from "./compaction.js";
import type { KeyPools } from "./key-pool.js";
import type { Target } from "./resolve.js";
import { withResponseTurn } from "./response-state.js";
import { withThread } from "./threads.js";

export interface DispatchOutcome<T = CompletionResult> {
  result: T;
  attempt: Attempt;
}

/** A text completion as the client gets it; a stream comes with its first piece already read. */
export type ServedCompletion =
  | JsonCompletion
  | (StreamCompletion & { first: IteratorResult<StreamPiece> });

export interface DispatchOptions {
  byok: ByokRow[];
  /** The account could not pay, so only its own credentials may be used. */
  byokOnly: boolean;
  /** Told each attempt's model and how it ended (`mock-flaky 503`, `mock-gpt ok`): serve's line. */
  steps?: string[];
  /**
   * A free route's token budgets: milliseconds until `model`'s refills when it is used up, checked
   * as each step is tried. A spent step is not served by the gateway's own keys (the budget is
   * theirs); the account's own keys for it still may.
   */
  budgetSpent?: (model: ModelRow) => number | undefined | Promise<number | undefined>;
}

/** One credential of an attempt's chain; `own` is the account's BYOK row it comes from. */
interface ChainLink {
  acquire: () => Credential;
  own?: ByokRow;
}

/**
 * Tries each model of the target, and for each its credential chain (the account's BYOK keys in
 * order, then the provider's pool). A direct dispatch to one provider with one credential is
 * never retried; inside a route or a credential chain a failure moves on to the next. An own key
 * the provider refuses is marked so on the account's list until the provider takes it again.
 */
export class Dispatcher {
  /** Told of every failed attempt that reached a provider (set by /metrics; unset, it costs nothing). */
  upstreamFailed: ((providerId: string, failure: UpstreamFailure) => void) | undefined;

  constructor(
    private readonly store: Pick<GatewayStore, "getCatalog" | "markByokRefused">,
    private readonly pools: KeyPools,
    /** What provider calls use: the upstream HTTP client and the mock's script. */
    readonly providers: ProviderContext,
    /** The gateway's clock: when an own key was refused. */
    private readonly now: () => number,
    /** Opens the compaction items the gateway made, for whichever model a request goes to. */
    private readonly compactions?: CompactionSeal,
  ) {}

  /**
   * Text completions: the provider of each attempt's wire answers in the client's style. A stream
   * that fails before its first piece has sent the client nothing but keepalive comments, so it
   * counts as a failed attempt: a route or credential chain moves on to the next.
   */
  dispatch(
    target: Target,
    req: CompletionRequest,
    options: DispatchOptions,
  ): Promise<DispatchOutcome<ServedCompletion>> {
    if (req.style === "responses" && this.compactions) {
      try {
        this.compactions.openIn(req);
      } catch (err) {
        return Promise.reject(err);
      }
    }
    return this.dispatchWith<ServedCompletion>(target, req.signal, options, async (attempt) => {
      let answer: CompletionResult;
      try {
        answer = await providerOf(attempt.provider).complete(this.providers, attempt, req);
      } catch (err) {
        throw explainRejection(providerReading(err, attempt), req, attempt);
      }
      const result = req.thread
        ? await withThread(answer, req.thread)
        : req.responseTurn
          ? await withResponseTurn(answer, req.responseTurn, attempt)
          : answer;
      if (result.kind === "json") return { value: result, streaming: false };
      let first: IteratorResult<StreamPiece>;
      try {
        first = await firstOutput(result);
      } catch (err) {
        throw attemptFailure(err, req.signal, attempt);
      }
      return { value: Object.assign(result, { first }), streaming: true };
    });
  }

  /**
   * Any modality: `call` performs one attempt. A `streaming` value keeps its credential until the
   * caller releases it; otherwise the credential is released as soon as the attempt returns.
   */
  async dispatchWith<T>(
    target: Target,
    signal: GoneSignal,
    options: DispatchOptions,
    call: (attempt: Attempt) => Promise<{ value: T; streaming: boolean }>,
  ): Promise<DispatchOutcome<T>> {
    const catalog = this.store.getCatalog();
    const failures: UpstreamFailure[] = [];
    let attempts = 0;
    const last = target.models[target.models.length - 1];
    for (const model of target.models) {
      const provider = catalog.providers.get(model.provider_id);
      if (!provider) continue;
      const spent = options.budgetSpent?.(model);
      const refillMs = spent instanceof Promise ? await spent : spent;
      if (refillMs !== undefined) {
        failures.push(new BudgetSpent(refillMs));
        options.steps?.push(`${model.name} budget`);
      }
      for (const { acquire, own } of this.credentials(provider, options, refillMs === undefined)) {
        let acquired: Credential;
        try {
          acquired = acquire();
        } catch (err) {
          if (err instanceof UpstreamFailure) {
            failures.push(err);
            continue;
          }
          throw err;
        }
        attempts++;
        const attempt: Attempt = {
          model,
          provider,
          credential: acquired,
          lastStep: model === last,
        };
        try {
          const { value, streaming } = await call(attempt);
          if (!streaming) acquired.release("ok");
          options.steps?.push(`${model.name} ok`);
          if (own && own.refused_at !== null) await this.markOwnKey(own, null);
          return { result: value, attempt };
        } catch (caught) {
          const read = providerReading(caught, attempt);
          if (!(read instanceof UpstreamFailure)) {
            acquired.release("failed");
            throw read;
          }
          let err = read;
          if (own && refusesKey(read)) {
            err = new OwnKeyFailed(read, provider.id, "refused");
            if (own.refused_at === null) await this.markOwnKey(own, this.now());
          } else if (own && read.kind === "rate_limited") {
            err = new OwnKeyFailed(read, provider.id, "rate_limited");
          }
          acquired.release(releaseOutcome(err), err.retryAfterMs);
          failures.push(err);
          options.steps?.push(
            err.unreachable
              ? unreachableStep(model.name, provider.id, err.unreachable)
              : `${model.name} ${err.status || err.kind}`,
          );
          if (err.kind !== "unsupported") this.upstreamFailed?.(provider.id, err);
          if (signal.aborted) throw err;
        }
      }
    }
    throw finalError(target, failures, attempts);
  }

  private credentials(provider: ProviderRow, options: DispatchOptions, pool: boolean): ChainLink[] {
    const own = options.byok
      .filter((b) => b.provider_id === provider.id)
      .map(
        (b): ChainLink => ({
          acquire: () => ({ source: "byok", secret: b.secret, release: () => {} }),
          own: b,
        }),
      );
    if (options.byokOnly || !pool) return own;
    return [...own, { acquire: () => this.pools.acquire(provider) }];
  }

  /**
   * Marks an own key refused at `at`, or clears the mark (null), before the request goes on: the
   * owner's list shows it by the time the caller has its answer. Only a change is written, so a
   * key that keeps working writes nothing. A write that fails costs the request nothing.
   */
  private async markOwnKey(own: ByokRow, at: number | null): Promise<void> {
    try {
      await this.store.markByokRefused(own.account_id, own.id, at);
    } catch (err) {
      console.error(
        `byok credential ${own.id}: its state was not recorded: ${(err as Error).message}`,
      );
    }
  }
}

/**
 * A step whose provider could not be reached, named on serve's line with what to check: sending
 * again does not help where the base URL or the network is wrong.
 */
export function unreachableStep(model: string, providerId: string, cause: string): string {
  return `${model} unreachable: provider ${providerId} (${cause}; check its base_url and this machine's network)`;
}

/**
 * The provider refused the credential itself: a 401 (or what its provider reads as one), or a
 * 403 that gives no other reason (a key without access to the model or the API).
 */
function refusesKey(err: UpstreamFailure): boolean {
  return (
    err.kind === "unauthorized" ||
    (err.kind === "rejected" && err.status === 403 && err.reason === "upstream_rejected")
  );
}

/**
 * An attempt with the account's own key for `providerId` that its provider refused or
 * rate-limited: answered as the failure it is, with text that says whose key it was (never any
 * of the key itself), so the caller knows the limit or the fix is the account's, not the gateway's.
 */
class OwnKeyFailed extends UpstreamFailure {
  constructor(
    failure: UpstreamFailure,
    readonly providerId: string,
    readonly how: "refused" | "rate_limited",
  ) {
    // Read by its provider already (providerReading): no codes, so it is not read again.
    super(failure.kind, failure.status, failure.reason, failure.retryAfterMs);
    this.name = "OwnKeyFailed";
  }
}

/**
 * A free route's step whose token budget is used up: skipped, and when every step was, the
 * request is refused as its budget is (429 rate_limit_exceeded), with the soonest refill.
 */
class BudgetSpent extends UpstreamFailure {
  constructor(refillMs: number) {
    super("busy", 429, "rate_limit_exceeded", refillMs);
    this.name = "BudgetSpent";
  }
}

/**
 * A free request refused because every step's token budget is used up (or held by requests at
 * once): whether admission's check or a step's hold refused it, it is the same refusal, with no
 * request log row and nothing counted, as the other 429s a request gets before it is served.
 */
export class BudgetRefusal extends GatewayError {}

/** The refusal of a free request whose every step has used up its token budget. */
export function budgetSpentError(refillMs: number): GatewayError {
  return new BudgetRefusal(
    429,
    "rate_limit_exceeded",
    "This free model's token budget for the current window is used up; it refills when the window rolls.",
    { retryAfter: Math.ceil(refillMs / 1000) },
  );
}

/** Names the providers whose own keys failed, and how, so the caller knows whose key it was. */
function ownKeysText(failed: readonly OwnKeyFailed[]): string {
  const sentences: string[] = [];
  for (const how of ["refused", "rate_limited"] as const) {
    const these = failed.filter((failure) => failure.how === how);
    if (these.length === 0) continue;
    const providers = [...new Set(these.map((failure) => failure.providerId))];
    const one = these.length === 1;
    const keys = `The account's own ${one ? "key" : "keys"} for ${providers.join(", ")} (BYOK)`;
    sentences.push(
      how === "refused"
        ? `${keys} ${one ? "was" : "were"} refused by ${one ? "the provider" : "their providers"}; the account's owner can replace ${one ? "it" : "them"} on the dashboard.`
        : `${keys} ${one ? "was" : "were"} rate-limited by ${one ? "the provider" : "their providers"}; retry later, or raise the limits of ${one ? "that key" : "those keys"} with ${one ? "its provider" : "their providers"}.`,
    );
  }
  return sentences.join(" ");
}

/**
 * A rejection as the attempt's provider reads it (`Provider.classify`): a key refusal in its own
 * words is the key's failure. A failure read once passes again unchanged: it has no codes.
 */
function providerReading(err: unknown, attempt: Attempt): unknown {
  if (!(err instanceof UpstreamFailure) || err.kind !== "rejected" || err.codes.length === 0)
    return err;
  return providerOf(attempt.provider).classify?.(err) ?? err;
}

/**
 * Claude Code sends `role: "system"` items inside `messages` to a model name it does not know, and
 * an older Claude model refuses them. It drops them and retries only when a 400's message says
 * "not supported" and names role "system" (read in the bundles of Claude Code 2.1.197 and 2.1.332,
 * `@anthropic-ai/claude-code` on npm), so the fixed text says so in those words.
 */
const systemMessagesRejectedText =
  'Messages with role "system" are not supported by every model; send system text in the top-level system parameter instead.';

/**
 * A 400 the gateway can tell the likely reason of without the provider's words: on a same-wire
 * body, an output limit above the model's maximum, or `system` items inside an anthropic-wire
 * body's `messages`; on the Responses bridge, an input over the context window that the client
 * asked the Responses API to cut or compact, which no other backend does.
 */
function explainRejection(err: unknown, req: CompletionRequest, attempt: Attempt): unknown {
  if (!(err instanceof UpstreamFailure) || err.kind !== "rejected" || err.status !== 400)
    return err;
  const native = servesNatively(attempt.provider, req.style);
  if (err.reason === "context_length_exceeded" && req.style === "responses" && !native) {
    const overflow = contextStrategySentence(req.body as ResponsesRequest);
    return overflow ? new ExplainedRejection(err.status, overflow, err.reason) : err;
  }
  if (rewritesBody(native, req.viaRoute === true)) return err;
  const reasons: string[] = [];
  if (req.style === "messages" && carriesSystemMessages(req.body)) {
    reasons.push(`The provider rejected the request as invalid. ${systemMessagesRejectedText}`);
  }
  const limit = outputLimit(req.style, req.body);
  const max = attempt.model.max_output_tokens;
  if (limit && limit.value > max) {
    reasons.push(
      `${limit.field} ${limit.value} exceeds this model's maximum output of ${max} tokens`,
    );
  }
  return reasons.length > 0 ? new ExplainedRejection(err.status, reasons.join(" Also: ")) : err;
}

function carriesSystemMessages(body: Record<string, unknown>): boolean {
  const messages = body.messages;
  return (
    Array.isArray(messages) &&
    messages.some((m) => typeof m === "object" && m !== null && m.role === "system")
  );
}

function releaseOutcome(err: UpstreamFailure): "ok" | "rate_limited" | "failed" {
  if (err.kind === "rate_limited" || err.kind === "unauthorized") return "rate_limited";
  // Nothing reached the provider: the key neither failed nor was limited.
  return err.kind === "unsupported" ? "ok" : "failed";
}

/**
 * A stream's first piece as the client gets it: the pieces before its first output (a chat
 * stream's role chunk, Anthropic's `message_start` and `ping`, Responses' `response.created`) are
 * held and go out in one piece with it. Until then the client has been sent nothing of this
 * attempt's answer, so a break (Anthropic's `overloaded_error` after `message_start`, a connection
 * cut after the role chunk) is a failed attempt a route or credential chain moves on from, and
 * costs nothing, rather than a started stream that ends in an error event and is charged its input.
 * A stream that ends with no output at all goes out piece by piece, its closing event apart.
 */
async function firstOutput(stream: StreamCompletion): Promise<IteratorResult<StreamPiece>> {
  const held: StreamPiece[] = [];
  for (;;) {
    const next = await stream.pieces.next();
    if (next.done) {
      if (held.length === 0) return next;
      stream.pieces = replayed(held.slice(1), stream.pieces);
      return { done: false, value: held[0] };
    }
    held.push(next.value);
    if (stream.meter.madeOutput()) return { done: false, value: joined(held) };
  }
}

/** `held`, then what `rest` has. */
function replayed(
  held: StreamPiece[],
  rest: AsyncIterator<StreamPiece>,
): AsyncIterator<StreamPiece> {
  return {
    next: () => {
      const value = held.shift();
      return value === undefined ? rest.next() : Promise.resolve({ done: false, value });
    },
    return: (value?: unknown) =>
      rest.return?.(value) ?? Promise.resolve({ done: true, value: undefined }),
  };
}

/** Pieces written as one. */
function joined(pieces: StreamPiece[]): StreamPiece {
  if (pieces.length === 1) return pieces[0];
  if (pieces.every((piece) => typeof piece === "string")) return pieces.join("");
  return Buffer.concat(
    pieces.map((piece) => (typeof piece === "string" ? Buffer.from(piece) : piece)),
  );
}

/**
 * A stream that broke before its first piece is the provider failing, like a 5xx. So is an error
 * nobody expected while that piece was made from what the provider sent (a translation that could
 * not read it): nothing went out yet, so the client gets the style's upstream_error (and a route
 * its next step) rather than an internal error, and the exception is named on stderr
 * (`unexpectedStreamError`), never to the client. A client that left, a refusal and the storage
 * keep their own answers.
 */
function attemptFailure(err: unknown, signal: GoneSignal, attempt: Attempt): unknown {
  if (err instanceof StreamBroken) return new UpstreamFailure("unavailable", 502);
  return unexpectedStreamError(err, signal, attempt, "on its first piece")
    ? new UpstreamFailure("unavailable", 502)
    : err;
}

/**
 * Whether `err`, which ended an attempt's stream, is one nobody expected (a translation that could
 * not read what the provider sent), and if so one line on stderr naming it: the same on the first
 * piece as after it, where the client's error event says only that the stream broke. A break of
 * the provider's, a client that left (or a stream the gateway cut), a refusal and the storage have
 * answers of their own. Never a stack; quoted text is left out of the message (a parser quotes
 * what it could not read: the provider's words) and the attempt's key is redacted.
 */
export function unexpectedStreamError(
  err: unknown,
  signal: GoneSignal,
  attempt: Attempt,
  when: "on its first piece" | "after its first piece",
): boolean {
  if (
    signal.aborted ||
    err instanceof StreamBroken ||
    err instanceof UpstreamFailure ||
    err instanceof GatewayError ||
    storageFaultKind(err)
  )
    return false;
  const { name, message } = err instanceof Error ? err : { name: "Error", message: String(err) };
  const [first = ""] = message.split("\n", 1);
  const unquoted = first
    .replace(/"[^"]*"?/g, '"..."')
    // A property's name (`reading 'parts'`) says where it broke, and is no one's words.
    .replace(/'([^']*)'?/g, (quoted, text: string) =>
      /^[\w$.]{1,40}$/.test(text) ? quoted : "'...'",
    );
  const secret = attempt.credential.secret;
  const said = shownText(redactSecrets(`${name}: ${unquoted}`, secret ? [secret] : []));
  console.error(
    `stream from provider ${attempt.provider.id} (model ${attempt.model.name}) failed ${when}: ${said.length > 300 ? `${said.slice(0, 300)}...` : said}`,
  );
  return true;
}

/**
 * The error a dispatch whose every attempt failed answers with. A direct dispatch that made one
 * attempt answers with that attempt's own error (spec: a direct dispatch is not retried); a route
 * or a credential chain answers all_providers_failed, waiting for the first key to cool off or
 * free up when keys were cooling or busy.
 */
export function finalError(
  target: Pick<Target, "isRoute">,
  failures: readonly UpstreamFailure[],
  attempts: number,
): GatewayError {
  // No backend could carry the request: that is the request's doing, so say what it asked for.
  if (failures.length > 0 && failures.every((failure) => failure.kind === "unsupported")) {
    return mapFailure(failures[0]);
  }
  if (failures.length > 0 && failures.every((failure) => failure instanceof BudgetSpent)) {
    return budgetSpentError(Math.min(...failures.map((failure) => failure.retryAfterMs ?? 0)));
  }
  const onlyFailure = failures.length === 1 ? failures[0] : undefined;
  if (!target.isRoute && onlyFailure && onlyFailure.kind !== "busy" && attempts === 1) {
    return mapFailure(onlyFailure);
  }
  // A spent budget refills when its window rolls, far off: the other steps' waits are the answer's.
  const waits = failures
    .filter((failure) => failure.kind === "busy" && !(failure instanceof BudgetSpent))
    .map((failure) => failure.retryAfterMs ?? 1000);
  const own = failures.filter((failure) => failure instanceof OwnKeyFailed);
  return new GatewayError(
    503,
    "all_providers_failed",
    own.length > 0
      ? `Every provider for this model failed or is at capacity. ${ownKeysText(own)}`
      : "Every provider for this model failed or is at capacity. Retry later.",
    waits.length > 0 ? { retryAfter: Math.ceil(Math.min(...waits) / 1000) } : {},
  );
}

/** One attempt's failure as the spec's error; the provider's own words never pass. */
export function mapFailure(failure: UpstreamFailure): GatewayError {
  const error = failureError(failure);
  if (!(failure instanceof OwnKeyFailed)) return error;
  return new GatewayError(error.status, error.code, ownKeysText([failure]), error.options);
}

function failureError(failure: UpstreamFailure): GatewayError {
  if (failure instanceof InvalidRequest) {
    return new GatewayError(400, "invalid_request_error", failure.detail);
  }
  if (failure instanceof UnsupportedRequest) {
    return new GatewayError(400, "bad_request", failure.detail);
  }
  if (failure instanceof ExplainedRejection) {
    return new GatewayError(failure.status, failure.reason, failure.detail, {
      upstreamRejection: true,
    });
  }
  if (failure.kind === "rejected") return upstreamRejection(failure.status, failure.reason);
  if (failure.kind === "rate_limited") {
    return new GatewayError(
      429,
      "upstream_error",
      "The provider rate-limited this request: send it again in a little while.",
    );
  }
  return providerFailed(failure.kind === "unavailable" ? failure.retryAfterMs : undefined);
}
