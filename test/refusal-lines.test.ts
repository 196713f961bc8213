import { afterEach, describe, expect, it } from "vitest";
import { requestLinePrinter } from "../src/cli/request-lines.js";
import type { ConfigInput } from "../src/server/config/schema.js";
import {
  baseConfig,
  baseConfigWith,
  chat,
  KEY,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/** Every refusal the gateway decides says why on serve's line: its spec code, a 401 its reason. */

const gateways: TestGateway[] = [];
afterEach(async () => {
  for (const gw of gateways.splice(0)) await gw.close();
});

/** A gateway whose serve lines (the printer `gateway serve` uses) are kept, in both formats. */
async function gatewayWithLines(config: ConfigInput = baseConfig()) {
  const text: string[] = [];
  const json: string[] = [];
  const sink = (into: string[]) =>
    ({ isTTY: false, write: (chunk: string) => into.push(chunk) }) as unknown as NodeJS.WriteStream;
  const printText = requestLinePrinter("text", sink(text));
  const printJson = requestLinePrinter("json", sink(json));
  // Limits count in the clock's minute and day: on a manual clock a test's requests stay in one.
  const gw = await testGateway({
    config,
    clock: "manual",
    onRequest: (r) => {
      printText(r);
      printJson(r);
    },
  });
  gateways.push(gw);
  const lines = async (count: number) => {
    for (let i = 0; i < 200 && json.join("").split("\n").filter(Boolean).length < count; i++)
      await new Promise((r) => setTimeout(r, 10));
    return {
      text: text.join("").split("\n").filter(Boolean),
      json: json
        .join("")
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    };
  };
  return { gw, lines };
}

const tier = { free: { free_rpm: 1, free_daily: 1000, burst_spacing_ms: 0 } };

describe("serve's line for a refusal names its code", () => {
  it("model_not_found, subscribers_only, insufficient_balance, rate_limit_exceeded, free_quota_rpm", async () => {
    const { gw, lines } = await gatewayWithLines(
      baseConfigWith({
        accounts: (accounts) => [{ ...accounts[0], rpm_limit: 1 }, accounts[1]],
        tiers: tier,
      }),
    );
    const send = (body: object, key = KEY) =>
      post(gw, "/v1/chat/completions", body, { authorization: `Bearer ${key}` }).then((r) =>
        r.text().then(() => r.status),
      );
    expect(await send(chat("hi", "mock-nope"))).toBe(400);
    expect(await send(chat("hi", "mock-pro"))).toBe(403);
    expect(await send(chat("hi", "mock-gpt"), POOR_KEY)).toBe(402);
    expect(await send(chat("hi", "mock-gpt"))).toBe(200);
    expect(await send(chat("hi", "mock-gpt"))).toBe(429);
    expect(await send(chat("hi", "mock-gpt:free"))).toBe(200);
    expect(await send(chat("hi", "mock-gpt:free"))).toBe(429);
    const { text, json } = await lines(7);
    const codes = [
      "model_not_found",
      "subscribers_only",
      "insufficient_balance",
      null,
      "rate_limit_exceeded",
      null,
      "free_quota_rpm",
    ];
    expect(json.map((l) => l.error)).toEqual(codes);
    text.forEach((line, i) => {
      if (codes[i]) expect(line).toContain(`  ${codes[i]}  req_`);
    });
  });

  it("free_quota_daily apart from free_quota_rpm", async () => {
    const { gw, lines } = await gatewayWithLines(
      baseConfig({ tiers: { free: { free_rpm: 100, free_daily: 1, burst_spacing_ms: 0 } } }),
    );
    await (await post(gw, "/v1/chat/completions", chat("hi", "mock-gpt:free"))).text();
    await (await post(gw, "/v1/chat/completions", chat("hi", "mock-gpt:free"))).text();
    const { json } = await lines(2);
    expect(json.map((l) => l.error)).toEqual([null, "free_quota_daily"]);
  });

  it("a 401 says missing, unknown, revoked or suspended in the log, and no more in its body", async () => {
    const { gw, lines } = await gatewayWithLines();
    const { store } = gw.services;
    const asKey = (value: string | undefined) =>
      post(gw, "/v1/chat/completions", chat(), value ? { authorization: `Bearer ${value}` } : {});
    const bodies: string[] = [];
    const missing = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(chat()),
    });
    bodies.push(await missing.text());
    bodies.push(await (await asKey("kn-not-a-real-key-at-all-000000")).text());
    const { value, key } = store.createKey({ accountId: "acct", label: "tmp", kind: "standard" });
    await store.revokeKey(key.id);
    bodies.push(await (await asKey(value)).text());
    await store.setAccountStatus("acct", "suspended");
    bodies.push(await (await asKey(KEY)).text());
    const { json, text } = await lines(4);
    expect(json.map((l) => [l.status, l.error])).toEqual([
      [401, "key_missing"],
      [401, "key_unknown"],
      [401, "key_revoked"],
      [401, "account_suspended"],
    ]);
    expect(text[2]).toMatch(
      / {2}401 {2}POST \/v1\/chat\/completions {2}- .* {2}key_revoked {2}req_/,
    );
    // The plain-text bodies are the spec's, with no reason code in them.
    expect(bodies).toEqual([
      "missing API key: send Authorization: Bearer kn-... or x-api-key",
      "invalid API key: no gateway key has this value; check the kn-... key you sent (each key is shown once, when it is made)",
      "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
      "account suspended: ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then",
    ]);
  });

  it("a route's steps: which failed and which answered (text and whole-answer routes)", async () => {
    const { gw, lines } = await gatewayWithLines();
    const res = await post(gw, "/v1/chat/completions", chat("hi", "auto"));
    expect(res.status).toBe(200);
    await res.text();
    const { json, text } = await lines(1);
    expect(json[0].steps).toEqual(["mock-down 503", "mock-gpt ok"]);
    expect(text[0]).toContain("steps: mock-down 503 > mock-gpt ok");
    const images = await gatewayWithLines(
      baseConfigWith({
        models: [
          { name: "down-image", provider: "mock-down", modality: "image", price_per_unit: 1 },
        ],
        routes: () => [{ name: "image-auto", steps: ["down-image", "mock-image"] }],
      }),
    );
    const image = await post(images.gw, "/v1/images/generations", {
      model: "image-auto",
      prompt: "a cat",
    });
    expect(image.status).toBe(200);
    await image.text();
    expect((await images.lines(1)).json[0].steps).toEqual(["down-image 503", "mock-image ok"]);
    const direct = await post(gw, "/v1/chat/completions", chat("hi", "mock-gpt"));
    await direct.text();
    expect((await lines(2)).json[1].steps).toBeNull();
  });
});
