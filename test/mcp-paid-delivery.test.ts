import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { afterEach, describe, expect, it } from "vitest";
import { admin, idleMoney } from "./support/api.js";
import { deferred, sleep } from "./support/fake-upstream.js";
import { backends, baseConfig, gatewayOn, KEY, type TestGateway } from "./support/gateway.js";
import { mcpClient } from "./support/mcp.js";

/**
 * An MCP tool call is charged as its /v1 twin is, and what the twin was charged for is what the
 * call delivers: a suspension of the account after the twin answered (and was charged) does not
 * take the answer from the call (docs/metering.md, "Suspension ends open streams").
 */

/** The mock image model's price per image, in IDR (baseConfig). */
const IMAGE_PRICE_IDR = 500;
/** The longest a test waits for the gateway to reach a point it holds (a test that fails). */
const BOUND_MS = 8_000;

let gw: TestGateway | undefined;
const clients: Client[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) await client.close().catch(() => {});
  await gw?.close();
  gw = undefined;
});

type ToolResult = {
  content: { type: string; data?: string; mimeType?: string; uri?: string; text?: string }[];
  isError?: boolean;
};

describe.each(backends)(
  "generate_image when the account is suspended after the image was charged (%s)",
  (backend) => {
    it("still returns the image it was charged for, once", async () => {
      gw = await gatewayOn(backend, { config: baseConfig() });
      const { client } = await mcpClient(gw.url, KEY, "paid-delivery");
      clients.push(client);
      const before = await idleMoney(gw);
      // The stored image is read only once the account's suspension has ended the call's work
      // in flight: the /v1 request that made the image has answered, charged, by then.
      const suspensions = gw.services.suspensions;
      const watch = suspensions.watch.bind(suspensions);
      const cut = deferred();
      suspensions.watch = (accountId, stop) =>
        watch(accountId, () => {
          stop();
          cut.resolve();
        });
      const files = gw.services.repos.files;
      const find = files.find.bind(files);
      const reading = deferred();
      const suspended = deferred();
      files.find = async (id, accountId) => {
        reading.resolve();
        await Promise.race([suspended.promise, sleep(BOUND_MS)]);
        return find(id, accountId);
      };
      const call = client.callTool({
        name: "generate_image",
        arguments: { model: "mock-image", prompt: "a lighthouse", size: "256x256" },
      }) as Promise<ToolResult>;
      await Promise.race([reading.promise, sleep(BOUND_MS)]);
      expect((await admin(gw, "POST", "/accounts/acct/suspend")).status).toBe(200);
      expect(await Promise.race([cut.promise.then(() => "cut"), sleep(BOUND_MS)])).toBe("cut");
      suspended.resolve();
      const result = await Promise.race([call, sleep(BOUND_MS).then(() => undefined)]);
      expect(result, "the call's answer").toBeDefined();
      expect(result!.isError, JSON.stringify(result)).toBeFalsy();
      const [image, link] = result!.content;
      expect(image).toMatchObject({ type: "image", mimeType: "image/png" });
      expect(Buffer.from(image!.data!, "base64").subarray(1, 4).toString()).toBe("PNG");
      expect(link).toMatchObject({ type: "resource_link", mimeType: "image/png" });
      expect(link!.uri).toMatch(/\/v1\/files\/file/);

      // Read once reinstated (the account's own key reads its money and log).
      expect((await admin(gw, "POST", "/accounts/acct/reinstate")).status).toBe(200);
      const after = await idleMoney(gw);
      expect(after).toEqual({ balance: before.balance - IMAGE_PRICE_IDR * 1_000_000, held: 0 });
      const res = await fetch(`${gw.url}/v1/usage/requests?limit=5`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      const rows = ((await res.json()) as { data: Record<string, unknown>[] }).data;
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        endpoint: "images.generations",
        via: "mcp",
        state: "settled",
        cost_idr: IMAGE_PRICE_IDR,
      });
    });
  },
);
