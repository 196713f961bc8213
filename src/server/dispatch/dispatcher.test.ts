import { describe, expect, it, vi } from "vitest";
import type { ByokRow, Catalog, ModelRow, ProviderRow } from "../../store/types.js";
import { errorBody, errorHeaders, type GatewayError } from "../errors.js";
import { UpstreamHttp } from "../providers/http-upstream.js";
import { MockScript } from "../providers/mock-script.js";
import type { Attempt } from "../providers/provider.js";
import { ManualClock } from "../time/clock.js";
import { StreamBroken } from "../wire/to-client.js";
import {
  ExplainedRejection,
  UnsupportedRequest,
  UpstreamFailure,
} from "../wire/upstream-failure.js";
import {
  Dispatcher,
  type DispatchOptions,
  finalError,
  mapFailure,
  unexpectedStreamError,
} from "./dispatcher.js";
import { KeyPools } from "./key-pool.js";
import type { Target } from "./resolve.js";

const direct = { isRoute: false };
const route = { isRoute: true };

const rejected = (status: number, reason: GatewayError["code"] = "upstream_rejected") =>
  new UpstreamFailure("rejected", status, reason);
const rateLimited = () => new UpstreamFailure("rate_limited", 429, "upstream_rejected", 7_000);
const unavailable = (status = 502) => new UpstreamFailure("unavailable", status);
const busy = (waitMs: number) => new UpstreamFailure("busy", 503, "upstream_rejected", waitMs);

/** The parts of an error a client sees: status, code, Retry-After. */
function seen(err: GatewayError) {
  return { status: err.status, code: err.code, retryAfter: errorHeaders(err)["Retry-After"] };
}

describe("finalError: one direct attempt answers with its own error", () => {
  it("keeps a rejection's 4xx status and reason, typed invalid_request_error", () => {
    const err = finalError(direct, [rejected(404, "model_not_found")], 1);
    expect(seen(err)).toEqual({ status: 404, code: "model_not_found", retryAfter: undefined });
    expect(errorBody(err, "chat")).toMatchObject({
      error: { type: "invalid_request_error", code: "model_not_found" },
    });
  });

  it("turns a rejection with a status outside 400, 403, 404, 413, 422, 429 into a 400", () => {
    const err = finalError(direct, [rejected(409, "context_length_exceeded")], 1);
    expect(seen(err)).toMatchObject({ status: 400, code: "context_length_exceeded" });
  });

  it("returns 429 upstream_error without Retry-After when the provider rate-limited it", () => {
    expect(seen(finalError(direct, [rateLimited()], 1))).toEqual({
      status: 429,
      code: "upstream_error",
      retryAfter: undefined,
    });
  });

  it("returns 503 upstream_error when the provider failed or timed out", () => {
    expect(seen(finalError(direct, [unavailable(502)], 1))).toMatchObject({
      status: 503,
      code: "upstream_error",
    });
    expect(seen(finalError(direct, [unavailable(504)], 1)).status).toBe(503);
  });

  it("returns 503 upstream_error, not a rejection of the body, when the provider refused the key", () => {
    const err = finalError(direct, [new UpstreamFailure("unauthorized", 503)], 1);
    expect(seen(err)).toMatchObject({ status: 503, code: "upstream_error" });
  });
});

describe("finalError: routes and credential chains answer all_providers_failed", () => {
  it("returns 503 all_providers_failed with the shortest cooldown as Retry-After when every key is cooling", () => {
    const err = finalError(direct, [busy(8_000), busy(2_500)], 0);
    expect(seen(err)).toEqual({ status: 503, code: "all_providers_failed", retryAfter: "3" });
  });

  it("returns 503 all_providers_failed without Retry-After when a route's every step failed", () => {
    const err = finalError(route, [rejected(400, "invalid_request_error")], 1);
    expect(seen(err)).toEqual({
      status: 503,
      code: "all_providers_failed",
      retryAfter: undefined,
    });
  });

  it("returns all_providers_failed when a direct dispatch's credential chain tried several keys", () => {
    const err = finalError(direct, [rateLimited(), unavailable()], 2);
    expect(seen(err)).toEqual({
      status: 503,
      code: "all_providers_failed",
      retryAfter: undefined,
    });
  });

  it("waits for the busy keys when the other steps failed for other reasons", () => {
    const err = finalError(route, [unavailable(), busy(4_000), rateLimited()], 2);
    expect(seen(err)).toEqual({ status: 503, code: "all_providers_failed", retryAfter: "4" });
  });

  it("waits for the pool when the account's own key failed and the pool was busy", () => {
    const err = finalError(direct, [unavailable(), busy(1_000)], 1);
    expect(seen(err)).toEqual({ status: 503, code: "all_providers_failed", retryAfter: "1" });
  });

  it("returns all_providers_failed when no model had a provider to try", () => {
    expect(seen(finalError(route, [], 0))).toEqual({
      status: 503,
      code: "all_providers_failed",
      retryAfter: undefined,
    });
  });
});

