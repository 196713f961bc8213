import {
  loggedEndpoint,
  type RequestSource,
  readLoggedEndpoint,
} from "../../store/request-source.js";
import { newId } from "../../store/secrets.js";
import type {
  AccountRow,
  AdmittedCount,
  ByokRow,
  Catalog,
  GatewayStore,
  KeyWithAccount,
  ModelRow,
  ReserveInput,
  SettleInput,
} from "../../store/types.js";
import { parseSubscription } from "../../store/types.js";
import { freeTokenWindowStart } from "../../store/usage-rows.js";
import { BudgetRefusal, budgetSpentError, mapFailure } from "../dispatch/dispatcher.js";
import { resolveTarget, type Target } from "../dispatch/resolve.js";
import { GatewayError, internalError, providerFailed } from "../errors.js";
import type { RequestTrace } from "../http/request-trace.js";
import {
  freeRpmKey,
  paidRpmKey,
  type RateHeaders,
  type RequestLimits,
} from "../limits/request-limits.js";
import { type SharedKeyLimiter, sharedKeyCounter } from "../limits/shared-key.js";
import { MemoryCounters, minuteMs } from "../limits/window-counter.js";
import type { Clock } from "../time/clock.js";
import type { GoneSignal } from "../time/gone-signal.js";
import type { ClientStyle } from "../wire/completion-types.js";
import { StreamBroken } from "../wire/to-client.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";
import type { Usage } from "../wire/usage.js";
import type { Ledger, Reservation, SettleOptions } from "./ledger.js";
import { refusedPayment } from "./payment.js";
import { costMicro, isFreeModelName, type Metered, type WorstCase } from "./pricing.js";
import type { Unsettled } from "./unsettled.js";

export interface AdmitInput {
  key: KeyWithAccount;
  target: Target;
  endpoint: string;
  /** Chat completions, messages and responses share the account's per-minute limit. */
  accountRpm: boolean;
  worstCase: (model: ModelRow) => WorstCase;
  stream: boolean;
  signal: GoneSignal;
  /** The request's trace while someone listens: told the model, key and, at settlement, the cost. */
  trace?: RequestTrace;
  /** A job's hold: kept until the job ends, on whichever gateway runs it. */
  outlivesRequest?: boolean;
  /** The id the answer carries (`x-request-id`): the request log's row gets the same. */
  requestId?: string;
  /** Where the request came from besides /v1 itself (an MCP tool call), for the request log. */
  source?: RequestSource;
}

export interface Admission {
  account: AccountRow;
  /**
   * The target's models the request may be served by, in order (`servableSteps`): what it is
   * dispatched to, and what its hold was priced on.
   */
  steps: ModelRow[];
  reservation: Reservation;
  rateHeaders: RateHeaders | undefined;
  byok: ByokRow[];
  byokOnly: boolean;
  free: boolean;
  trace?: RequestTrace;
  /**
   * A free route's check of each step's token budget as the dispatcher tries it
   * (`DispatchOptions.budgetSpent`); unset when there is nothing to check.
   */
  budgetSpent?: BudgetSpent;
}

/** Milliseconds until `model`'s free token budget refills when it is used up, else undefined. */
export type BudgetSpent = (model: ModelRow) => number | undefined | Promise<number | undefined>;

/**
 * The endpoints the completion styles are logged and billed as: their requests share the
 * account's per-minute limit (spec, Limits), which admission takes when asked (`accountRpm`).
 */
export const completionEndpoints: Record<ClientStyle, string> = {
  chat: "chat.completions",
  messages: "messages",
  responses: "responses",
};

/**
 * The legacy Completions API (POST /v1/completions), answered through chat and logged apart: its
 * requests share the account's per-minute limit as chat's do.
 */
export const textCompletionEndpoint = "completions";

/** A route whose every step is a :free model is served free, and counts against the free limits. */
function servedFree(target: Target): boolean {
  return (
    isFreeModelName(target.name) || target.models.every((model) => isFreeModelName(model.name))
  );
}

/**
 * The models of `target` an account may be served by: without a subscription, a route's
 * subscribers-only steps are left out (the route falls back past them); a model named alone is
 * refused with 403 subscribers_only instead.
 */
export function servableSteps(target: Target, subscribed: boolean): ModelRow[] {
  return target.isRoute && !subscribed
    ? target.models.filter((m) => !m.subscribers_only)
    : target.models;
}

const subscribersOnly = () =>
  new GatewayError(
    403,
    "subscribers_only",
    "This model is available to subscribers only: subscribe to a plan that covers it, or pick another model (GET /v1/models lists them).",
  );

