import { randomBytes } from "node:crypto";
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { IncomingMessage } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import {
  type GatewayConfig,
  type RunningGateway,
  type StageMessage,
  stageChannelName,
  startGateway,
} from "../src/index.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { chat, KEY, post } from "./support/gateway.js";
import { createTestDatabase } from "./support/postgres.js";

/**
 * A test that moves its manual clock back, as a user's suite may between tests (or NTP does to a
 * wall clock): the free requests after it, or waiting through it, are spaced by the tier's
 * `burst_spacing_ms` as always, and the clock stays where the test put it.
 */

const config = (burstSpacingMs: number, burstQueue = 8): GatewayConfig => ({
  providers: [
    { id: "mock", wire: "mock" },
    { id: "mock-minute", wire: "mock", mock: { job_seconds: 60 } },
  ],
  models: [
    { name: "app-chat:free", provider: "mock" },
    { name: "app-music", provider: "mock-minute", modality: "music", price_per_unit: 10 },
  ],
  tiers: {
    free: {
      free_rpm: 100,
      free_daily: 100,
      burst_spacing_ms: burstSpacingMs,
      burst_queue: burstQueue,
    },
  },
  accounts: [{ id: "app", balance_idr: 1_000, keys: [{ id: "ci", value: KEY }] }],
});
const free = () => chat("hi", "app-chat:free");
const noon = Date.parse("2030-01-01T12:00:00Z");
const hour = 3_600_000;

let gw: RunningGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

async function databaseOf(backend: "sqlite" | "postgres"): Promise<string> {
  if (backend === "sqlite") return ":memory:";
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  return createTestDatabase();
}

describe("a manual clock set back an hour", () => {
  for (const backend of ["sqlite", "postgres"] as const) {
    it(`awaited free requests after it are spaced from the new time, and the clock stays an hour back (${backend})`, async () => {
      gw = await startGateway({
        config: config(200),
        db: await databaseOf(backend),
        clock: "manual",
        now: () => noon,
      });
      for (let i = 0; i < 2; i++)
        expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
      gw.clock.set(noon - hour);
      const waited: (string | null)[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await post(gw, "/v1/chat/completions", free());
        expect(res.status).toBe(200);
        waited.push(res.headers.get("x-gateway-burst-wait-ms"));
      }
      // The queue starts over at the new time: the first has its slot at once.
      expect(waited).toEqual([null, "200", "200"]);
      expect(gw.clock.now()).toBe(noon - hour + 400);
    });

    it(`a tier that queues none (burst_queue: 0) still admits a free request a spacing after the last one, not an hour later (${backend})`, async () => {
      gw = await startGateway({
        config: config(200, 0),
        db: await databaseOf(backend),
        clock: "manual",
        now: () => noon,
      });
      expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
      gw.clock.set(noon - hour);
      gw.clock.advance(200);
      expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    });
  }

  it("a free request waiting for its slot when the clock goes back answers once the clock moves its spacing on (autoAdvance: false)", async () => {
    gw = await startGateway({
      config: config(10_000),
      clock: "manual",
      autoAdvance: false,
      now: () => noon,
    });
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    // The second request claims its slot in the same turn as its body is parsed (SQLite answers
    // at once): one turn after that stage, it waits on the clock.
    const parsed: IncomingMessage[] = [];
    const onStage = (message: unknown) => {
      const { stage, request } = message as StageMessage;
      if (stage === "parsed") parsed.push(request);
    };
    subscribe(stageChannelName, onStage);
    let second: Promise<Response>;
    try {
      second = post(gw, "/v1/chat/completions", free(), undefined, AbortSignal.timeout(10_000));
      for (let turn = 0; turn < 1_000 && parsed.length === 0; turn++)
        await new Promise((resolve) => setTimeout(resolve, 5));
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      unsubscribe(stageChannelName, onStage);
    }
    expect(parsed).toHaveLength(1);
    gw.clock.set(noon - hour);
    gw.clock.advance(10_000);
    const res = await second;
    expect(res.status).toBe(200);
    expect(res.headers.get("x-gateway-burst-wait-ms")).toBe("10000");
  });

  it("a music job submitted after it completes once the clock moves the job's duration on", async () => {
    gw = await startGateway({ config: config(200), clock: "manual", now: () => noon });
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    gw.clock.set(noon - hour);
    const submitted = await post(gw, "/v1/music/generations", {
      model: "app-music",
      prompt: "a song",
      seconds: 2,
    });
    expect(submitted.status).toBe(202);
    const { id } = (await submitted.json()) as { id: string };
    const running = gw;
    const status = async () => {
      const res = await fetch(`${running.url}/v1/music/generations/${id}`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      return ((await res.json()) as { status: string }).status;
    };
    const reaches = async (want: string) => {
      for (let turn = 0; turn < 200; turn++) {
        if ((await status()) === want) return true;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return false;
    };
    expect(await reaches("running")).toBe(true);
    gw.clock.advance(60_000);
    expect(await reaches("completed")).toBe(true);
  });
});
