import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { admin } from "./support/api.js";
import {
  ADMIN_KEY,
  baseConfigWith,
  KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { deliveredTokens } from "./support/metering.js";
import { createTestDatabase } from "./support/postgres.js";
import { type StreamEvent, streamEvents } from "./support/sse.js";

/**
 * The spec: a suspended account's keys stop working "at once, everywhere". A stream already open
 * ends with an error event in its style and is charged what it delivered; a revoked key's open
 * stream may finish (the spec promises the next request).
 */

type Style = "chat" | "messages" | "responses";
const WORDS = 400;

function body(style: Style, prompt: string) {
  const model = "slow-mock";
  if (style === "chat")
    return {
      path: "/v1/chat/completions",
      body: { model, stream: true, messages: [{ role: "user", content: prompt }] },
    };
  if (style === "messages")
    return {
      path: "/v1/messages",
      body: {
        model,
        stream: true,
        max_tokens: 4000,
        messages: [{ role: "user", content: prompt }],
      },
    };
  return { path: "/v1/responses", body: { model, stream: true, input: prompt } };
}

interface Read {
  deltas: string[];
  events: StreamEvent[];
}

/** Reads a stream; `after` runs once when `deltasBefore` text deltas arrived. */
async function readStream(
  res: Response,
  style: Style,
  deltasBefore: number,
  after: () => Promise<void>,
): Promise<Read> {
  const read: Read = { deltas: [], events: [] };
  let acted = false;
  for await (const { event, data } of streamEvents(res)) {
    if (data === "[DONE]") continue;
    read.events.push({ event, data });
    const text =
      style === "chat"
        ? data.choices?.[0]?.delta?.content
        : style === "messages"
          ? event === "content_block_delta" && data.delta?.text
          : event === "response.output_text.delta" && data.delta;
    if (text) read.deltas.push(text);
    if (!acted && read.deltas.length >= deltasBefore) {
      acted = true;
      await after();
    }
  }
  return read;
}

function post(gw: TestGateway, path: string, payload: unknown, key = KEY) {
  return fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(payload),
  });
}

async function newestRow(gw: TestGateway) {
  const res = await fetch(`${gw.url}/api/admin/requests?limit=1`, {
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
  });
  // biome-ignore lint/suspicious/noExplicitAny: the admin listing's row, read loosely
  return ((await res.json()) as { data: any[] }).data[0];
}

/** The row of the request made after `before` (the newest row then): settled after its client left. */
async function rowAfter(gw: TestGateway, before: { id: string } | undefined) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const row = await newestRow(gw);
    if ((row && row.id !== before?.id) || Date.now() > deadline) return row;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function balanceMicro(gw: TestGateway): Promise<number> {
  const res = await admin(gw, "GET", "/accounts/acct");
  return Math.round(((await res.json()) as { balance_idr: number }).balance_idr * 1e6);
}

