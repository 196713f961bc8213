import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import {
  baseConfigWith,
  KEY,
  KEY2,
  POOR_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { mcpClient } from "./support/mcp.js";

/**
 * An agent that started a music or video job over MCP finds it again after a reconnect, when it
 * no longer has the id: `list_jobs` lists the account's jobs as the /v1 listings do (each call is
 * those /v1 requests, with the caller's key), newest first, a kind a page at a time.
 */

const MUSIC_PRICE = 30;
const VIDEO_PRICE = 40;

function config(): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "mock-hour", wire: "mock", mock: { job_seconds: 3600 } }],
    models: [
      { name: "hour-music", provider: "mock-hour", modality: "music", price_per_unit: MUSIC_PRICE },
      { name: "hour-video", provider: "mock-hour", modality: "video", price_per_unit: VIDEO_PRICE },
    ],
  });
}

interface CallResult {
  content: { type: string; text?: string }[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
}

interface Listed {
  jobs: { id: string; object: string; status: string; result?: { url: string } }[];
  has_more: boolean;
}

let gw: TestGateway | undefined;
const clients: Client[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) await client.close();
  await gw?.close();
  gw = undefined;
});

async function connect(key = KEY): Promise<Client> {
  const { client } = await mcpClient(gw!.url, key, "mcp-jobs-test");
  clients.push(client);
  // As an agent does: the tools first, so the SDK checks each structured result against its schema.
  await client.listTools();
  return client;
}

const call = async (client: Client, name: string, args: Record<string, unknown> = {}) =>
  (await client.callTool({ name, arguments: args })) as CallResult;

const listed = async (client: Client, args: Record<string, unknown> = {}): Promise<Listed> => {
  const result = await call(client, "list_jobs", args);
  expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
  return result.structuredContent as unknown as Listed;
};

describe("MCP list_jobs", () => {
  it("finds the jobs an agent started before it reconnected, newest first, per account, a kind a page at a time", async () => {
    gw = await testGateway({ config: config(), clock: "manual" });
    const first = await connect();
    const ids: string[] = [];
    for (const [tool, args] of [
      ["generate_video", { model: "hour-video", prompt: "waves", seconds: 1 }],
      ["generate_music", { model: "hour-music", prompt: "a tune", duration: 1 }],
      ["generate_video", { model: "hour-video", prompt: "clouds", seconds: 1 }],
    ] as const) {
      const started = await call(first, tool, args);
      expect(started.isError).toBeFalsy();
      ids.push((started.structuredContent as { id: string }).id);
      // Each a second apart, so newest first is one order.
      gw.clock.advance(1_000);
    }
    await first.close();

    // A new session, without the ids.
    const agent = await connect(KEY2);
    const all = await listed(agent);
    expect(all.jobs.map((job) => job.id)).toEqual([...ids].reverse());
    expect(all.has_more).toBe(false);
    expect(all.jobs.map((job) => job.object)).toEqual([
      "video.generation",
      "music.generation",
      "video.generation",
    ]);
    for (const job of all.jobs) expect(["queued", "running"]).toContain(job.status);
    const text = (await call(agent, "list_jobs")).content[0]!.text!;
    for (const id of ids) expect(text).toContain(id);

    const page = await listed(agent, { kind: "video", limit: 1 });
    expect([page.jobs.map((job) => job.id), page.has_more]).toEqual([[ids[2]], true]);
    const next = await listed(agent, { kind: "video", limit: 1, after: ids[2] });
    expect([next.jobs.map((job) => job.id), next.has_more]).toEqual([[ids[0]], false]);
    const cut = await listed(agent, { limit: 2 });
    expect([cut.jobs.map((job) => job.id), cut.has_more]).toEqual([[ids[2], ids[1]], true]);
    expect((await listed(agent, { kind: "video_extension" })).jobs).toEqual([]);

    // Another account's jobs are not listed.
    expect((await listed(await connect(POOR_KEY))).jobs).toEqual([]);

    // Once done, a job is listed with its result, linked on the gateway.
    gw.clock.advance(3_600_000);
    const polled = async () => (await listed(agent, { kind: "music" })).jobs[0]!;
    let music = await polled();
    for (let i = 0; i < 500 && music.status !== "completed"; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      music = await polled();
    }
    expect(music).toMatchObject({ id: ids[1], status: "completed" });
    expect(music.result!.url).toBe(`${gw.url}/v1/music/generations/${ids[1]}/content`);
  });

  it("a page cursor the listing does not hold is the /v1 route's refusal; one without a kind is the client's mistake", async () => {
    gw = await testGateway({ config: config(), clock: "manual" });
    const agent = await connect();
    const refused = await call(agent, "list_jobs", { kind: "music", after: "music_nope" });
    expect(refused.isError).toBe(true);
    expect(refused.content[0]!.text).toMatch(
      /^bad_request: .*after.*\(HTTP 400, request req_[\w-]+\)$/,
    );
    expect(refused.structuredContent).toMatchObject({
      error: { status: 400, code: "bad_request" },
    });

    const mistake = await agent
      .callTool({ name: "list_jobs", arguments: { after: "music_nope" } })
      .catch((err: unknown) => err);
    expect(mistake).toBeInstanceOf(McpError);
    expect((mistake as McpError).code).toBe(ErrorCode.InvalidParams);
    expect((mistake as McpError).message).toMatch(/after/);
  });
});