describe("finalError: a request no backend could carry", () => {
  it("answers 400 bad_request saying what the first backend could not carry", () => {
    const err = finalError(
      route,
      [new UnsupportedRequest("no web search here"), new UnsupportedRequest("nor here")],
      2,
    );
    expect(seen(err)).toMatchObject({ status: 400, code: "bad_request" });
    expect(err.message).toBe("no web search here");
  });

  it("answers all_providers_failed when another backend failed for another reason", () => {
    const err = finalError(route, [new UnsupportedRequest("no web search here"), unavailable()], 2);
    expect(err.code).toBe("all_providers_failed");
  });
});

describe("mapFailure", () => {
  it("says why a body forwarded as written was refused when its output limit was too high", () => {
    const err = mapFailure(new ExplainedRejection(400, "max_tokens 9000 exceeds the maximum"));
    expect(seen(err)).toMatchObject({ status: 400, code: "invalid_request_error" });
    expect(err.message).toBe("max_tokens 9000 exceeds the maximum");
    expect(errorBody(err, "chat")).toMatchObject({ error: { type: "invalid_request_error" } });
  });

  it("gives the provider's rejection fixed service text, never its own body", () => {
    const err = mapFailure(rejected(400, "content_policy_violation"));
    expect(err.message).toBe(
      "The provider blocked the request for content policy. Change the flagged content before sending it again: the same request is blocked again.",
    );
  });
});

function model(name: string, providerId: string): ModelRow {
  return {
    name,
    provider_id: providerId,
    upstream_model: name,
    modality: "chat",
    price_input_per_mtok: 0,
    price_output_per_mtok: 0,
    price_per_request: 0,
    price_per_unit: 0,
    subscribers_only: 0,
    context_window: 8_192,
    max_output_tokens: 1_024,
    free_token_budget: null,
    free_token_window_seconds: null,
    active: 1,
    created_at: 0,
    unsupported_tools: null,
  };
}

function provider(id: string, apiKeys: string[]): ProviderRow {
  return {
    id,
    wire: "openai",
    base_url: "http://127.0.0.1:1",
    api_key_count: apiKeys.length,
    api_keys: apiKeys,
    timeout_ms: 30_000,
    max_concurrency: null,
    options_json: "{}",
    responses_native: 0,
  };
}

function byok(providerId: string, secret: string, position: number): ByokRow {
  return {
    id: `byok-${position}`,
    account_id: "account",
    provider_id: providerId,
    secret,
    label: secret,
    position,
    created_at: 0,
    refused_at: null,
  };
}

/**
 * A dispatcher over two providers with one pool key each (the first's key takes one attempt at
 * a time), and the failed attempts it reports.
 */
function setup() {
  const clock = new ManualClock(0);
  const first = { ...provider("first", ["pool-first"]), max_concurrency: 1 };
  const catalog: Catalog = {
    providers: new Map([
      ["first", first],
      ["second", provider("second", ["pool-second"])],
    ]),
    models: new Map(),
    routes: new Map(),
    tiers: new Map(),
  };
  const pools = new KeyPools(clock.now);
  const dispatcher = new Dispatcher(
    { getCatalog: () => catalog, markByokRefused: () => Promise.resolve() },
    pools,
    { http: new UpstreamHttp(), mockScript: new MockScript(), options: { now: Date.now } },
    clock.now,
  );
  const failed: string[] = [];
  dispatcher.upstreamFailed = (providerId, failure) => failed.push(`${providerId} ${failure.kind}`);
  /** Whether the first provider's key is free: taken and handed straight back. */
  const firstKeyFree = () => {
    try {
      pools.acquire(first).release("ok");
      return true;
    } catch {
      return false;
    }
  };
  return { clock, dispatcher, failed, firstKeyFree };
}