/** What admission and settlement use of the gateway's services (which are one). */
export interface AdmissionServices {
  store: GatewayStore;
  ledger: Ledger;
  limits: RequestLimits;
  sharedKeys: SharedKeyLimiter;
  /** Admitted requests not yet settled: what a closing gateway waits for. */
  unsettled: Unsettled;
  options: { now: () => number; clock: Clock };
}

/**
 * Every limit and the money hold, in the spec's order, before anything is dispatched. What is
 * admitted holds its worst-case cost; `settleAdmission` charges the real cost afterwards.
 */
export async function admit(services: AdmissionServices, input: AdmitInput): Promise<Admission> {
  const admission = await limitsAndHold(services, input);
  if (!input.outlivesRequest) services.unsettled.add(admission.reservation);
  return admission;
}

/** `admit`'s limits and hold. */
async function limitsAndHold(services: AdmissionServices, input: AdmitInput): Promise<Admission> {
  const { trace } = input;
  if (trace) {
    trace.model = input.target.name;
    trace.keyLabel = input.key.label;
    trace.stream = input.stream;
  }
  const now = services.options.now();
  const account = services.store.getAccount(input.key.account_id);
  if (!account) throw new GatewayError(500, "internal_error", "account missing");
  const subscription = parseSubscription(account);
  const free = servedFree(input.target);
  const byok = services.store.listByok(account.id);
  let rateHeaders: RateHeaders | undefined;
  const tier =
    services.store.getCatalog().tiers.get(account.tier) ??
    services.store.getCatalog().tiers.get("free");
  if (!tier) throw new GatewayError(500, "internal_error", "no free tier configured");
  const models = servableSteps(input.target, subscription !== null);
  if (models.length === 0 || (!subscription && models.some((m) => m.subscribers_only))) {
    throw subscribersOnly();
  }

  if (free) {
    await freeTokenBudgetCheck(services, models, now);
    const headers = services.limits.takeFreeRpm(account.id, tier, now);
    const taken: RateHeaders = headers instanceof Promise ? await headers : headers;
    rateHeaders = taken;
    const spaced = services.limits.spaceFreeBurst(
      account.id,
      tier,
      services.options.clock,
      input.signal,
    );
    const waited = spaced instanceof Promise ? await spaced : spaced;
    if (waited > 0) {
      // The wait shows on the answer: a test sees its manual clock jump, a client why it was slow.
      taken["X-Gateway-Burst-Wait-Ms"] = String(waited);
      if (trace) trace.burstWaitMs = waited;
    }
    const reservation = await services.ledger.reserve(
      reserveInput(input, account, now, {
        worstCaseMicro: 0,
        subscriptionModel: false,
        payment: "free",
        freeDailyLimit: tier.free_daily,
        count: undefined,
      }),
    );
    const budgetSpent = free
      ? stepBudgets(services, input.target, models, free, {
          reservation,
          units: (model) => input.worstCase(model).units,
        })
      : undefined;
    return {
      account,
      steps: models,
      reservation,
      rateHeaders,
      byok,
      byokOnly: false,
      free,
      trace,
      budgetSpent,
    };
  }

  // A shared key's own limit is checked between the account's count and the hold, so its count
  // cannot go with the hold.
  const countInHold =
    input.accountRpm && input.key.kind !== "shared" && services.ledger.countsInHold;
  if (input.accountRpm && !countInHold) {
    // The hot path: counters in memory answer at once, and only the database's are awaited.
    const taken = services.limits.takePaidRpm(account, now);
    if (taken instanceof Promise) await taken;
    if (input.key.kind === "shared") {
      let admitted = services.sharedKeys.admitKey(input.key.id, account.rpm_limit, now);
      if (admitted instanceof Promise) admitted = await admitted;
      if (!admitted) {
        // Refused for the key's share: the request is not one of the account's, so the count it
        // took is given back; else sharers could use up the owner's limit (spec, Limits).
        const back = services.limits.giveBackPaidRpm(account.id, now);
        if (back instanceof Promise) await back;
        throw new GatewayError(
          429,
          "rate_limit_exceeded",
          "This shared key has used its share of the account's per-minute limit.",
        );
      }
    }
  }
  const worstCaseMicro = Math.max(...models.map((m) => costMicro(m, input.worstCase(m))));
  // A subscription pays for nothing before it starts (a clock set before its start, say).
  const covered =
    subscription !== null &&
    now >= (account.subscription_started_at ?? account.created_at) &&
    (!subscription.models || subscription.models.includes(input.target.name));
  const base = reserveInput(input, account, now, {
    worstCaseMicro,
    subscriptionModel: covered,
    payment: undefined,
    freeDailyLimit: tier.free_daily,
    count: countInHold ? services.limits.paidRpmCount(account) : undefined,
  });
  try {
    return {
      account,
      steps: models,
      reservation: await services.ledger.reserve(base),
      rateHeaders,
      byok,
      byokOnly: false,
      free,
      trace,
    };
  } catch (err) {
    // An account that cannot pay (its balance, PAYG limit or subscription window used up) may
    // still use its own provider keys, and only those (DECISIONS: BYOK).
    const byokCovers = models.every((m) => byok.some((b) => b.provider_id === m.provider_id));
    if (byokCovers && refusedPayment(err)) {
      // `payment` is one of base's fields: replacing it keeps V8's fast path.
      const reservation = await services.ledger.reserve({ ...base, payment: "byok" });
      return {
        account,
        steps: models,
        reservation,
        rateHeaders,
        byok,
        byokOnly: true,
        free,
        trace,
      };
    }
    throw err;
  }
}