describe.each(["sqlite", "postgres"] as const)("suspension with streams open, on %s", (backend) => {
  let gw: TestGateway;
  let savedSecret: string | undefined;

  beforeAll(async () => {
    savedSecret = process.env[secretKeyEnv];
    process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
    gw = await testGateway({
      db: backend === "postgres" ? await createTestDatabase() : undefined,
      // No keepalive commits the 200 early here: a stream suspended before its first piece is refused.
      keepaliveMs: 60_000,
      config: baseConfigWith({
        providers: [{ id: "slow", wire: "mock", mock: { chunk_interval_ms: 20 } }],
        models: [
          {
            name: "slow-mock",
            provider: "slow",
            price_input_per_mtok: 1_000,
            price_output_per_mtok: 2_000,
          },
        ],
      }),
    });
  });
  afterAll(async () => {
    await gw?.close();
    if (savedSecret === undefined) delete process.env[secretKeyEnv];
  });

  it.each(["chat", "messages", "responses"] as const)(
    "%s: an open stream ends with an error event saying so, charged what it delivered",
    async (style) => {
      const before = await balanceMicro(gw);
      const previous = await newestRow(gw);
      const req = body(style, `talk at length [[mock:words=${WORDS}]]`);
      const res = await post(gw, req.path, req.body);
      expect(res.status).toBe(200);
      const read = await readStream(res, style, 5, async () => {
        expect((await admin(gw, "POST", "/accounts/acct/suspend")).status).toBe(200);
      });
      try {
        // Ended long before its 400 words, with the style's error event last.
        expect(read.deltas.length).toBeLessThan(WORDS / 2);
        const last = read.events[read.events.length - 1];
        if (style === "chat") expect(last.data.error).toMatchObject({ code: "account_suspended" });
        if (style === "messages")
          expect(last).toMatchObject({
            event: "error",
            data: { error: { type: "authentication_error" } },
          });
        if (style === "responses") expect(last.event).toBe("response.failed");
        const row = await rowAfter(gw, previous);
        expect(row).toMatchObject({ error_code: "account_suspended", stream: true });
        expect(row.usage.output_tokens).toBeGreaterThanOrEqual(deliveredTokens(read.deltas));
        expect(row.cost_micro).toBe(
          row.usage.input_tokens * 1_000 + row.usage.output_tokens * 2_000,
        );
        expect(before - (await balanceMicro(gw))).toBe(row.cost_micro);
        // And the next request is refused as the spec says.
        const next = await post(gw, req.path, req.body);
        expect(next.status).toBe(401);
        expect(await next.text()).toBe(
          "account suspended: ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then",
        );
      } finally {
        expect((await admin(gw, "POST", "/accounts/acct/reinstate")).status).toBe(200);
      }
    },
  );

  it("a stream suspended before its first piece is refused with the plain-text 401, charged nothing", async () => {
    const before = await balanceMicro(gw);
    const previous = await newestRow(gw);
    const req = body("chat", "wait for it [[mock:delay=3000]]");
    const pending = post(gw, req.path, req.body);
    // The request is admitted (its hold shows) before the account is suspended.
    const deadline = Date.now() + 10_000;
    for (;;) {
      const quota = await (
        await fetch(`${gw.url}/v1/account/quota`, { headers: { authorization: `Bearer ${KEY}` } })
      ).json();
      if ((quota as { held_idr: number }).held_idr > 0 || Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect((await admin(gw, "POST", "/accounts/acct/suspend")).status).toBe(200);
    try {
      const res = await pending;
      expect(res.status).toBe(401);
      expect(await res.text()).toBe(
        "account suspended: ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then",
      );
      expect(await rowAfter(gw, previous)).toMatchObject({
        error_code: "account_suspended",
        cost_micro: 0,
      });
      expect(await balanceMicro(gw)).toBe(before);
    } finally {
      expect((await admin(gw, "POST", "/accounts/acct/reinstate")).status).toBe(200);
    }
  });

  it("a revoked key's open stream finishes; the key's next request is refused", async () => {
    const created = await admin(gw, "POST", "/accounts/acct/keys", { label: "to-revoke" });
    const { id, value: key } = (await created.json()) as { id: string; value: string };
    const req = body("chat", "a short one [[mock:words=30]]");
    const res = await post(gw, req.path, req.body, key);
    const read = await readStream(res, "chat", 3, async () => {
      expect((await admin(gw, "DELETE", `/keys/${id}`)).status).toBe(200);
    });
    expect(read.events.some((e) => e.data.choices?.[0]?.finish_reason === "stop")).toBe(true);
    expect(read.events.some((e) => e.data.error)).toBe(false);
    expect((await post(gw, req.path, req.body, key)).status).toBe(401);
  });
});

describe("suspension while a stream is kept alive before its first piece", () => {
  it("ends the committed stream with an error event in its style, charged nothing", async () => {
    const gw = await testGateway({ keepaliveMs: 100 });
    try {
      const res = await post(gw, "/v1/messages", {
        model: "mock-gpt",
        stream: true,
        max_tokens: 100,
        messages: [{ role: "user", content: "slow start [[mock:delay=5000]]" }],
      });
      // The 200 went out with the first keepalive comment.
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let text = decoder.decode((await reader.read()).value);
      expect(text).toContain(": keepalive");
      expect((await admin(gw, "POST", "/accounts/acct/suspend")).status).toBe(200);
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      expect(text).toContain("event: error");
      expect(text).toContain('"authentication_error"');
      expect(text).not.toContain("message_start");
      // Durable in the settlement journal before the event left; the row follows.
      const row = await rowAfter(gw, undefined);
      expect(row).toMatchObject({ error_code: "account_suspended", cost_micro: 0 });
    } finally {
      await gw.close();
    }
  });
});