const routeOf = (...providerIds: string[]): Target => ({
  name: "chain",
  isRoute: providerIds.length > 1,
  models: providerIds.map((id) => model(`${id}-model`, id)),
});

const present = {
  aborted: false,
  reason: undefined,
  addEventListener() {},
  removeEventListener() {},
};
const options = (fields: Partial<DispatchOptions> = {}): DispatchOptions => ({
  byok: [],
  byokOnly: false,
  ...fields,
});

/** A call that fails each attempt with the next of `outcomes` (a value succeeds), noting its key. */
function scripted(outcomes: (UpstreamFailure | Error | string)[]) {
  const tried: string[] = [];
  const call = async (attempt: Attempt) => {
    tried.push(`${attempt.provider.id} ${attempt.credential.secret}`);
    const outcome = outcomes.shift();
    if (outcome instanceof Error) throw outcome;
    return { value: outcome ?? "answer", streaming: false };
  };
  return { tried, call };
}

describe("Dispatcher.dispatchWith", () => {
  it("tries the account's own keys in order, then the provider's pool, up to the first success", async () => {
    const { dispatcher } = setup();
    const { tried, call } = scripted([unavailable(), rateLimited(), "answer"]);
    const outcome = await dispatcher.dispatchWith(
      routeOf("first"),
      present,
      options({
        byok: [byok("first", "own-1", 0), byok("second", "other", 1), byok("first", "own-2", 2)],
      }),
      call,
    );
    expect(tried).toEqual(["first own-1", "first own-2", "first pool-first"]);
    expect(outcome).toMatchObject({
      result: "answer",
      attempt: { credential: { source: "pool" } },
    });
  });

  it("uses only the account's own keys when the account could not pay", async () => {
    const { dispatcher } = setup();
    const { tried, call } = scripted([unavailable()]);
    const failure = dispatcher.dispatchWith(
      routeOf("first"),
      present,
      options({ byok: [byok("first", "own", 0)], byokOnly: true }),
      call,
    );
    await expect(failure).rejects.toMatchObject({ status: 503, code: "upstream_error" });
    expect(tried).toEqual(["first own"]);
  });

  it("does not retry a direct dispatch to one provider with one key: its error is the answer", async () => {
    const { dispatcher } = setup();
    const { tried, call } = scripted([rejected(400, "context_length_exceeded"), "answer"]);
    const failure = dispatcher.dispatchWith(routeOf("first"), present, options(), call);
    await expect(failure).rejects.toMatchObject({ status: 400, code: "context_length_exceeded" });
    expect(tried).toEqual(["first pool-first"]);
  });

  it("moves to a route's next step when one fails, even on a rejection", async () => {
    const { dispatcher, failed } = setup();
    const { tried, call } = scripted([rejected(400), "answer"]);
    const outcome = await dispatcher.dispatchWith(
      routeOf("first", "second"),
      present,
      options(),
      call,
    );
    expect(tried).toEqual(["first pool-first", "second pool-second"]);
    expect(outcome.attempt.provider.id).toBe("second");
    expect(failed).toEqual(["first rejected"]);
  });

  it("cools a pool key the provider rate-limited, so the next request finds every key cooling", async () => {
    const { dispatcher } = setup();
    await dispatcher
      .dispatchWith(routeOf("first"), present, options(), scripted([rateLimited()]).call)
      .catch(() => {});
    const { tried, call } = scripted([]);
    const failure = dispatcher.dispatchWith(routeOf("first"), present, options(), call);
    await expect(failure).rejects.toMatchObject({ status: 503, code: "all_providers_failed" });
    await expect(failure).rejects.toMatchObject({ options: { retryAfter: 7 } });
    expect(tried).toEqual([]);
  });

  it("cools a pool key the provider refused (401) like a rate-limited one", async () => {
    const { clock, dispatcher } = setup();
    const refused = scripted([new UpstreamFailure("unauthorized", 503)]);
    await dispatcher
      .dispatchWith(routeOf("first"), present, options(), refused.call)
      .catch(() => {});
    const failure = dispatcher.dispatchWith(routeOf("first"), present, options(), refused.call);
    await expect(failure).rejects.toMatchObject({ code: "all_providers_failed" });
    clock.advance(30_000);
    const later = scripted(["answer"]);
    await dispatcher.dispatchWith(routeOf("first"), present, options(), later.call);
    expect(later.tried).toEqual(["first pool-first"]);
  });

  it("does not report a backend that could not carry the request as an upstream failure", async () => {
    const { dispatcher, failed } = setup();
    const { call } = scripted([new UnsupportedRequest("no tools here"), "answer"]);
    await dispatcher.dispatchWith(routeOf("first", "second"), present, options(), call);
    expect(failed).toEqual([]);
  });

  it("stops trying once the client has left", async () => {
    const { dispatcher } = setup();
    const { tried, call } = scripted([unavailable(), "answer"]);
    const gone = { ...present, aborted: true };
    const failure = dispatcher.dispatchWith(routeOf("first", "second"), gone, options(), call);
    await expect(failure).rejects.toBeInstanceOf(UpstreamFailure);
    expect(tried).toEqual(["first pool-first"]);
  });

  it("ends at once on an error that is not an upstream failure, freeing the key", async () => {
    const { dispatcher, firstKeyFree } = setup();
    const { tried, call } = scripted([new Error("bug"), "answer"]);
    const failure = dispatcher.dispatchWith(routeOf("first", "second"), present, options(), call);
    await expect(failure).rejects.toThrow("bug");
    expect(tried).toEqual(["first pool-first"]);
    expect(firstKeyFree()).toBe(true);
  });

  it("keeps a streaming attempt's key until its caller releases it", async () => {
    const { dispatcher, firstKeyFree } = setup();
    const streaming = async () => ({ value: "stream", streaming: true });
    const outcome = await dispatcher.dispatchWith(routeOf("first"), present, options(), streaming);
    expect(firstKeyFree()).toBe(false);
    outcome.attempt.credential.release("ok");
    expect(firstKeyFree()).toBe(true);
  });
});