/**
 * This process's limit counters, holding the per-minute counts admission took for the requests the
 * request log has (`admitted`, ordered by window): a gateway whose counters live in its memory,
 * started again within a minute (after a restart or a crash), grants no new minute. The log has
 * every request whose answer went out, so that much is counted again; a request refused at its
 * hold (which took its count and has no row) is not, nor the limits the log cannot tell (a shared
 * key's per-address count, the usage endpoints', key creation's).
 */
export function restoredCounters(catalog: Catalog, admitted: AdmittedCount[]): MemoryCounters {
  const counters = new MemoryCounters();
  const free = new Map<string, boolean>();
  for (const row of admitted) {
    let isFree = free.get(row.model);
    if (isFree === undefined) {
      isFree = loggedFree(catalog, row.model);
      free.set(row.model, isFree);
    }
    const { windowStart: at, requests } = row;
    if (isFree) {
      counters.restore(freeRpmKey(row.accountId), minuteMs, at, requests);
      continue;
    }
    if (!isCompletionEndpoint(readLoggedEndpoint(row.endpoint).endpoint)) continue;
    counters.restore(paidRpmKey(row.accountId), minuteMs, at, requests);
    if (row.shared && row.keyId)
      counters.restore(sharedKeyCounter(row.keyId), minuteMs, at, requests);
  }
  return counters;
}

/** Whether a logged model or route name was served free, as the catalog has it (else by its name). */
function loggedFree(catalog: Catalog, name: string): boolean {
  try {
    return servedFree(resolveTarget(catalog, name));
  } catch {
    return isFreeModelName(name);
  }
}

const isCompletionEndpoint = (endpoint: string) =>
  endpoint === textCompletionEndpoint || Object.values(completionEndpoints).includes(endpoint);

type ReserveTerms = Pick<
  ReserveInput,
  "worstCaseMicro" | "subscriptionModel" | "payment" | "freeDailyLimit" | "count"
>;

/**
 * The hold's input, built as one object literal: on Node 20, spreading an object and adding
 * fields to the copy takes V8's slow path for every added field, microseconds a request.
 */
function reserveInput(
  input: AdmitInput,
  account: AccountRow,
  now: number,
  terms: ReserveTerms,
): ReserveInput {
  return {
    id: input.requestId ?? newId("req"),
    accountId: account.id,
    keyId: input.key.id,
    endpoint: loggedEndpoint(input.endpoint, input.source),
    model: input.target.name,
    stream: input.stream,
    worstCaseMicro: terms.worstCaseMicro,
    subscriptionModel: terms.subscriptionModel,
    payment: terms.payment,
    freeDailyLimit: terms.freeDailyLimit,
    outlivesRequest: input.outlivesRequest,
    count: terms.count,
    now,
  };
}

/**
 * A free request's check of each step's token budget as the dispatcher tries the step
 * (`DispatchOptions.budgetSpent`), for a request and for a job its runner dispatches alike: a
 * route's later steps are tried after earlier ones failed, and a job's steps once the runner takes
 * it, by when their budgets may be spent. A step whose answer spends units known before it is
 * called (`held.units`: images, characters, seconds) holds them of its budget as it is tried
 * (`Ledger.holdBudget`), so requests at once cannot pass the budget by more than one request
 * alone does; a chat answer's tokens are known only once it is written, so its step is checked
 * against what was counted. Undefined when there is nothing to check.
 */