describe("unexpectedStreamError", () => {
  const attempt: Attempt = {
    model: model("odd-model", "odd"),
    provider: provider("odd", ["sk-odd-provider-key"]),
    credential: { source: "pool", secret: "sk-odd-provider-key", release: () => {} },
    lastStep: true,
  };
  const lineOf = (err: unknown, signal = present): string[] => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      unexpectedStreamError(err, signal, attempt, "after its first piece");
      return errors.mock.calls.map((call) => call.join(" "));
    } finally {
      errors.mockRestore();
    }
  };

  it("names the error in one line, never its stack, the provider's words or its key", () => {
    let parseError: unknown;
    try {
      JSON.parse("the provider's words, sk-odd-provider-key");
    } catch (err) {
      parseError = err;
    }
    const property = new TypeError("Cannot create property 'x' on string 'sk-odd-provider-key'");
    const reading = new TypeError("Cannot read properties of undefined (reading 'parts')\n  at x");
    const lines = [parseError, property, reading].flatMap((err) => lineOf(err));
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      expect(line).toMatch(
        /^stream from provider odd \(model odd-model\) failed after its first piece: \w*Error: /,
      );
      expect(line).not.toMatch(/\n|the provider|sk-odd-provider-key/);
    }
    // A property's name says where it broke.
    expect(lines[2]).toMatch(/reading 'parts'\)$/);
  });

  it("leaves a provider's break, a refusal and a client that left to their own answers", () => {
    const gone = { ...present, aborted: true };
    expect(lineOf(new TypeError("late"), gone)).toEqual([]);
    for (const err of [unavailable(), rejected(400), new StreamBroken()])
      expect(lineOf(err)).toEqual([]);
  });
});