export function stepBudgets(
  services: AdmissionServices,
  target: Pick<Target, "isRoute">,
  steps: readonly ModelRow[],
  free: boolean,
  held?: { reservation: Reservation; units: (model: ModelRow) => number },
): BudgetSpent | undefined {
  if (!free) return undefined;
  const holds = (model: ModelRow) =>
    held !== undefined && hasBudget(model) && held.units(model) > 0;
  // A model named alone was checked at admission; only units to hold are a step's own to check.
  if (!steps.some(hasBudget) || !(target.isRoute || steps.some(holds))) return undefined;
  return (model) => {
    const now = services.options.now();
    if (!held || !holds(model)) return budgetRefillMs(services, model, now);
    const windowSeconds = model.free_token_window_seconds as number;
    const taken = services.ledger.holdBudget(held.reservation, {
      model: model.name,
      windowSeconds,
      tokens: model.free_token_budget as number,
      units: held.units(model),
      now,
    });
    const refill = (ok: boolean) => (ok ? undefined : refillMs(windowSeconds, now));
    return taken instanceof Promise ? taken.then(refill) : refill(taken);
  };
}

/** Milliseconds from `now` until a budget window of `windowSeconds` rolls over. */
const refillMs = (windowSeconds: number, now: number) =>
  freeTokenWindowStart(windowSeconds, now) + windowSeconds * 1000 - now;

const hasBudget = (model: ModelRow) =>
  Boolean(model.free_token_budget && model.free_token_window_seconds);

/**
 * Milliseconds until `model`'s free token budget refills (its window rolls over) when the budget
 * is used up now, else undefined (a model without a budget never is).
 */
function budgetRefillMs(
  services: AdmissionServices,
  model: ModelRow,
  now: number,
): number | undefined | Promise<number | undefined> {
  const budget = model.free_token_budget;
  const windowSeconds = model.free_token_window_seconds;
  if (!budget || !windowSeconds) return undefined;
  const refill = (used: number) => (used >= budget ? refillMs(windowSeconds, now) : undefined);
  const used = services.store.freeTokensUsed(model.name, windowSeconds, now);
  return used instanceof Promise ? used.then(refill) : refill(used);
}

/**
 * Refuses a free request when every step it may be served by has used up its token budget, with
 * the soonest refill as Retry-After; a route with one step left is admitted, and each step is
 * checked again when the dispatcher tries it.
 */
async function freeTokenBudgetCheck(
  services: AdmissionServices,
  models: readonly ModelRow[],
  now: number,
): Promise<void> {
  let soonest = Number.POSITIVE_INFINITY;
  for (const model of models) {
    const refill = await budgetRefillMs(services, model, now);
    if (refill === undefined) return;
    soonest = Math.min(soonest, refill);
  }
  if (models.length > 0) throw budgetSpentError(soonest);
}

export interface Settlement {
  status: number;
  usage: Usage;
  units?: number;
  model: ModelRow | undefined;
  providerId: string | null;
  delivered: boolean;
  /** The request was served with the account's own provider key: no token prices. */
  byokServed: boolean;
  errorCode?: string;
  /** Tools the backend could not run, left out of the request it was sent. */
  toolsOmitted?: string[];
}

/** What the ledger is told of an outcome: its cost at the model's prices, and its counts. */
function settleInput(admission: Admission, outcome: Settlement, now: number): SettleInput {
  const metered: Metered = {
    inputTokens: outcome.usage.input_tokens,
    outputTokens: outcome.usage.output_tokens,
    units: outcome.units ?? 0,
  };
  const cost =
    outcome.model && !outcome.byokServed && !admission.free ? costMicro(outcome.model, metered) : 0;
  const model = outcome.model;
  // The budget is of the gateway's own provider keys: the account's own key spends none of it.
  const budgetWindow =
    admission.free &&
    outcome.delivered &&
    !outcome.byokServed &&
    model?.free_token_budget &&
    model.free_token_window_seconds;
  return {
    status: outcome.status,
    costMicro: cost,
    inputTokens: metered.inputTokens,
    outputTokens: metered.outputTokens,
    providerId: outcome.providerId,
    servedModel: model?.name ?? null,
    errorCode: outcome.errorCode ?? null,
    delivered: outcome.delivered,
    toolsOmitted: outcome.toolsOmitted,
    byokServed: outcome.byokServed,
    // Counted by the settlement itself; a stream's delivery mark carries them too: an
    // interrupted stream counts as a delivered one. A media answer has no tokens: the units it is
    // priced by (images, characters, seconds) are what it spends of the budget, else a free media
    // model's budget would never fill.
    freeTokens: budgetWindow
      ? {
          model: model.name,
          windowSeconds: budgetWindow,
          tokens: metered.inputTokens + metered.outputTokens + metered.units,
        }
      : undefined,
    now,
  };
}

export function settleAdmission(
  services: AdmissionServices,
  admission: Admission,
  outcome: Settlement,
  options: SettleOptions = {},
): void {
  const now = services.options.now();
  const input = settleInput(admission, outcome, now);
  const metered = { inputTokens: input.inputTokens, outputTokens: input.outputTokens };
  const charged = services.ledger.settle(admission.reservation, input, options);
  services.unsettled.settled(admission.reservation);
  const { trace } = admission;
  if (trace) {
    trace.costMicro = charged;
    trace.inputTokens = metered.inputTokens;
    trace.outputTokens = metered.outputTokens;
    trace.providerId = outcome.providerId;
    trace.servedModel = outcome.model?.name ?? null;
    trace.errorCode = outcome.errorCode;
    trace.toolsOmitted = outcome.toolsOmitted;
  }
}

/** A stream's first mark covers this much output, however little its first piece has. */
const firstCoveredTokens = 16;

/**
 * Keeps a stream's delivery mark (`Ledger.markDelivery`) ahead of what it delivers. Call the
 * answer before each piece goes out, once the meter counts it, and wait for what it returns: when
 * the piece takes the stream past what its mark covers, the mark moves to twice the output it
 * covered (at least what is going out), so a stream is marked a few times, not at every piece, and
 * a gateway that dies under it charges at least what its client received and at most about twice
 * that, never past the hold.
 */
export function deliveryCover(
  services: AdmissionServices,
  admission: Admission,
  meter: { billedAhead(): Usage },
  outcome: (covered: Usage) => Settlement,
): () => void | Promise<void> {
  let input = -1;
  let output = -1;
  return () => {
    const now = meter.billedAhead();
    if (now.output_tokens <= output && now.input_tokens <= input) return;
    input = Math.max(input, now.input_tokens);
    output = Math.max(now.output_tokens, 2 * output, firstCoveredTokens);
    const covered = { ...now, input_tokens: input, output_tokens: output };
    return services.ledger.markDelivery(
      admission.reservation,
      settleInput(admission, outcome(covered), services.options.now()),
    );
  };
}

/** Settles a request that delivered its answer; resolves once the charge is committed, so the
 * answer never leaves unbilled. */
export async function settleDelivered(
  services: AdmissionServices,
  admission: Admission,
  outcome: Omit<Settlement, "delivered">,
): Promise<void> {
  // Field by field, not a spread with `delivered` added: see reserveInput.
  settleAdmission(services, admission, {
    status: outcome.status,
    usage: outcome.usage,
    units: outcome.units,
    model: outcome.model,
    providerId: outcome.providerId,
    delivered: true,
    byokServed: outcome.byokServed,
    errorCode: outcome.errorCode,
    toolsOmitted: outcome.toolsOmitted,
  });
  try {
    await services.ledger.committed(admission.reservation);
  } catch (err) {
    // Not recorded, or refused (a late answer the account cannot pay): nothing was charged.
    if (admission.trace) admission.trace.costMicro = 0;
    throw err;
  }
}

/** Settles a request that produced nothing and returns the error the client should see. */
export function failAdmission(
  services: AdmissionServices,
  admission: Admission,
  err: unknown,
  options: SettleOptions = {},
): GatewayError {
  const error = toGatewayError(err);
  settleAdmission(
    services,
    admission,
    {
      status: error.status,
      usage: { input_tokens: 0, output_tokens: 0 },
      delivered: false,
      model: undefined,
      providerId: null,
      byokServed: false,
      errorCode: error.code,
    },
    options,
  );
  return error;
}

/**
 * `failAdmission` for a route: resolves with the error to answer once the failure is committed, so
 * the request log shows it before the client hears of it (on Postgres the settlement is a round
 * trip away). A failure is answered as itself even when its record cannot be written.
 */
export async function settleFailed(
  services: AdmissionServices,
  admission: Admission,
  err: unknown,
): Promise<GatewayError> {
  if (err instanceof BudgetRefusal) {
    // Its budget's last units went to requests at once: refused as admission's check refuses a
    // spent budget, its hold given back unrecorded (docs/metering.md).
    services.unsettled.settled(admission.reservation);
    if (admission.trace) admission.trace.errorCode = err.code;
    await Promise.resolve(services.ledger.release(admission.reservation)).catch(() => {});
    return err;
  }
  const error = failAdmission(services, admission, err);
  await services.ledger.committed().catch(() => {});
  return error;
}

function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  if (err instanceof UpstreamFailure) return mapFailure(err);
  if (err instanceof StreamBroken) return providerFailed();
  return internalError();
}
